"""First-order and total Sobol indices of a quantity over the sweep's axes, from the Saltelli design's
blocks (``adsl.dse.design``) with ``scipy.stats.sobol_indices`` (Saltelli 2010 / Jansen estimators) and
bootstrap (BCa) 95 % intervals over the base points, from a seeded generator."""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.stats import bootstrap, sobol_indices

from adsl.dse.design import BLOCK_A, BLOCK_B, ab_block


def saltelli_2010(f_a: np.ndarray, f_b: np.ndarray, f_ab: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first-order, total) indices of one output: Saltelli et al. 2010, Table 2 (b) and (f), the estimator
    ``scipy.stats.sobol_indices`` applies (its function refuses the bootstrap's resamples, whose size is
    not a power of 2). ``f_ab``: (axes, n)."""
    var = np.var([f_a, f_b])
    if var == 0:  # a constant output: no axis explains anything (scipy's convention)
        return np.zeros(f_ab.shape[0]), np.zeros(f_ab.shape[0])
    return np.mean(f_b * (f_ab - f_a), axis=-1) / var, 0.5 * np.mean((f_a - f_ab) ** 2, axis=-1) / var


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

    res = sobol_indices(func={"f_A": f_a[None], "f_B": f_b[None], "f_AB": f_ab[:, None, :]}, n=f_a.size)
    point = np.concatenate([res.first_order.ravel(), res.total_order.ravel()])

    # resamples of the outputs centred on the whole sample's mean, as scipy's own bootstrap of the indices
    mean = np.mean([f_a, f_b])
    c_a, c_b, c_ab = f_a - mean, f_b - mean, f_ab - mean

    def estimate(idx: np.ndarray) -> np.ndarray:
        return np.concatenate(saltelli_2010(c_a[idx], c_b[idx], c_ab[:, idx]))

    # scipy's SobolResult.bootstrap draws from numpy's global generator: resample the base points here with
    # our own, so the intervals are the same on every run
    boot = bootstrap(
        [np.arange(f_a.size)],
        estimate,
        vectorized=False,
        method="BCa",
        n_resamples=resamples,
        confidence_level=0.95,
        rng=np.random.default_rng(seed),
    ).confidence_interval
    k = len(axes)
    first, total = point[:k], point[k:]
    lo, hi = np.asarray(boot.low), np.asarray(boot.high)
    return pd.DataFrame(
        {
            "axis": axes,
            "first_order": first,
            "first_order_low": lo[:k],
            "first_order_high": hi[:k],
            "total_order": total,
            "total_order_low": lo[k:],
            "total_order_high": hi[k:],
        }
    )
