"""Sobol indices from the sweep's Saltelli design recover the Ishigami function's known indices."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from adsl.dse.design import design
from adsl.dse.sensitivity import indices, saltelli_2010
from tests.dse.helpers import sweep_workspace

# Ishigami (a = 7, b = 0.1) on [-pi, pi]^3: analytic first-order and total indices
FIRST = [0.3139, 0.4424, 0.0]
TOTAL = [0.5576, 0.4424, 0.2437]


def test_the_design_and_estimator_recover_ishigami_indices():
    span = {"low": 1.0, "high": 1.0 + 2 * np.pi}  # axes take physical values: [-pi, pi] shifted by 1 + pi
    axes = {"allreduce_step_s": span, "tau_scale": span, "pim_bandwidth": span}
    ws = sweep_workspace({"base_points": 4096, "seed": 3, "axes": axes, "winner_axes": ["tau_scale", "pim_bandwidth"]})
    d = design(ws.settings.dse)
    x1, x2, x3 = (d[a].to_numpy() - 1.0 - np.pi for a in axes)
    d["y"] = np.sin(x1) + 7 * np.sin(x2) ** 2 + 0.1 * x3**4 * np.sin(x1)
    out = indices(d, list(axes), resamples=200, seed=0)
    assert out.first_order.to_numpy() == pytest.approx(FIRST, abs=0.03)
    assert out.total_order.to_numpy() == pytest.approx(TOTAL, abs=0.03)
    assert (out.first_order_low <= out.first_order).all() and (out.first_order <= out.first_order_high).all()
    assert (out.total_order_high - out.total_order_low < 0.15).all()
    # the bootstrap draws from its own seeded generator: the same table on every run
    pd.testing.assert_frame_equal(indices(d, list(axes), resamples=200, seed=0), out, check_exact=True)
    # the resamples' estimator is scipy's on the whole sample
    blocks = {b: g.sort_values("sample").y.to_numpy() for b, g in d.groupby("block")}
    mean = np.mean([blocks["A"], blocks["B"]])
    blocks = {b: v - mean for b, v in blocks.items()}
    first, total = saltelli_2010(blocks["A"], blocks["B"], np.stack([blocks[f"AB:{a}"] for a in axes]))
    assert first == pytest.approx(out.first_order.to_numpy(), rel=1e-12)
    assert total == pytest.approx(out.total_order.to_numpy(), rel=1e-12)


def test_a_grid_has_no_sobol_indices():
    ws = sweep_workspace(
        {"sampling": "grid", "axes": {"batch": {"values": [8, 16]}}, "winner_axes": ["batch", "batch"]}
    )
    d = design(ws.settings.dse).assign(y=1.0)
    with pytest.raises(ValueError, match="need dse.sampling: sobol"):
        indices(d, ["batch"], 10, 0)
