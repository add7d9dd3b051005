"""Map a measured acceptance model onto a paper pair with one calibration parameter per category.

The parameter is a shift of the calibration curve's intercept (``joint.a``): it moves every draft
token's acceptance log-odds by the same amount and leaves the measured shape (confidence spread,
request heterogeneity, dependence along the text) as profiled. It is chosen by least squares against
the paper's Fig. 4a acceptance rates at d = 4, 8, 12, on streams drawn with fixed seeds.
"""

from __future__ import annotations

import numpy as np
from scipy import optimize

from adsl.fitting.generator import acceptance_rate, draw_streams


def rates_for_shift(model: dict, shift: float, lengths, n: int, t: int, seed: int) -> np.ndarray:
    _, acc = draw_streams(model, n, t, np.random.default_rng(seed), shift=shift)
    return np.array([acceptance_rate(acc, d) for d in lengths])


def calibrate_shift(model: dict, target: dict[int, float], n: int = 2000, t: int = 256, seed: int = 0) -> dict:
    lengths = sorted(target)
    goal = np.array([target[d] for d in lengths])

    def loss(shift):
        return float(((rates_for_shift(model, shift, lengths, n, t, seed) - goal) ** 2).sum())

    res = optimize.minimize_scalar(loss, bounds=(-8.0, 8.0), method="bounded", options={"xatol": 1e-3})
    rates = rates_for_shift(model, float(res.x), lengths, n, t, seed)
    return {
        "shift": float(res.x),
        "target_rates": {str(d): float(v) for d, v in zip(lengths, goal, strict=True)},
        "achieved_rates": {str(d): float(v) for d, v in zip(lengths, rates, strict=True)},
        "max_abs_error": float(np.max(np.abs(rates - goal))),
        "streams": n,
        "positions": t,
        "seed": seed,
    }
