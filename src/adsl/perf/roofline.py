"""Operators of a speculative pair placed on the GPU and PIM rooflines of one device (paper Fig. 6)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from adsl.perf.hardware import SystemSpec
from adsl.perf.models import ModelSpec, Pair
from adsl.perf.operators import decoder_ops

FAMILIES = {"attention": ("attn_score", "attn_context"), "fc": ("qkv", "out_proj", "ffn_up", "ffn_gate", "ffn_down")}


def device_rooflines(system: SystemSpec) -> dict[str, tuple[float, float]]:
    """(peak FLOP/s, bandwidth B/s) of one device's GPU and of its PIM stacks together."""
    pim = system.pim
    s = system.stacks_per_gpu
    return {
        "GPU": (system.gpu.peak_flops, system.weight_bw_bytes_s),
        "PIM": (pim.pe_flops * s, pim.internal_bw_bytes_s * s),
    }


def throughput_limit(model: ModelSpec, systems: list[SystemSpec], batch, tokens_per_step: int) -> np.ndarray:
    """The largest decode throughput (tokens/s) any of ``systems`` could reach for ``model``: every token
    costs its FC FLOPs (decoder linear layers + LM head) at the GPUs' peak x eta_compute, and a step
    that emits at most ``tokens_per_step`` tokens per request (d + 1 for speculative decoding) reads
    the weights once at the GPUs' weight bandwidth x eta_memory; the best of the systems on each term."""
    flops = 2.0 * model.params  # multiply-adds of every weight, once per token
    compute = max(s.gpus * s.gpu.peak_flops * s.gpu.eta_compute for s in systems)
    stream = max(s.gpus * s.weight_bw_bytes_s * s.gpu.eta_memory for s in systems)
    tokens = np.asarray(batch, dtype=float) * tokens_per_step
    step = np.maximum(tokens * flops / compute, model.params * model.bytes_per_param / stream)
    return tokens / step


def attainable(peak: float, bw: float, intensity) -> np.ndarray:
    """Roofline: FLOP/s attainable at ``intensity`` (FLOP/byte) under ``peak`` FLOP/s and ``bw`` B/s."""
    return np.minimum(peak, np.asarray(intensity) * bw)


def crossover_intensity(system: SystemSpec, rooflines: dict | None = None) -> float:
    """Smallest intensity at which the GPU's roofline reaches the PIM's: PIM benefit below it, GPU
    benefit above (inf when the GPU never catches up). ``rooflines`` defaults to the peak ones."""
    (g_peak, g_bw), (p_peak, p_bw) = (rooflines or device_rooflines(system)).values()
    grid = np.logspace(-3, 6, 90001)
    ahead = attainable(g_peak, g_bw, grid) >= attainable(p_peak, p_bw, grid)
    return float(grid[np.argmax(ahead)]) if ahead.any() else float("inf")


def roofline_points(pair: Pair, system: SystemSpec, points, context_len: int) -> pd.DataFrame:
    """FC / attention operator families of target and draft at each (batch, draft length) point on the
    system's GPU and PIM rooflines (the paper's Fig. 6)."""
    roofs = device_rooflines(system)
    rows = []
    for b, d in points:
        for role, model, q in (("TLM", pair.target, d + 1), ("DLM", pair.draft, 1)):
            ops = {op.name: op for op in decoder_ops(model, b, q, context_len)}
            for family, names in FAMILIES.items():
                sel = [ops[n] for n in names if n in ops]
                flops = float(sum(np.sum(o.flops) for o in sel))
                nbytes = float(sum(np.sum(o.bytes) for o in sel))
                ai = flops / nbytes
                perf = {dev: float(attainable(pk, bw, ai)) for dev, (pk, bw) in roofs.items()}
                rows.append(
                    dict(
                        point=f"({b}, {d})",
                        batch=b,
                        draft_length=d,
                        model=role,
                        operator=family,
                        label=f"{role} {'Attn' if family == 'attention' else 'FC'}",
                        intensity_flop_per_byte=ai,
                        gpu_attainable_tflops=perf["GPU"] / 1e12,
                        pim_attainable_tflops=perf["PIM"] / 1e12,
                        better_device="PIM" if perf["PIM"] > perf["GPU"] else "GPU",
                    )
                )
    return pd.DataFrame(rows)
