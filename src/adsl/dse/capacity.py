"""Capacity under a latency SLO: for a configuration and a system, the largest Poisson request rate whose
p99 time per output token (and, if bounded, p99 time to first token) stays within the SLO, found by
bisection on the open-loop core between 0 and the system's saturation rate (as Vidur's capacity search
brackets and bisects the QPS). The same requests and unit-rate arrival gaps at every rate (common random
numbers), so the latencies move with the rate alone."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from adsl.dse.axes import WORKLOAD, configured
from adsl.dse.design import design
from adsl.dse.sweep import cost_proxy
from adsl.fitting.modelfile import read_model
from adsl.progress import progress
from adsl.settings import DseCapacity, LengthDist
from adsl.sim.experiment import Point, search_point
from adsl.sim.openloop import (
    LoadPoint,
    lognormal_lengths,
    open_loop_inputs,
    open_loop_point,
    simulate_point_closed,
    summarize,
)


def largest_within(ok: Callable[[float], bool], hi: float, steps: int) -> tuple[float, str]:
    """(largest x in (0, hi] with ``ok(x)``, what limits it) by bisection, for ``ok`` true below a
    threshold and false above: ``hi`` when ``ok(hi)`` (``throughput``: the SLO holds up to saturation);
    0 when even ``hi / 2**steps`` fails (``unreachable``); else the last passing midpoint (``slo``), within
    ``hi / 2**steps`` of the threshold."""
    if ok(hi):
        return hi, "throughput"
    lo_bound = hi / 2**steps
    if not ok(lo_bound):
        return 0.0, "unreachable"
    lo, up = lo_bound, hi
    for _ in range(steps):
        mid = (lo + up) / 2
        lo, up = (mid, up) if ok(mid) else (lo, mid)
    return lo, "slo"


def meets(summary, spec: DseCapacity) -> bool:
    """Whether an open-loop run's p99 latencies meet the SLO (a run that finished nothing does not)."""
    if not summary.completed or not np.isfinite(summary.tpot_p99_s):
        return False
    ttft = spec.ttft_p99_s is None or summary.ttft_p99_s <= spec.ttft_p99_s
    return summary.tpot_p99_s <= spec.tpot_p99_s and ttft


@dataclass(frozen=True)
class Probe:
    """A system at a configuration, ready for open-loop runs: its searched configuration, its saturation
    rate (requests per second, all requests queued at time 0) and ``run(rate)``, one open-loop run's
    summary (the same requests and unit-rate gaps at every rate)."""

    configuration: str
    hardware: str  # the system's hardware (catalogue name)
    saturation_req_s: float
    mean_output: float
    run: Callable[[float], LoadPoint]


def probe(wc, point: Point, models, taus, spec: DseCapacity, seed: int, output: LengthDist) -> Probe:
    """The system's configuration searched on the closed loop (``search_point``), then its open-loop inputs:
    ``spec.requests`` requests of the point's prompt length and log-normal ``output`` lengths (clipped to
    the sequence length) per replica."""
    sim = wc.settings.simulation
    found = search_point(wc, sim, point, models, taus)
    chosen = found.point
    x, n = sim.replicas, spec.requests
    rng = np.random.default_rng([seed, 5])
    prompt_len = min(sim.prompt_len, point.seq_len - 1)
    out = np.clip(lognormal_lengths(output, x * n, rng), 1, point.seq_len - prompt_len).astype(np.int64).reshape(x, n)
    prompt = np.full((x, n), prompt_len, np.int64)
    gaps = np.random.default_rng([seed, 6]).exponential(1.0, (x, n))
    inputs = open_loop_inputs(wc, sim, chosen, models, taus, prompt, out)
    saturation = float(np.mean(simulate_point_closed(inputs).throughput_tok_s)) / float(out.mean())

    def run(rate: float) -> LoadPoint:
        return summarize(open_loop_point(inputs, np.cumsum(gaps / rate, axis=1), spec.warmup), rate)

    return Probe(chosen.configuration.label, found.inputs.setup.system.name, saturation, float(out.mean()), run)


def system_capacity(wc, point: Point, models, taus, spec: DseCapacity, seed: int, output: LengthDist) -> dict:
    """One system's capacity at one configuration: the rate bisected between 0 and its saturation rate
    (``probe``, ``largest_within``) and its latencies there."""
    p = probe(wc, point, models, taus, spec, seed, output)
    runs: dict[float, LoadPoint] = {}

    def ok(rate: float) -> bool:
        runs[rate] = p.run(rate)
        return meets(runs[rate], spec)

    rate, limit = largest_within(ok, p.saturation_req_s, spec.steps)
    at = runs.get(rate)
    return {
        "capacity_req_s": rate,
        "capacity_tok_s": rate * p.mean_output,
        "saturation_req_s": p.saturation_req_s,
        "limited_by": limit,
        "tpot_p99_s": at.tpot_p99_s if at else float("nan"),
        "ttft_p99_s": at.ttft_p99_s if at else float("nan"),
        "e2e_p99_s": at.e2e_p99_s if at else float("nan"),
        "search_configuration": p.configuration,
        "hardware": p.hardware,
        "runs": len(runs),
    }


def capacity_table(ws, models: list[str], tau: str) -> pd.DataFrame:
    """One row per (configuration, system) of the sweep's first ``dse.capacity.configurations``
    configurations: the largest Poisson rate within the SLO and its latencies there. The workload's axes
    (``WORKLOAD``: pair, sequence length, category) stay at ``dse.base`` and the default categories, so the
    capacities compare hardware and serving settings on one workload."""
    from adsl.fitting.tau import read_taus
    from adsl.paths import models_by_pair

    dse, spec = ws.settings.dse, ws.settings.dse.capacity
    model_paths, taus = models_by_pair(models), read_taus(tau)
    axes = [a.name for a in dse.axes if a.name not in WORKLOAD]
    rows = []
    confs = design(dse).head(spec.configurations)
    loaded: dict = {}
    for _, conf in progress(list(confs.iterrows()), "dse capacity: configuration"):
        values = {a: conf[a] for a in axes}
        c = configured(ws, values, workload=False)
        if c.pair not in loaded:
            loaded[c.pair] = {k: read_model(f) for k, f in model_paths[c.pair].items()}
        output = c.ws.settings.simulation.open_loop.output_len
        for system in dse.systems:
            point = c.point(system)
            res = system_capacity(c.ws, point, loaded[c.pair], c.taus(taus), spec, ws.settings.seed, output)
            cost = cost_proxy(c.ws.hardware.system(res.pop("hardware")), dse.cost)
            rows.append(
                {"configuration": int(conf["configuration"]), **values, "system": system, **res, "cost_proxy": cost}
            )
    return pd.DataFrame(rows)
