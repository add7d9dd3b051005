"""Predictions of the cost model next to each public anchor, as table rows (``adsl.figures.validation`` joins
them, with the simulator's speculative path, into one table: the simulator sits above the cost model)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from adsl.perf.cost import gpu_op_cost, pass_cost, pim_op_cost
from adsl.perf.hardware import HardwareCatalogue, gpu_only_system
from adsl.perf.models import ModelCatalogue
from adsl.perf.operators import FC_LAYER_OPS, attention, gemm
from adsl.perf.runtime_fit import mean_context

COLUMNS = ["anchor", "point", "metric", "measured", "predicted", "rel_error", "use", "source"]


def _row(anchor, point, metric, measured, predicted, use, source):
    return dict(
        anchor=anchor,
        point=point,
        metric=metric,
        measured=float(measured),
        predicted=float(predicted),
        rel_error=float(predicted) / float(measured) - 1.0,
        use=use,
        source=source,
    )


def decode_speed(anchor: str, runtime: str, anchors: pd.DataFrame, models: ModelCatalogue, hw) -> list[dict]:
    """Measured single-request decode speeds against the cost model with ``runtime``'s overheads."""
    out = []
    for r in anchors.itertuples():
        system = gpu_only_system(hw.gpus[r.gpu], int(r.tp), hw.runtimes[runtime])
        t = pass_cost(models.model(r.model), system, r.batch, 1, mean_context(r)).total_time_s
        out.append(_row(anchor, f"{r.model} TP{r.tp}", "tokens_per_s", r.tokens_per_s, r.batch / t, r.use, r.source))
    return out


def attacc_gpu(anchors: pd.DataFrame, models: ModelCatalogue, hw: HardwareCatalogue) -> list[dict]:
    """AttAcc's GPU per-token latency and its FC / all-reduce / attention / act+norm parts (ms) vs the cost model."""
    runtime = hw.runtimes["attacc"]
    out = []
    for r in anchors.itertuples():
        system = gpu_only_system(hw.gpus[r.gpu], int(r.gpus), runtime)
        cost = pass_cost(models.model(r.model), system, r.batch, 1, r.input_len + r.output_len / 2.0)
        by = cost.time_by("cls")
        parts = {
            "ms_per_token": cost.total_time_s,
            "fc_ms": by["fc"],
            "allreduce_ms": by["allreduce"],
            "attention_ms": by["attention"] + by["softmax"],
            "act_norm_ms": by["act"] + by["norm"],
        }
        for metric, pred in parts.items():
            use = "validate" if metric == "ms_per_token" else "component"
            out.append(
                _row("AttAcc GPU", f"{r.model} x{r.gpus}", metric, getattr(r, metric), pred * 1e3, use, r.source)
            )
    return out


def vidur(anchors: pd.DataFrame, models: ModelCatalogue, hw: HardwareCatalogue) -> list[dict]:
    """Vidur's measured time of one decoder layer's linear layers for a batch of tokens (ms) vs the cost model."""
    out = []
    for r in anchors.itertuples():
        system = gpu_only_system(hw.gpus[r.gpu], int(r.tp), hw.runtimes["attacc"])
        cost = pass_cost(models.model(r.model), system, r.tokens, 1, 0)
        t = sum(cost.time_s[n] for n in FC_LAYER_OPS if n in cost.time_s) / models.model(r.model).layers
        out.append(
            _row("Vidur MLP", f"{r.model} TP{r.tp} {r.tokens} tok", "time_ms", r.time_ms, t * 1e3, "validate", r.source)
        )
    return out


def llmcompass(anchors: pd.DataFrame, hw: HardwareCatalogue) -> list[dict]:
    """LLMCompass GEMM throughputs (TFLOP/s) at each M against the GPU roofline."""
    out = []
    for r in anchors.itertuples():
        op = gemm("gemm", np.asarray(float(r.m)), float(r.n), float(r.k), 2.0)
        t, _ = gpu_op_cost(op, hw.gpus[r.gpu], hw.runtimes["attacc"])
        out.append(_row("LLMCompass GEMM", f"M={r.m}", "tflops", r.tflops, op.flops / t / 1e12, "validate", r.source))
    return out


def pim_effective_bandwidth(hw: HardwareCatalogue, pim_name: str = "HBM3-PIM", kv_tokens: int = 4096) -> float:
    """Bytes of K per stack divided by the time to score one query against them (one unit per stack)."""
    pim = hw.pims[pim_name]
    op = attention("attn_score", np.asarray(1.0), np.asarray(float(kv_tokens)), 128.0, np.asarray(1.0), 2.0)
    t, _ = pim_op_cost(op, pim, 1)
    return float(op.stream_bytes / (t - pim.call_fixed_s))


def pim_attention(anchors: pd.DataFrame, hw: HardwareCatalogue) -> list[dict]:
    """AttAcc's published PIM ranges (bandwidth per stack, fixed cost per call), compared at their geometric mid."""
    out = []
    for r in anchors.itertuples():
        pim = hw.pims[r.pim]
        value = pim_effective_bandwidth(hw, r.pim) if r.quantity == "effective_bw_per_stack" else pim.call_fixed_s
        mid = np.sqrt(r.low * r.high)
        row = _row("AttAcc PIM", r.quantity, r.unit, mid, value, "range", r.source)
        row.update(low=r.low, high=r.high)
        out.append(row)
    return out
