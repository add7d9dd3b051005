"""The tau procedure (adsl.fitting.tau) on hand-built streams where every count is known: window edges,
the 20-sample and 90 % thresholds, ties between windows, the grid search's fallback, the defaults, and
success_at with the continuation boost against a scalar transcription."""

import warnings

import numpy as np
import pytest

from adsl.fitting.tau import calibrate_tau, running_products, success_at, success_curve
from adsl.profiling import replay as scalar
from tests.fitting.test_tau import _lengths, _products


def single_tokens(*groups):
    """One-position streams (d_max 1 drafts each exactly once): ``groups`` of (confidence, passed,
    failed); every drafted position's H is its confidence."""
    conf, acc = [], []
    for c, ok, bad in groups:
        conf += [c] * (ok + bad)
        acc += [True] * ok + [False] * bad
    return np.array(conf, dtype=float)[:, None], np.array(acc)[:, None]


def test_h_on_a_window_edge_counts_in_that_window():
    """Windows are closed, [lo, lo + 0.2]: H = 0.5 (exactly a lower edge) makes [0.5, 0.7] feasible
    where every lower window holds the failing H = 0.49; H = 1.0 (exactly the top window's upper edge)
    makes [0.8, 1.0] feasible where the lower ones hold the failing H = 0.79."""
    conf, acc = single_tokens((0.5, 20, 0), (0.49, 0, 20))
    h, _ = running_products(conf, acc, 1)
    assert (h == 0.5).sum() == 20  # the edge value is exact
    res = calibrate_tau(conf, acc, d_max=1)
    assert res["feasible"] and res["window"] == [0.5, pytest.approx(0.7)]
    conf, acc = single_tokens((1.0, 20, 0), (0.79, 0, 20))
    res = calibrate_tau(conf, acc, d_max=1)
    assert res["feasible"] and res["window"] == [0.8, 1.0]


@pytest.mark.parametrize(("ok", "bad", "feasible"), [(20, 0, True), (19, 0, False), (18, 2, True), (17, 3, False)])
def test_a_window_needs_20_samples_and_90_percent_inclusive(ok, bad, feasible):
    """Exactly 20 samples and exactly 18 / 20 = 0.9 passing are enough; 19 samples or 17 / 20 are not.
    At 90 % every grid point's success rate is exactly 0.9 too, which still counts as feasible."""
    conf, acc = single_tokens((1.0, ok, bad))
    res = calibrate_tau(conf, acc, d_max=1)
    assert res["feasible"] is feasible
    if feasible:
        assert res["window"] == [0.8, 1.0] and res["tau"] == 0.8
        assert res["success_rate"] == ok / (ok + bad) and res["mean_draft"] == 1.0
    else:
        assert res["window"] is None and res["tau"] == 1.0


def test_of_windows_with_equal_mean_drafts_the_lowest_wins():
    """H = 0.87 lies in the windows from 0.7, 0.75 and 0.8; one-token streams draft 1 at any tau, so
    their mean drafts tie and the lowest window is kept."""
    conf, acc = single_tokens((0.87, 20, 0))
    res = calibrate_tau(conf, acc, d_max=1)
    assert res["window"] == [0.7, pytest.approx(0.9)] and res["tau"] == 0.7


def test_grid_fallback_takes_the_best_success_inside_the_window():
    """Window [0.25, 0.45] holds H = 0.32 (1 fails) and H = 0.44 (19 pass): 95 %. Drafting at tau keeps
    every H >= tau, including the ten failing of twenty H = 1 tokens, so no grid point reaches 90 %:
    29 / 40 up to tau = 0.32, 29 / 39 on (0.32, 0.44], 10 / 20 above. The fallback is the best success,
    the first of the 21 grid points above 0.32 (0.33), with the default grid."""
    conf, acc = single_tokens((0.32, 0, 1), (0.44, 19, 0), (1.0, 10, 10))
    res = calibrate_tau(conf, acc, d_max=1)
    assert not res["feasible"] and res["window"] == [0.25, pytest.approx(0.45)]
    assert res["tau"] == pytest.approx(0.33, abs=1e-12)
    assert res["success_rate"] == pytest.approx(29 / 39) and res["acceptance"] == pytest.approx(29 / 40)
    rates = [success_at(conf, acc, t, 1)[0] for t in np.linspace(0.25, 0.45, 21)]
    assert rates == pytest.approx([29 / 40] * 8 + [29 / 39] * 12 + [0.5])


def test_defaults_are_16_tokens_and_a_20_bin_curve():
    """Called with its defaults: fixed 16-token drafts of confidence 0.99 all pass (H 0.99 .. 0.851), so
    [0.7, 0.9] is the lowest window with 20 samples; tau 0.7 never stops a draft, which is then 16 tokens
    or the rest of the stream. The curve is the 20-bin success curve of those H."""
    conf, acc = np.full((5, 40), 0.99), np.ones((5, 40), dtype=bool)
    res = calibrate_tau(conf, acc)
    assert res["feasible"] and res["window"] == [0.7, pytest.approx(0.9)] and res["tau"] == 0.7
    assert res["success_rate"] == 1.0 and res["acceptance"] == 1.0
    assert res["mean_draft"] == pytest.approx(np.mean(np.minimum(16, 40 - np.arange(40))))
    h, passed = running_products(conf, acc, 16)
    want = success_curve(h, passed, bins=20)
    assert len(success_curve(h, passed)["count"]) == 20
    assert set(res["curve"]) == set(want)
    for k, v in want.items():
        np.testing.assert_array_equal(res["curve"][k], v)


def test_success_curve_keeps_empty_top_bins():
    """Only the two lowest of four bins are filled: counts, passes and rates still have four entries."""
    c = success_curve(np.array([0.1, 0.1, 0.3]), np.array([True, False, True]), bins=4)
    assert c["count"].tolist() == [2, 1, 0, 0]
    np.testing.assert_array_equal(c["success"], [0.5, 1.0, np.nan, np.nan])


def test_success_at_by_hand():
    """One drafted token: success and acceptance 1 (a count of 1 is divided by 1). H exactly tau (all
    confidences 1, tau 1) keeps the last token: 3 of 4 kept tokens pass. tau 0 keeps every token
    (the acceptance of fixed drafting) and takes no log of 0."""
    assert success_at(np.array([[0.9]]), np.array([[True]]), 0.5, 1) == (1.0, 1.0)
    conf, acc = np.ones((1, 4)), np.array([[True, False, True, True]])
    assert success_at(conf, acc, 1.0, 2) == (0.75, 0.75)
    rng = np.random.default_rng(5)
    conf, acc = rng.uniform(0.3, 1.0, (6, 30)), rng.random((6, 30)) < 0.7
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s, a = success_at(conf, acc, 0.0, 4)
    assert s == a and 0 < s < 1


@pytest.mark.parametrize("boost", [0.0, 1.0])
def test_success_at_with_the_boost_equals_a_scalar_transcription(boost):
    """The boost moves both the draft lengths and the H that decides which tokens count."""
    rng = np.random.default_rng(11)
    conf = rng.beta(6, 1, (4, 30))
    acc = rng.random((4, 30)) < conf**0.5
    kept = ok = drafted = accepted = 0
    for c, m in zip(conf, acc, strict=True):
        for step in scalar.replay(m, _lengths(c, 0.6, 5, boost)).itertuples():
            d, a = int(step.drafted), int(step.accepted)
            above = sum(_products(c, step.start, j, boost) >= 0.6 for j in range(1, d + 1))
            kept, ok, drafted, accepted = kept + above, ok + min(a, above), drafted + d, accepted + a
    s, a = success_at(conf, acc, 0.6, 5, boost)
    assert s == pytest.approx(ok / kept, rel=1e-12) and a == pytest.approx(accepted / drafted, rel=1e-12)


def test_reported_numbers_are_those_of_the_chosen_tau_with_the_boost():
    rng = np.random.default_rng(3)
    conf = rng.beta(6, 1, (30, 48))
    acc = rng.random((30, 48)) < conf**0.5
    res = calibrate_tau(conf, acc, d_max=6, boost=0.8)
    s, a = success_at(conf, acc, res["tau"], 6, 0.8)
    assert (res["success_rate"], res["acceptance"]) == (s, a)
    assert s != success_at(conf, acc, res["tau"], 6)[0]
