"""Fit a runtime's overhead constants to measured decode speeds (non-negative least squares).

The model of one decode step is linear in the overheads: roofline time (no overheads) + kernels x
fixed cost per kernel + all-reduces x (base + (n - 1) x step). Only rows marked ``fit`` are used.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.optimize import brentq, nnls

from adsl.perf.cost import pass_cost
from adsl.perf.hardware import OP_CLASSES, HardwareCatalogue, RuntimeSpec, gpu_only_system
from adsl.perf.models import ModelCatalogue
from adsl.perf.operators import decoder_ops

ZERO_RUNTIME = RuntimeSpec("zero", dict.fromkeys(OP_CLASSES, 0.0), 0.0, 0.0)


def mean_context(row) -> float:
    """Mean KV length over the generated tokens of a decode run."""
    return row.prompt_len + row.new_tokens / 2.0


def design_row(models: ModelCatalogue, hw: HardwareCatalogue, row) -> tuple[float, np.ndarray]:
    """(roofline time without overheads, [kernels, all-reduces, all-reduce steps]) of one anchor's decode step."""
    model = models.model(row.model)
    system = gpu_only_system(hw.gpus[row.gpu], int(row.tp), ZERO_RUNTIME)
    ops = decoder_ops(model, row.batch, 1, mean_context(row), system.tensor_parallel)
    base = float(pass_cost(model, system, row.batch, 1, mean_context(row)).total_time_s)
    kernels = sum(op.repeat for op in ops if op.cls in OP_CLASSES)
    allreduces = sum(op.repeat for op in ops if op.cls == "allreduce") if row.tp > 1 else 0
    return base, np.array([kernels, allreduces, allreduces * (row.tp - 1)], dtype=float)


def fit_runtime(anchors: pd.DataFrame, models: ModelCatalogue, hw: HardwareCatalogue, name: str) -> RuntimeSpec:
    """Runtime overheads (per kernel, all-reduce base and step) fitted to the ``fit`` rows by relative NNLS."""
    rows = anchors[anchors["use"] == "fit"]
    if len(rows) < 3:
        raise ValueError(f"fitting 3 runtime constants needs >= 3 'fit' rows, got {len(rows)}")
    bases, design = zip(*(design_row(models, hw, r) for r in rows.itertuples()), strict=True)
    # Relative residuals: every anchor counts equally whatever its speed.
    measured = 1.0 / rows["tokens_per_s"].to_numpy()
    a = np.array(design) / measured[:, None]
    b = (measured - np.array(bases)) / measured
    (kernel_s, ar_base_s, ar_step_s), _ = nnls(a, b)
    return RuntimeSpec(name, dict.fromkeys(OP_CLASSES, float(kernel_s)), float(ar_base_s), float(ar_step_s))


def fit_eager_runtime(row, models: ModelCatalogue, hw: HardwareCatalogue, name: str = "eager") -> RuntimeSpec:
    """Host time per kernel of eager PyTorch from one measured single-GPU decode speed: with kernels
    issued asynchronously a decode step takes sum over kernels of max(GPU time, host time per kernel);
    the host time that gives the measured step time (all-reduces: none on one GPU)."""
    if int(row.tp) != 1:
        raise ValueError(f"the eager runtime is fitted to a single-GPU measurement, got TP{row.tp}")
    model = models.model(row.model)
    target = 1.0 / float(row.tokens_per_s) * float(row.batch)

    def step(kernel_s):
        runtime = RuntimeSpec(name, dict.fromkeys(OP_CLASSES, kernel_s), 0.0, 0.0, async_launch=True)
        system = gpu_only_system(hw.gpus[row.gpu], 1, runtime)
        return float(pass_cost(model, system, row.batch, 1, mean_context(row)).total_time_s) - target

    kernel_s = brentq(step, 0.0, target, xtol=1e-9)
    return RuntimeSpec(name, dict.fromkeys(OP_CLASSES, float(kernel_s)), 0.0, 0.0, async_launch=True)
