import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from adsl.fitting import distributions as dist
from adsl.fitting.generator import (
    CONTINUED,
    FIRST,
    acceptance_rate,
    draw_streams,
    fixed_lengths,
    match_runs,
    replay_lengths,
    running_product_lengths,
)
from adsl.fitting.joint_model import fit_joint
from adsl.fitting.modelfile import ModelFileError, read_model, write_model
from adsl.fitting.paper_calibration import calibrate_pair, calibrate_shift, rates_for_shift
from adsl.profiling import replay as scalar


@pytest.fixture(scope="module")
def conf_model():
    rng = np.random.default_rng(0)
    return dist.fit_confidence(np.concatenate([rng.beta(8, 1, 3000), rng.beta(2, 2, 1000)]))


@pytest.fixture(scope="module")
def model(conf_model):
    return {"confidence": conf_model, "joint": {"a": -0.5, "b": 0.9, "s": 0.6, "g": 0.5}}


def test_confidence_selection_by_aic():
    rng = np.random.default_rng(1)
    assert dist.fit_confidence(rng.beta(2.0, 5.0, 4000))["selected"] in ("beta", "beta_mixture")
    from scipy import special

    ln = dist.fit_confidence(special.expit(rng.normal(1.5, 1.2, 4000)))
    assert ln["selected"] == "logit_normal"
    assert ln["candidates"]["logit_normal"]["params"]["mu"] == pytest.approx(1.5, abs=0.1)


def test_mixture_is_chosen_for_bimodal_confidence(conf_model):
    assert conf_model["selected"].startswith("beta_mixture")
    assert conf_model["ks_pvalue"] > 0.01


def test_too_few_samples_are_refused_with_the_count():
    with pytest.raises(dist.FitError, match="12 samples, the fit needs at least 50"):
        dist.fit_confidence(np.linspace(0.1, 0.9, 12))
    with pytest.raises(dist.FitError, match="3 samples"):
        dist.fit_request_heterogeneity(np.array([1, 2, 3]), np.array([5, 5, 5]))


def test_accepted_length_truncated_geometric_recovers_alpha():
    rng = np.random.default_rng(2)
    acc = np.minimum(rng.geometric(0.3, 5000) - 1, 8)  # i.i.d. acceptance 0.7
    fit = dist.fit_accepted_length(acc, 8)
    assert fit["truncated_geometric"]["alpha"] == pytest.approx(0.7, abs=0.02)
    assert fit["truncated_geometric"]["chi2_pvalue"] > 0.01
    assert dist.truncated_geometric_pmf(0.7, 8).sum() == pytest.approx(1)
    assert dist.beta_geometric_pmf(2.0, 3.0, 8).sum() == pytest.approx(1)


def test_heterogeneity_and_dependence_tests():
    rng = np.random.default_rng(3)
    k = rng.binomial(100, rng.beta(2, 2, 60))
    assert dist.fit_request_heterogeneity(k, np.full(60, 100))["lr_pvalue"] < 1e-6
    homo = rng.binomial(100, 0.6, 60)
    assert dist.fit_request_heterogeneity(homo, np.full(60, 100))["lr_pvalue"] > 0.01
    seqs = []
    for _ in range(50):  # a sticky chain
        s = [True]
        for _ in range(100):
            s.append(rng.random() < (0.9 if s[-1] else 0.3))
        seqs.append(np.array(s))
    dep = dist.fit_dependence(seqs)
    assert dep["selected"] == "markov" and dep["lr_pvalue"] < 1e-6
    indep = dist.fit_dependence([rng.random(100) < 0.6 for _ in range(50)])
    assert indep["lr_pvalue"] > 0.001


def test_joint_fit_recovers_generating_parameters(model):
    conf, acc = draw_streams(model, 400, 150, np.random.default_rng(4))
    j = fit_joint(list(conf), list(acc))
    for key, tol in (("a", 0.25), ("b", 0.15), ("s", 0.15), ("g", 0.2)):
        assert j[key] == pytest.approx(model["joint"][key], abs=tol), key


def test_generator_is_deterministic_and_shaped(model):
    c1, a1 = draw_streams(model, 50, 30, np.random.default_rng(9))
    c2, a2 = draw_streams(model, 50, 30, np.random.default_rng(9))
    assert c1.shape == a1.shape == (50, 30) and a1.dtype == bool
    assert np.array_equal(c1, c2) and np.array_equal(a1, a2)
    assert (0 < c1).all() and (c1 < 1).all()


def test_acceptance_rises_with_the_calibration_shift(model):
    rates = [rates_for_shift(model, s, [4], 500, 64, 0)[0] for s in (-2, 0, 2)]
    assert rates[0] < rates[1] < rates[2]


def test_calibrate_shift_recovers_a_reachable_target(model):
    # the target's streams are drawn apart from the calibration's (another seed, 4x as many): a shift
    # recovered only through common random numbers would not come back
    target = dict(zip((4, 8, 12), rates_for_shift(model, 0.8, (4, 8, 12), 4000, 128, 11), strict=True))
    cal = calibrate_shift(model, target, n=1000, t=128, seed=5)
    assert cal["shift"] == pytest.approx(0.8, abs=0.05)
    assert cal["max_abs_error"] < 0.01


def test_within_draft_term_keeps_the_first_token_process_and_adds_continuations(model):
    c0, a0 = draw_streams(model, 300, 80, np.random.default_rng(4))
    c1, a1 = draw_streams(model, 300, 80, np.random.default_rng(4), continuation=1.5)
    assert a0.dtype == bool and a1.dtype == np.uint8
    np.testing.assert_array_equal(c0, c1)
    np.testing.assert_array_equal(a1 & FIRST != 0, a0)  # common random numbers: same first tokens
    assert ((a1 & CONTINUED != 0) >= a0).all() and (a1 & CONTINUED != 0).sum() > a0.sum()
    # h = 0 given explicitly: the plain bool stream
    np.testing.assert_array_equal(draw_streams(model, 300, 80, np.random.default_rng(4), continuation=0.0)[1], a0)
    rates = [rates_for_shift(model, 0.0, [4, 12], 500, 96, 0, continuation=h) for h in (0.0, 2.0)]
    assert (rates[1] > rates[0]).all() and rates[1][1] / rates[1][0] > rates[0][1] / rates[0][0]


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 30), st.integers(0, 2**31 - 1), st.booleans())
def test_match_runs_of_flagged_streams_follow_the_definition(t, seed, continuing):
    flags = np.random.default_rng(seed).integers(0, 4, (3, t)).astype(np.uint8)
    runs = match_runs(flags, continuing)
    for r in range(3):
        for i in range(t):
            k = 0
            while i + k < t and flags[r, i + k] & (FIRST if k == 0 and not continuing else CONTINUED):
                k += 1
            assert runs[r, i] == k
    plain = flags & FIRST != 0  # bool streams: both outcomes are the same
    np.testing.assert_array_equal(match_runs(plain), match_runs(plain * (FIRST | CONTINUED)))
    for acc in (flags, plain):  # capped: each run at most the cap, a byte where the cap fits in one
        for cap, dtype in ((0, np.uint8), (2, np.uint8), (255, np.uint8), (256, np.int64)):
            capped = match_runs(acc, continuing, cap)
            assert capped.dtype == dtype
            np.testing.assert_array_equal(capped, np.minimum(match_runs(acc, continuing), cap))


def test_calibrate_pair_recovers_a_shared_continuation_term(model):
    other = {**model, "joint": {**model["joint"], "a": 0.3}}
    models = {"x": model, "y": other}
    targets = {
        c: dict(zip((4, 8, 12), rates_for_shift(m, s, (4, 8, 12), 600, 96, 2, continuation=1.2), strict=True))
        for (c, m), s in zip(models.items(), (-0.4, 0.5), strict=True)
    }
    cal = calibrate_pair(models, targets, n=600, t=96, seed=2)
    assert cal["x"]["draft_continuation"] == cal["y"]["draft_continuation"] == pytest.approx(1.2, abs=0.1)
    assert cal["x"]["shift"] == pytest.approx(-0.4, abs=0.1) and cal["y"]["shift"] == pytest.approx(0.5, abs=0.1)
    assert max(c["max_abs_error"] for c in cal.values()) < 0.01
    fixed = calibrate_pair(models, targets, n=600, t=96, seed=2, continuation=0.0)
    assert fixed["x"]["draft_continuation"] == 0.0 and fixed["x"]["max_abs_error"] > 0.01


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 10), st.integers(0, 2**31 - 1))
def test_vectorized_replay_equals_scalar_replay(d, seed):
    rng = np.random.default_rng(seed)
    acc = rng.random((6, 40)) < rng.random()
    vec = replay_lengths(acc, fixed_lengths(acc.shape, d))
    for r in range(acc.shape[0]):
        ref = scalar.replay(acc[r], np.full(40, d))
        ok = vec["valid"][:, r]
        assert vec["accepted"][ok, r].tolist() == ref.accepted.tolist()


@settings(max_examples=40, deadline=None)
@given(st.floats(0.0, 0.99), st.integers(1, 12), st.integers(0, 2**31 - 1))
def test_running_product_rule_never_drafts_past_tau(tau, d_max, seed):
    rng = np.random.default_rng(seed)
    conf = rng.beta(5, 1, (4, 30))
    lengths = running_product_lengths(conf, tau, d_max)
    for r in range(4):
        assert lengths[r].tolist() == scalar.running_product_lengths(conf[r], tau, d_max).tolist()
        for i in range(30):
            k = lengths[r, i]
            # every token before the last drafted one kept H >= tau
            assert np.prod(conf[r, i : i + k - 1]) >= tau or k == 1


def test_rates_fall_with_draft_length(model):
    _, acc = draw_streams(model, 2000, 200, np.random.default_rng(1))
    r4, r8, r12 = (acceptance_rate(acc, d) for d in (4, 8, 12))
    assert r4 > r8 > r12


def test_model_file_round_trip_and_errors(tmp_path, model):
    path = tmp_path / "m.json"
    write_model({"pair": "p", "category": "open_qa", **model}, path)
    assert read_model(path)["joint"]["g"] == 0.5
    bad = json.loads(path.read_text())
    bad["joint"]["s"] = float("nan")
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(ModelFileError, match=r"joint\.s must be a number"):
        read_model(tmp_path / "bad.json")
    bad["format"] = "other/9"
    (tmp_path / "bad2.json").write_text(json.dumps(bad))
    with pytest.raises(ModelFileError, match="format"):
        read_model(tmp_path / "bad2.json")


def test_three_component_mixture_captures_a_spike_near_one():
    """Real profiles put a fifth of the draft confidences just below 1 (see the README status)."""
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.beta(2.2, 1.9, 1100), rng.beta(13, 0.5, 1700), rng.beta(530, 0.6, 800)])
    fit = dist.fit_confidence(x)
    assert fit["selected"] == "beta_mixture3"
    assert fit["ks_pvalue"] > 0.01
    assert fit["candidates"]["beta_mixture3"]["aic"] < fit["candidates"]["beta_mixture"]["aic"]


def test_confidence_conditional_on_the_previous_match_is_fitted_and_drawn():
    """Confidence after a miss is drawn from its own fit: the generated means follow the data's."""
    from adsl.fitting.pipeline import by_previous_match, conditional_confidence

    rng = np.random.default_rng(4)
    conf, match = [], []
    for _ in range(30):
        c, m, prev = np.empty(150), np.empty(150, dtype=int), 1
        for i in range(150):
            c[i] = rng.beta(9, 1) if prev else rng.beta(2, 2)
            m[i] = prev = int(rng.random() < c[i])
        conf.append(c)
        match.append(m)
    cond = conditional_confidence(conf, match)
    model = {"confidence": dist.fit_confidence(np.concatenate(conf)), "confidence_given_previous": cond}
    model["joint"] = fit_joint(conf, match)
    c_gen, m_gen = draw_streams(model, 3000, 150, np.random.default_rng(0))
    gen_after_match, gen_after_miss = by_previous_match(list(c_gen), list(m_gen.astype(int)))
    assert gen_after_match.mean() == pytest.approx(0.9, abs=0.02)
    assert gen_after_miss.mean() == pytest.approx(0.5, abs=0.03)
    assert conditional_confidence(conf[:1], [np.ones(150, dtype=int)]) is None  # no misses: no split


def test_confidence_request_effect_is_recovered_and_keeps_the_marginal(model):
    m = {**model, "confidence_request_effect": {"rho": 0.3}}
    conf, _ = draw_streams(m, 300, 200, np.random.default_rng(8))
    fitted = dist.fit_confidence_request_effect(list(conf))
    assert fitted["rho"] == pytest.approx(0.3, abs=0.06)
    plain, _ = draw_streams(model, 300, 200, np.random.default_rng(8))
    assert dist.fit_confidence_request_effect(list(plain))["rho"] < 0.02
    # the pooled confidences keep the fitted distribution; requests differ far more than without it
    one, _ = draw_streams(m, 20000, 1, np.random.default_rng(9))  # one position per request
    one_plain, _ = draw_streams(model, 20000, 1, np.random.default_rng(10))
    assert stats.ks_2samp(one.ravel(), one_plain.ravel()).pvalue > 0.01
    assert conf.mean(axis=1).std() > 3 * plain.mean(axis=1).std()
    with pytest.raises(dist.FitError, match="2"):
        dist.fit_confidence_request_effect([np.array([0.5, 0.6])] * 2)


def test_heldout_check_on_a_profile_drawn_from_the_model(model):
    from adsl.fitting.pipeline import heldout_check
    from adsl.fitting.synthetic import synthetic_profile

    truth = {**model, "confidence_request_effect": {"rho": 0.1}}
    prof = synthetic_profile({"open_qa": truth}, 24, 120, seed=3)
    res = heldout_check(prof, "open_qa", "synthetic", seed=0, n_streams=2000, split=1, sets=100)
    assert res["train_requests"] == res["test_requests"] == 12
    assert res["rate_generated"] == pytest.approx(res["rate_train"], abs=0.02)  # reproduces what it fitted
    assert res["diff_lo"] < 0 < res["diff_hi"] and res["rate_lo"] < res["rate_generated"] < res["rate_hi"]
    assert res["diff_lo"] <= res["rate_test"] - res["rate_train"] <= res["diff_hi"]
    # the profile is drawn from the model family itself: the held-out test must not reject it
    assert 0.05 <= res["chi2_bootstrap_pvalue_d4"] <= 1 and 0.05 <= res["chi2_bootstrap_pvalue_d8"] <= 1
    assert res["chi2_refit_pvalue_d4"] >= res["chi2_bootstrap_pvalue_d4"] - 0.05  # a wider null
    assert 0 < res["calibration_max_abs_diff"] <= res["calibration_max_abs_diff_hi"] < 0.3


def test_level_curve_moves_rate_and_lengths_with_the_shift(model):
    from adsl.fitting.pipeline import LEVEL_SHIFTS, _level_curve, _pmf_at

    rates, pmfs = _level_curve(model, 400, 64, np.random.default_rng(0))
    assert rates.shape == LEVEL_SHIFTS.shape and np.all(np.diff(rates) > 0)
    mean_len = pmfs[8] @ np.arange(9)
    assert np.all(np.diff(mean_len) > 0)  # a higher level accepts longer prefixes
    mid = len(rates) // 2
    assert _pmf_at(rates, pmfs[4], rates[mid]) == pytest.approx(pmfs[4][mid])
    assert _pmf_at(rates, pmfs[4], 2.0).sum() == pytest.approx(1.0)  # clamped beyond the grid


@settings(max_examples=60, deadline=None)
@given(
    k=st.integers(2, 3),
    seed=st.integers(0, 2**32 - 1),
    ties=st.booleans(),
)
def test_mixture_likelihood_is_scipys_to_the_bit(k, seed, ties):
    """The mixture's log-density (what every Nelder-Mead step evaluates) equals scipy's beta.logpdf and
    logsumexp to the bit, so fits and model selection do not move with the fast path; ties between
    components (each counted once in logsumexp) included."""
    from scipy import special

    rng = np.random.default_rng(seed)
    x = dist.clip01(np.concatenate([[0.0, 1.0, 0.5], rng.beta(rng.uniform(0.2, 9), rng.uniform(0.2, 9), 500)]))
    w = special.softmax(rng.normal(size=k))
    a, b = np.exp(rng.uniform(-2, 3, k)), np.exp(rng.uniform(-2, 3, k))
    if ties:
        w[1], a[1], b[1] = w[0], a[0], b[0]
    ref = special.logsumexp(
        [np.log(wi) + stats.beta.logpdf(x, ai, bi) for wi, ai, bi in zip(w, a, b, strict=True)], axis=0
    )
    got = dist._mixture_logpdf(dist._log_terms(x), w, a, b)
    assert np.array_equal(got, ref)


@pytest.mark.parametrize("prev_rate", [0.0, 0.3, 1.0])
def test_calibration_curve_per_distinct_confidence_is_the_elementwise_curve_to_the_bit(prev_rate):
    """Streams repeat a few thousand confidences (the generator's quantile tables): the curve evaluated once
    per distinct value and spread back equals the curve evaluated at every position, bit for bit, in the
    streams' shape; an array of distinct values takes the elementwise path."""
    from adsl.fitting import joint_model

    rng = np.random.default_rng(3)
    joint = {"a": -0.4, "b": 1.1, "s": 0.7, "g": 0.6}
    table = rng.beta(4, 1, 300).astype(np.float32)
    streams = table[rng.integers(0, table.size, (2, 40, 90))]
    got = joint_model.calibration_curve(joint, streams, shift=0.2, prev_rate=prev_rate)
    want = joint_model._curve(joint, streams, 0.2, prev_rate)
    assert got.shape == streams.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    distinct = np.linspace(0.01, 0.99, 50)
    np.testing.assert_array_equal(
        joint_model.calibration_curve(joint, distinct), joint_model._curve(joint, distinct, 0.0, 0.0)
    )


def test_per_distinct_spreads_trailing_axes_and_takes_the_direct_path_for_distinct_values():
    """``per_distinct`` with a function that adds a trailing axis: the same array as the direct call, for
    repeated values (spread back through the distinct ones) and for all-distinct values (called directly,
    seen by the call's argument)."""
    from adsl.distinct import per_distinct

    seen = []

    def fn(a):
        seen.append(a.shape)
        return np.stack([a * 2.0, a + 1.0], axis=-1)

    x = np.array([[0.5, 0.25, 0.5, 0.5], [0.25, 0.25, 0.5, 0.5]])
    np.testing.assert_array_equal(per_distinct(fn, x), fn(x))
    assert seen[0] == (2,)
    y = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(per_distinct(fn, y), fn(y))
    assert seen[2] == (2, 3)
