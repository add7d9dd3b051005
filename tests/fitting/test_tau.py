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
    assert not res["feasible"] and res["window"] is None and res["tau"] == 1.0
    # the curve is still reported: every drafted position of fixed d = 8 drafting, none passed
    assert res["curve"]["count"].sum() > 0 and np.nansum(res["curve"]["success"]) == 0


def _products(c, start, j, boost):
    """H of the first j tokens of a draft from ``start``: the first at its confidence, the later ones with
    the continuation boost on their logit (written out, not through adsl.fitting.generator)."""
    later = [1 / (1 + (1 - x) / x * np.exp(-boost)) for x in c[start + 1 : start + j]]
    return float(c[start] * np.prod(later))


def _lengths(c, tau, d_max, boost):
    """The running-product rule from every start: stop at the first token with H < tau (drafted too)."""
    out = []
    for i in range(len(c)):
        k = min(d_max, len(c) - i)
        out.append(next((j for j in range(1, k + 1) if _products(c, i, j, boost) < tau), k))
    return np.array(out)


def _brute_force_tau(conf, acc, d_max, window=0.2, target=0.9, grid=21, boost=0.0):
    """The paper's procedure written out with the scalar replay: every 20 % window of H, every grid
    point. Returns (window, tau, feasible)."""
    c64 = conf.astype(np.float64)
    h, passed = [], []
    for c, m in zip(c64, acc, strict=True):
        for step in scalar.replay(m, np.full(len(c), d_max)).itertuples():
            for j in range(1, d_max + 1):
                h.append(_products(c, step.start, j, boost))
                passed.append(step.accepted >= j)
    h, passed = np.array(h), np.array(passed)

    def mean_draft(tau):
        return np.mean([_lengths(c, tau, d_max, boost) for c in c64])

    windows = []
    for k in range(int(round((1 - window) / 0.05)) + 1):
        lo = round(0.05 * k, 10)
        sel = (h >= lo) & (h <= lo + window)
        if sel.sum() >= 20 and passed[sel].mean() >= target:
            windows.append((mean_draft(lo), -k, lo))
    if not windows:
        return None
    lo = max(windows)[2]  # the longest mean draft; the lowest window on a tie
    points, rates = [], []
    for i, tau in enumerate(np.linspace(lo, lo + window, grid)):
        rate = success_at(conf, acc, tau, d_max, boost)[0]
        rates.append((rate, -i, tau))
        if rate >= target:
            points.append((mean_draft(tau), -i, tau))
    if points:
        return lo, max(points)[2], True
    return lo, max(rates)[2], False  # no grid point reaches the target: the one with the best success


@pytest.mark.parametrize(("power", "seed", "boost"), [(0.5, 3, 0.0), (0.35, 4, 0.0), (0.6, 5, 0.0), (0.5, 3, 0.8)])
def test_tau_is_the_window_and_grid_point_a_brute_force_search_picks(power, seed, boost):
    """Pins which window and which grid point win: the longest mean draft among the windows (grid
    points) that reach the target success rate; with a continuation boost (a calibration's later-token
    term) at every step, H, the window, the grid and the mean drafts all see it."""
    conf, acc = calibrated_streams(30, 48, seed, power=power)
    res = calibrate_tau(conf, acc, d_max=6, target=0.9, boost=boost)
    want = _brute_force_tau(conf, acc, 6, boost=boost)
    assert want is not None and want[2] and res["feasible"]
    assert res["window"][0] == pytest.approx(want[0])
    assert res["tau"] == pytest.approx(want[1])
    # a different window or grid point would draft less: the choice is not a tie
    lengths = [_lengths(c, res["tau"], 6, boost) for c in conf.astype(np.float64)]
    assert res["mean_draft"] == pytest.approx(np.mean(lengths))


def test_the_boost_moves_the_brute_force_choice():
    """The boosted case above is not the plain one in disguise: the boost changes what is picked."""
    conf, acc = calibrated_streams(30, 48, 3, power=0.5)
    plain, boosted = calibrate_tau(conf, acc, d_max=6), calibrate_tau(conf, acc, d_max=6, boost=0.8)
    assert (plain["window"], plain["tau"]) != (boosted["window"], boosted["tau"])


def test_a_feasible_window_without_a_feasible_grid_point_falls_back_to_the_best_success():
    """Tokens the draft is sure of (confidence 0.99) fail 30 % of the time, unsure ones (0.55) always
    pass: the H window [0.3, 0.5] of fixed-length drafting reaches 90 %, but drafting with any tau in it
    keeps the sure tokens above tau too, so no grid point does. The procedure then reports the grid
    point with the highest success rate (the first on a tie) and says it is not feasible."""
    rng = np.random.default_rng(0)
    sure = rng.random((40, 48)) < 0.2
    conf = np.where(sure, 0.99, 0.55)
    acc = np.where(sure, rng.random((40, 48)) < 0.7, True)
    res = calibrate_tau(conf, acc, d_max=4, target=0.9)
    lo, tau, feasible = _brute_force_tau(conf, acc, 4)
    assert not feasible and not res["feasible"]
    assert res["window"] == pytest.approx([lo, lo + 0.2]) and lo == pytest.approx(0.3)
    assert res["tau"] == pytest.approx(tau)
    rates = [success_at(conf, acc, t, 4)[0] for t in np.linspace(lo, lo + 0.2, 21)]
    assert max(rates) < 0.9 and res["success_rate"] == pytest.approx(max(rates))
    assert res["tau"] < 1.0  # tau 1 is kept for the case without any feasible window


def test_success_curve_bins_by_hand():
    from adsl.fitting.tau import success_curve

    h = np.array([0.0, 0.05, 0.24, 0.26, 0.5, 0.99, 1.0])
    passed = np.array([0, 1, 1, 0, 1, 1, 1], dtype=bool)
    c = success_curve(h, passed, bins=4)  # edges 0, .25, .5, .75, 1; H = 1 falls in the last bin
    np.testing.assert_allclose(c["h_lo"], [0, 0.25, 0.5, 0.75])
    np.testing.assert_allclose(c["h_hi"], [0.25, 0.5, 0.75, 1.0])
    assert c["count"].tolist() == [3, 1, 1, 2]
    np.testing.assert_allclose(c["success"], [2 / 3, 0, 1, 1])
    empty = success_curve(np.array([0.1]), np.array([True]), bins=2)
    assert empty["count"].tolist() == [1, 0] and np.isnan(empty["success"][1])


def test_running_products_record_every_drafted_position_by_hand():
    from adsl.fitting.tau import running_products

    conf = np.array([[0.5, 0.8, 0.9, 0.5, 0.5, 0.5, 0.5]])
    acc = np.array([[True, False, True, True, True, True, True]])
    h, passed = running_products(conf, acc, d_max=2)
    # fixed d = 2: start 0 drafts (.5, .8) and keeps 1, start 2 drafts (.9, .5) and keeps both,
    # start 5 drafts (.5, .5) and keeps both
    np.testing.assert_allclose(h, [0.5, 0.4, 0.9, 0.45, 0.5, 0.25])
    assert passed.tolist() == [True, False, True, True, True, True]


@pytest.mark.parametrize("boost", [0.0, 0.9])
def test_running_products_are_ordered_by_step_then_token_then_stream(boost):
    """Several streams of different fortunes: H_j and pass/fail in the order a loop over the replay's steps,
    then j = 1..d_max, then the streams with a valid step records them (H as ``draft_log_products`` gives it)."""
    from adsl.fitting.generator import draft_log_products, fixed_lengths, replay_lengths
    from adsl.fitting.tau import running_products

    rng = np.random.default_rng(4)
    conf = rng.beta(5, 1, (5, 23))
    acc = rng.random((5, 23)) < 0.75
    d_max = 4
    r = replay_lengths(acc, fixed_lengths(acc.shape, d_max))
    log_h = draft_log_products(conf, boost)
    want_h, want_p = [], []
    pos = np.zeros(5, dtype=np.int64)
    for step in range(r["drafted"].shape[0]):
        for j in range(1, d_max + 1):
            for i in range(5):
                if r["valid"][step, i]:
                    want_h.append(np.exp(log_h(np.array([[pos[i]]]), j)[i, 0]))
                    want_p.append(r["accepted"][step, i] >= j)
        pos = np.where(r["valid"][step], pos + r["accepted"][step] + 1, 23)
    h, passed = running_products(conf, acc, d_max, boost)
    np.testing.assert_allclose(h, want_h, rtol=1e-14)
    assert passed.tolist() == want_p


def test_the_continuation_boost_reaches_every_step_of_the_procedure():
    """A calibration's continuation term raises later tokens' confidence: longer drafts at the same
    tau, more products above it, and a different tau."""
    from adsl.fitting.tau import mean_draft, running_products

    conf, acc = calibrated_streams(60, 64, 8, power=0.5)
    assert mean_draft(conf, 0.5, 8, boost=1.0) > mean_draft(conf, 0.5, 8)
    assert running_products(conf, acc, 8, boost=1.0)[0].mean() > running_products(conf, acc, 8)[0].mean()
    assert success_at(conf, acc, 0.5, 8, boost=1.0) != success_at(conf, acc, 0.5, 8)
    plain, boosted = calibrate_tau(conf, acc, d_max=8), calibrate_tau(conf, acc, d_max=8, boost=1.0)
    assert (boosted["tau"], boosted["mean_draft"]) != (plain["tau"], plain["mean_draft"])


def test_the_procedure_defaults_are_the_papers():
    import inspect

    params = inspect.signature(calibrate_tau).parameters
    assert {k: params[k].default for k in ("d_max", "window", "target", "grid", "boost")} == {
        "d_max": 16,
        "window": 0.2,
        "target": 0.9,
        "grid": 21,
        "boost": 0.0,
    }


def test_windows_stop_at_the_top_of_the_h_range():
    """Windows cover [lo, lo + 0.2] for lo up to 0.8, never past H = 1: here only H >= 0.85 passes and
    tokens of confidence 0.82 are frequent, so [0.8, 1.0] misses 90 % and no window is feasible (a window
    starting above 0.8 would cover only passing tokens)."""
    rng = np.random.default_rng(0)
    conf = np.where(rng.random((200, 40)) < 0.3, 0.82, 0.97)
    acc = conf > 0.9
    from adsl.fitting.tau import running_products

    h, passed = running_products(conf, acc, 4)
    assert passed[(h >= 0.85)].all() and passed[(h >= 0.8) & (h <= 1.0)].mean() < 0.9
    assert not calibrate_tau(conf, acc, d_max=4)["feasible"]
