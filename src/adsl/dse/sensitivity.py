"""First-order and total Sobol indices of a quantity over the sweep's axes, from the Saltelli design's
blocks (``adsl.dse.design``) with ``scipy.stats.sobol_indices`` (Saltelli 2010 / Jansen estimators) and
bootstrap 95 % intervals over the base points."""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.stats import sobol_indices

from adsl.dse.design import BLOCK_A, BLOCK_B, ab_block


def indices(values: pd.DataFrame, axes: list[str], resamples: int, seed: int, column: str = "y") -> pd.DataFrame:
    """One row per axis: first-order and total indices of ``values[column]`` and their bootstrap 95 %
    intervals. ``values``: one row per configuration of a Saltelli design (``block``, ``sample``)."""
    if set(values["block"]) == {"grid"}:
        raise ValueError("Sobol indices need dse.sampling: sobol (a Saltelli design), not a grid")

    def block(name: str) -> np.ndarray:
        part = values[values["block"] == name].sort_values("sample")
        if part.empty:
            raise ValueError(f"the design has no block {name!r}")
        return part[column].to_numpy(float)

    f_a, f_b = block(BLOCK_A), block(BLOCK_B)
    f_ab = np.stack([block(ab_block(a)) for a in axes])
    res = sobol_indices(
        func={"f_A": f_a[None], "f_B": f_b[None], "f_AB": f_ab[:, None, :]},
        n=f_a.size,
        rng=np.random.default_rng(seed),
    )
    boot = res.bootstrap(confidence_level=0.95, n_resamples=resamples)
    first, total = boot.first_order.confidence_interval, boot.total_order.confidence_interval
    return pd.DataFrame(
        {
            "axis": axes,
            "first_order": res.first_order.ravel(),
            "first_order_low": np.ravel(first.low),
            "first_order_high": np.ravel(first.high),
            "total_order": res.total_order.ravel(),
            "total_order_low": np.ravel(total.low),
            "total_order_high": np.ravel(total.high),
        }
    )
