"""Time, energy and device busy time of one forward pass of a whole batch on a system, with the
system's parallelism: tensor parallel (inside the cost model), pipeline stages over micro-batches,
or GPU/PIM overlap of sub-batches (AttAcc-style). Arrays in, arrays out."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from adsl.perf.cost import pass_cost
from adsl.perf.hardware import SystemSpec
from adsl.perf.models import ModelSpec


@dataclass(frozen=True)
class Schedule:
    micro_batches: int = 1  # pipeline micro-batches (pipeline_stages > 1) or overlapped sub-batches
    overlap: bool = False  # overlap GPU and PIM work of different sub-batches (no pipeline stages)


@dataclass(frozen=True)
class BatchCost:
    time_s: np.ndarray
    energy_j: np.ndarray
    busy_s: dict[str, np.ndarray]  # device -> busy time
    by_class_s: dict[str, np.ndarray]  # operator class -> time (serial sum, before overlap)


def batch_pass(model: ModelSpec, system: SystemSpec, n_req, q, ctx, mapping: dict, schedule: Schedule) -> BatchCost:
    """``n_req`` requests (array) with ``q`` tokens each over ``ctx`` cached tokens (mean per request)."""
    n_req = np.asarray(n_req, dtype=float)
    m = max(1, schedule.micro_batches)
    per = np.maximum(n_req / m, 1e-9)
    cost = pass_cost(model, system, per, q, ctx, mapping)
    live = n_req > 0
    dev = cost.time_by("device")
    busy = {k: np.where(live, v * m, 0.0) for k, v in dev.items()}
    by_cls = {k: np.where(live, v * m, 0.0) for k, v in cost.time_by("cls").items()}
    total = cost.total_time_s
    s = system.pipeline_stages
    if s > 1:
        time = (m + s - 1) / s * total
    elif schedule.overlap and m > 1:
        gpu = dev.get("gpu", 0.0) + dev.get("link", 0.0)
        pim = dev.get("pim", 0.0)
        time = np.maximum(m * gpu, m * pim) + np.minimum(gpu, pim)
    else:
        time = m * total
    return BatchCost(np.where(live, time, 0.0), np.where(live, cost.total_energy_j * m, 0.0), busy, by_cls)
