"""quantile_table: the 4096 mid-point quantiles of the selected confidence distribution and their logits.

Every expectation is computed here from scipy: the selected model's ppf at (i + 0.5) / 4096 (a Beta mixture
is inverted by bisection of its scipy CDF), read at expit(logit(u) + warp) when warped, clipped to
[1e-6, 1 - 1e-6], with logits equal to scipy.special.logit of the clipped values.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import special, stats

from adsl.fitting.generator import quantile_table

LO, HI = 1e-6, 1 - 1e-6
MID = (np.arange(4096) + 0.5) / 4096
# a three-component mixture like the one fit_confidence selects for the benchmark sample
# (0.75 Beta(8, 1) + 0.25 Beta(2, 2)), rounded
MIXTURE = {"w": [0.14, 0.73, 0.13], "a": [2.5, 5.1, 39.0], "b": [4.0, 0.93, 2.06]}
# fit_confidence returns every candidate; only the selected one may be read
DECOYS = {"beta": {"a": 1.0, "b": 1.0}, "logit_normal": {"mu": 0.0, "sigma": 1.0}, "beta_mixture3": MIXTURE}


def model(selected: str, params: dict) -> dict:
    """A confidence model dict shaped like fit_confidence's output, selecting ``selected``."""
    cands = {name: {"params": p, "loglik": 0.0, "k": 2, "aic": 0.0} for name, p in DECOYS.items()}
    cands[selected] = {"params": params, "loglik": 0.0, "k": 2, "aic": 0.0}
    return {"selected": selected, "candidates": cands}


def raw_ppf(selected: str, params: dict, u: np.ndarray) -> np.ndarray:
    """The selected distribution's quantiles at ``u`` from scipy (mixtures: bisection of the CDF in logit space)."""
    if selected == "beta":
        return stats.beta.ppf(u, params["a"], params["b"])
    if selected == "logit_normal":
        return special.expit(stats.norm.ppf(u, params["mu"], params["sigma"]))

    def cdf(x):
        return sum(w * stats.beta.cdf(x, a, b) for w, a, b in zip(params["w"], params["a"], params["b"], strict=True))

    lo, hi = np.full_like(u, -40.0), np.full_like(u, 40.0)
    for _ in range(60):
        mid = (lo + hi) / 2
        below = cdf(special.expit(mid)) < u
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return special.expit((lo + hi) / 2)


def warped(warp: float) -> np.ndarray:
    """The quantile levels read for ``warp``: u at expit(logit(u) + warp)."""
    return special.expit(special.logit(MID) + warp)


@pytest.mark.parametrize(
    ("selected", "params"), [("beta", {"a": 2.5, "b": 4.0}), ("logit_normal", {"mu": 1.5, "sigma": 1.2})]
)
def test_default_warp_reads_the_unwarped_mid_point_quantiles(selected, params):
    """Without a warp argument the table is the selected model's ppf at (i + 0.5) / 4096 (warp 0), and
    passing warp = 0.0 gives the identical table."""
    conf = model(selected, params)
    q, lq = quantile_table(conf)
    expected = np.clip(raw_ppf(selected, params, MID), LO, HI)
    np.testing.assert_allclose(q, expected, rtol=1e-6, atol=0)
    np.testing.assert_allclose(lq, special.logit(expected), rtol=1e-6, atol=1e-6)
    q0, lq0 = quantile_table(conf, 0.0)
    np.testing.assert_array_equal(q, q0)
    np.testing.assert_array_equal(lq, lq0)


@pytest.mark.parametrize("warp", [-1.5, 1.5])
def test_warp_reads_each_quantile_at_the_shifted_level(warp):
    """With a warp, quantile u of the selected mixture is read at expit(logit(u) + warp); a positive warp
    gives a stochastically larger table (every quantile at least the unwarped one), a negative a smaller."""
    conf = model("beta_mixture3", MIXTURE)
    q, lq = quantile_table(conf, warp)
    expected = np.clip(raw_ppf("beta_mixture3", MIXTURE, warped(warp)), LO, HI)
    np.testing.assert_allclose(q, expected, rtol=0, atol=1e-5)  # the code inverts the CDF on a grid
    np.testing.assert_allclose(lq, special.logit(expected), rtol=0, atol=1e-4)
    q0, _ = quantile_table(conf)
    assert np.all(np.sign(warp) * (q.astype(float) - q0) >= 0)
    assert np.sign(warp) * (q.mean() - q0.mean()) > 0.01


@pytest.mark.parametrize(
    ("selected", "params", "warp", "end"),
    [
        ("beta", {"a": 0.3, "b": 5.0}, 0.0, LO),
        ("beta", {"a": 5.0, "b": 0.3}, 0.0, HI),
        ("beta_mixture3", MIXTURE, 20.0, HI),
    ],
)
def test_values_are_clipped_to_1e_6_from_either_end(selected, params, warp, end):
    """A distribution with mass piled near 0 (Beta(0.3, 5)) or near 1 (Beta(5, 0.3), or the benchmark mixture
    warped by +20) has its table clipped to [1e-6, 1 - 1e-6] (never 0 or 1), with the logits of the clipped
    values: finite, and logit(1e-6) or logit(1 - 1e-6) at that end."""
    raw = raw_ppf(selected, params, warped(warp))
    beyond = raw.min() < 1e-9 if end == LO else raw.max() > 1 - 1e-9
    assert beyond  # the clip has something to do
    q, lq = quantile_table(model(selected, params), warp)
    expected = np.clip(raw, LO, HI)
    np.testing.assert_allclose(q, expected, rtol=1e-6, atol=0)
    np.testing.assert_allclose(lq, special.logit(expected), rtol=1e-5, atol=1e-5)
    assert np.all(np.isfinite(lq))
    at_end = (q.min(), lq.min()) if end == LO else (q.max(), lq.max())
    assert at_end[0] == np.float32(end)
    assert at_end[1] == pytest.approx(special.logit(end), rel=1e-6)


def test_tables_are_float32():
    """Both tables (values and logits) are float32 arrays of the 4096 quantiles."""
    q, lq = quantile_table(model("beta_mixture3", MIXTURE), 0.5)
    assert q.dtype == np.float32
    assert lq.dtype == np.float32
    assert q.shape == lq.shape == (4096,)
