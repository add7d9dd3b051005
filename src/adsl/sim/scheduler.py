"""Arithmetic-intensity-aware operator scheduler (SADDLE): DLM attention stays on PIM and TLM FC on
the GPU; DLM FC and TLM attention go, pass by pass, to PIM when their estimated arithmetic intensity is
below a threshold, else to the GPU. Thresholds come from the cost model, not hand-set numbers: the
intensity at which the model's own pass times on the two devices cross. (The crossover of the effective
rooflines alone, ``roofline_threshold``, ignores the GPU's fixed cost per kernel, which keeps small
passes on PIM longer; it is reported for comparison.)"""

from __future__ import annotations

import numpy as np

from adsl.perf.hardware import SystemSpec
from adsl.perf.models import ModelSpec
from adsl.perf.operators import decoder_ops
from adsl.perf.roofline import FAMILIES, crossover_intensity


def effective_rooflines(system: SystemSpec) -> dict[str, tuple[float, float]]:
    """(attainable peak FLOP/s, attainable bandwidth B/s) of one device's GPU and PIM stacks."""
    gpu, pim, s = system.gpu, system.pim, system.stacks_per_gpu
    return {
        "GPU": (gpu.peak_flops * gpu.eta_compute, system.weight_bw_bytes_s * gpu.eta_memory),
        "PIM": (pim.pe_flops * s, pim.internal_bw_bytes_s * s),
    }


def roofline_threshold(system: SystemSpec) -> float:
    """Smallest intensity at which the GPU's effective roofline reaches the PIM's."""
    return crossover_intensity(system, effective_rooflines(system))


def family_intensity(model: ModelSpec, family: str, n_req, q, ctx) -> np.ndarray:
    """FLOPs per byte of an operator family (fc or attention) in one pass, from the descriptors."""
    ops = [op for op in decoder_ops(model, n_req, q, ctx) if op.name in FAMILIES[family]]
    return sum(op.flops for op in ops) / sum(op.bytes for op in ops)


def intensity_threshold(model: ModelSpec, system: SystemSpec, family: str, micro_batching=None, ctx: float = 1024.0):
    """Intensity at which the family's pass is as fast on the GPU as on PIM under the cost model: FC
    scanned over 1..1024 tokens (one per request), attention over 1..64 query tokens per request."""
    from adsl.settings import MicroBatching
    from adsl.sim.timing import batch_pass

    micro_batching = micro_batching or MicroBatching()
    if family == "fc":
        n, q = np.arange(1, 1025, dtype=float), 1.0
    else:
        n, q = 16.0, np.arange(1, 65, dtype=float)
    other = {"fc": "attention", "attention": "fc"}[family]
    t = {
        dev: batch_pass(
            model, system, n, q, ctx, {family: dev, other: "gpu" if family == "attention" else "pim"}, micro_batching
        ).time_s
        for dev in ("gpu", "pim")
    }
    ai = family_intensity(model, family, n, q, ctx)
    gpu_wins = t["gpu"] <= t["pim"]
    return float(ai[np.argmax(gpu_wins)]) if gpu_wins.any() else float("inf")
