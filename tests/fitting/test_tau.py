"""The paper's offline tau procedure (adsl.fitting.tau)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adsl.fitting.tau import calibrate_tau, success_at
from adsl.profiling import replay as scalar


def calibrated_streams(n, t, seed, power=1.0):
    """Acceptance probability conf ** power, independently per position (1: calibrated; < 1: the draft
    is underconfident, so tokens pass more often than H says)."""
    rng = np.random.default_rng(seed)
    conf = rng.beta(6, 1, (n, t))
    return conf, rng.random((n, t)) < conf**power


@settings(max_examples=30, deadline=None)
@given(st.floats(0.05, 0.95), st.integers(1, 8), st.integers(0, 2**31 - 1))
def test_success_counts_the_tokens_drafted_above_tau(tau, d_max, seed):
    conf, acc = calibrated_streams(3, 40, seed)
    kept = ok = drafted = accepted = 0
    for c, m in zip(conf, acc, strict=True):
        lengths = scalar.running_product_lengths(c, tau, d_max)
        for step in scalar.replay(m, lengths).itertuples():
            d, a = int(step.drafted), int(step.accepted)
            above = int(np.sum(np.cumprod(c[step.start : step.start + d]) >= tau))  # H >= tau: a prefix
            kept, ok = kept + above, ok + min(a, above)
            drafted, accepted = drafted + d, accepted + a
    success, acceptance = success_at(conf, acc, tau, d_max)
    assert success == pytest.approx(ok / max(kept, 1))
    assert acceptance == pytest.approx(accepted / max(drafted, 1))


def test_underconfident_draft_gives_a_feasible_tau_and_a_lower_target_drafts_longer():
    # with calibrated confidence a token passes with probability H itself, so a 20 % window of H
    # reaches 90 % success only at its very top; an underconfident draft leaves room
    conf, acc = calibrated_streams(400, 128, 1, power=0.5)
    strict = calibrate_tau(conf, acc, d_max=12, target=0.9)
    loose = calibrate_tau(conf, acc, d_max=12, target=0.75)
    assert strict["feasible"] and strict["success_rate"] >= 0.9
    assert strict["window"][0] <= strict["tau"] <= strict["window"][1]
    assert strict["acceptance"] < strict["success_rate"]  # the crossing token is verified too
    assert loose["tau"] <= strict["tau"] and loose["mean_draft"] >= strict["mean_draft"]


def test_no_window_reaches_the_target():
    conf, acc = calibrated_streams(100, 64, 2)
    res = calibrate_tau(conf, np.zeros_like(acc), d_max=8)
    assert not res["feasible"] and res["window"] is None
