"""Accounting shared by the engines: per-key sums and the finishing of an engine's result (static
energy, rates, the measured window)."""

from __future__ import annotations

import numpy as np

from adsl.sim.batching import window_sum


def accumulate(acc: dict, key: str, value) -> None:
    """acc[key] += value, starting from 0."""
    acc[key] = acc.get(key, 0.0) + value


def finish(setup, res: dict, log: dict, window, per_iteration: np.ndarray) -> dict:
    """Static energy, rates and the measured window of an engine's result (shared by the engines)."""
    if setup.static_power:  # boards and stacks draw their static power over the wall time measured
        res["energy_j"] = res["energy_j"] + setup.system.static_power_w * res["time_s"]
    res["throughput_tok_s"] = res["tokens"] / res["time_s"]
    res["tokens_per_j"] = res["tokens"] / res["energy_j"]
    start = np.zeros(per_iteration.shape[1]) if window is None else (per_iteration * (np.cumsum(window, 0) == 0)).sum(0)
    res["window"] = {
        "start_s": start,
        "end_s": start + res["time_s"],
        "completed": log["done"].sum(axis=0) if window is None else window_sum(log["done"], window),
        "total_s": per_iteration.sum(axis=0),
        "total_tokens": log["emitted"].sum(axis=0),
        "request_rounds": window_sum(log["n"], window),  # requests in flight, summed over the iterations
    }
    res["log"] = log  # per iteration (iterations, X): busy slots, emitted, completed, admitted
    return res
