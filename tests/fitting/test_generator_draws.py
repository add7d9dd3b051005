"""draw_streams: what the calibration (shift, applies_to, heterogeneity_scale) and the confidence request effect
do to the seeded (confidence, accepted) draws.

Models are hand-built dicts shaped like the fitted ones (a Beta confidence distribution selected among
candidates), so no fit runs here. Exact checks compare two draws from the same seed; statistical checks use
fixed seeds, and their docstrings give the values the generator reaches and the margin to the limit.
"""

from __future__ import annotations

import numpy as np
import pytest

from adsl.fitting.generator import draw_streams

JOINT = {"a": -0.5, "b": 0.9, "s": 0.6, "g": 0.5}
# acceptance is exactly Bernoulli(confidence): intercept 0, slope 1 on logit(confidence), no request or text term
IDENTITY_CURVE = {"a": 0.0, "b": 1.0, "s": 0.0, "g": 0.0}


def beta(a: float, b: float) -> dict:
    """A confidence model selecting Beta(a, b), shaped like fit_confidence's output."""
    return {"selected": "beta", "candidates": {"beta": {"params": {"a": a, "b": b}}}}


def model(joint=None, calibration=None, rho=None, conditional=False) -> dict:
    """An acceptance model: Beta(5, 1.5) confidences, the joint curve ``joint``, and optionally a calibration,
    a confidence request effect rho, and confidence distributions after a match (Beta(8, 1.5)) and after a miss
    (Beta(2, 3))."""
    m = {"confidence": beta(5.0, 1.5), "joint": dict(joint or JOINT)}
    if calibration is not None:
        m["calibration"] = calibration
    if rho is not None:
        m["confidence_request_effect"] = {"rho": rho}
    if conditional:
        m["confidence_given_previous"] = {"after_match": beta(8.0, 1.5), "after_miss": beta(2.0, 3.0)}
    return m


def draw(m: dict, n: int = 500, t: int = 64, seed: int = 3, **kw):
    return draw_streams(m, n, t, np.random.default_rng(seed), **kw)


def curve_gaps(conf: np.ndarray, acc: np.ndarray, ref_conf: np.ndarray, ref_acc: np.ndarray) -> np.ndarray:
    """|P(accept | confidence) - reference| in the reference's ten confidence deciles (bins with >= 2000 tokens)."""
    edges = np.quantile(ref_conf, np.linspace(0, 1, 11))[1:-1]
    out = []
    for k in range(10):
        sel, ref = np.searchsorted(edges, conf) == k, np.searchsorted(edges, ref_conf) == k
        if sel.sum() >= 2000 and ref.sum() >= 2000:
            out.append(abs(acc[sel].mean() - ref_acc[ref].mean()))
    return np.array(out)


def test_outputs_are_float32_confidence_and_bool_or_flagged_acceptance():
    """Both arrays are (n, t): confidence float32 in (0, 1), acceptance bool (uint8 flags with a continuation term)."""
    conf, acc = draw(model(rho=0.3), n=40, t=16)
    assert conf.shape == acc.shape == (40, 16)
    assert conf.dtype == np.float32
    assert acc.dtype == bool
    assert ((conf > 0) & (conf < 1)).all()
    conf_h, flags = draw(model(rho=0.3), n=40, t=16, continuation=1.0)
    assert conf_h.dtype == np.float32
    assert flags.dtype == np.uint8


@pytest.mark.parametrize(
    ("calibration", "applies_to"),
    [
        ({"shift": 0.8}, None),  # the default: acceptance
        ({"shift": 0.8, "applies_to": "acceptance"}, None),
        ({"shift": 0.8, "applies_to": "confidence"}, "acceptance"),  # the argument wins over the calibration
    ],
)
def test_an_acceptance_shift_keeps_the_confidences_and_only_adds_acceptances(calibration, applies_to):
    """Moving the curve's intercept leaves the measured confidences: the same seed gives bit-identical
    confidences with and without the shift. Each request's intercept z moves up by the shift (the same normal
    draws), and with g >= 0 an acceptance never turns into a miss, so acceptance rises token by token (overall by
    0.12 here; asserted > 0.05)."""
    conf0, acc0 = draw(model())
    conf, acc = draw(model(calibration=calibration), applies_to=applies_to)
    np.testing.assert_array_equal(conf, conf0)
    assert (acc >= acc0).all()
    assert acc.mean() - acc0.mean() > 0.05


def test_a_confidence_shift_moves_the_confidences_up_and_keeps_the_curve():
    """applies_to "confidence" warps the confidence distribution: mean confidence rises from 0.77 to 0.83
    (asserted > +0.04), acceptance with it (0.72 to 0.78, asserted > +0.04), and P(accept | confidence) stays on
    the measured curve (largest gap over the unshifted draw's confidence deciles 0.017, at most 0.021 over seeds
    4-11; asserted < 0.03). The same shift on the intercept instead lifts that curve: by 0.12 on average over the
    deciles (asserted > 0.06) and by 0.035 in the top decile, near saturation (asserted > 0.015 in every one)."""
    n, t = 4000, 64
    conf0, acc0 = draw(model(), n, t)
    conf, acc = draw(model(calibration={"shift": 0.8, "applies_to": "confidence"}), n, t, seed=4)
    assert conf.mean() - conf0.mean() > 0.04
    assert acc.mean() > acc0.mean() + 0.04
    gaps = curve_gaps(conf, acc, conf0, acc0)
    assert len(gaps) >= 5
    assert gaps.max() < 0.03
    conf_a, acc_a = draw(model(calibration={"shift": 0.8, "applies_to": "acceptance"}), n, t, seed=4)
    lifted = curve_gaps(conf_a, acc_a, conf0, acc0)
    assert len(lifted) == 10
    assert lifted.mean() > 0.06
    assert lifted.min() > 0.015


def test_a_confidence_shift_warps_both_conditional_distributions():
    """With confidence_given_previous the positions after a match draw from after_match (Beta(8, 1.5), mean 0.84)
    and those after a miss from after_miss (Beta(2, 3), mean 0.40); a confidence shift of 1 warps both: the mean
    after a match rises from 0.842 to 0.897 and after a miss from 0.400 to 0.516 (asserted: each by more than 0.03)."""
    m0 = model(conditional=True)
    m1 = model(calibration={"shift": 1.0, "applies_to": "confidence"}, conditional=True)
    means = []
    for m in (m0, m1):
        conf, acc = draw(m, 4000, 64, seed=5)
        prev, later = acc[:, :-1], conf[:, 1:]
        means.append((later[prev].mean(), later[~prev].mean()))
    (match0, miss0), (match1, miss1) = means
    assert match0 == pytest.approx(8.0 / 9.5, abs=0.01)
    assert miss0 == pytest.approx(0.4, abs=0.01)
    assert match1 - match0 > 0.03
    assert miss1 - miss0 > 0.03


@pytest.mark.parametrize("rho", [None, 0.3])
def test_heterogeneity_scale_one_draws_as_without_the_key(rho):
    """heterogeneity_scale 1 changes nothing: bit-identical draws to a calibration without the key."""
    c0, a0 = draw(model(calibration={"shift": 0.3}, rho=rho))
    c1, a1 = draw(model(calibration={"shift": 0.3, "heterogeneity_scale": 1.0}, rho=rho))
    np.testing.assert_array_equal(c1, c0)
    np.testing.assert_array_equal(a1, a0)


@pytest.mark.parametrize(
    ("scale", "rho", "equivalent_s", "equivalent_rho"),
    [
        (2.0, 0.125, 1.2, 0.5),  # s doubled, rho times 4
        (0.5, 0.4, 0.3, 0.1),  # s halved, rho divided by 4
        (2.0, 0.3, 1.2, 0.99),  # rho times 4 is 1.2: capped at 0.99
    ],
)
def test_heterogeneity_scale_scales_s_and_rho_by_its_square(scale, rho, equivalent_s, equivalent_rho):
    """A calibration's heterogeneity_scale multiplies the request intercept's standard deviation s by the scale
    and the confidence request share rho by its square (at most 0.99): the draws are bit-identical to those of an
    unscaled model with those values written in (powers of two, so the products are exact)."""
    scaled = model(calibration={"heterogeneity_scale": scale}, rho=rho)
    written = model(joint={**JOINT, "s": equivalent_s}, rho=equivalent_rho)
    c0, a0 = draw(written)
    c1, a1 = draw(scaled)
    np.testing.assert_array_equal(c1, c0)
    np.testing.assert_array_equal(a1, a0)


def test_between_request_variance_of_the_acceptance_rate_grows_with_the_scale():
    """Variance over 4000 requests of the per-request acceptance rate (64 positions, rho = 0.2): 0.0085 at
    scale 0.5, 0.0215 at 1 and 0.064 at 2; each step is asserted to multiply it by more than 1.8 (seen: 2.5, 3.0)."""
    var = []
    for scale in (0.5, 1.0, 2.0):
        _, acc = draw(model(calibration={"heterogeneity_scale": scale}, rho=0.2), 4000, 64, seed=1)
        var.append(acc.mean(axis=1).var())
    assert var[1] > 1.8 * var[0]
    assert var[2] > 1.8 * var[1]


def test_no_request_effect_draws_as_without_the_key():
    """rho = 0 is the model without confidence_request_effect: bit-identical draws from the same seed."""
    c0, a0 = draw(model())
    c1, a1 = draw(model(rho=0.0))
    np.testing.assert_array_equal(c1, c0)
    np.testing.assert_array_equal(a1, a0)


def test_with_a_request_effect_acceptance_follows_each_tokens_own_confidence():
    """With intercept 0, slope 1 and no request or text term a token is accepted with probability equal to its
    confidence. With a strong request effect (rho = 0.6) that holds token by token: in confidence deciles the
    acceptance rate is the mean confidence (largest gap 0.005, asserted < 0.02), and per request the
    acceptance rate minus the mean confidence has the binomial spread sqrt(sum c (1 - c)) / 64 (RMS ratio 1.00,
    asserted < 1.25). A table that read another level's log-odds would break both (gaps about 0.066, ratio
    about 2.4)."""
    conf, acc = draw(model(joint=IDENTITY_CURVE, rho=0.6), 4000, 64, seed=1)
    c = conf.astype(np.float64)
    edges = np.quantile(c, np.linspace(0, 1, 11))[1:-1]
    decile = np.searchsorted(edges, c)
    gaps = [abs(acc[decile == k].mean() - c[decile == k].mean()) for k in range(10)]
    assert max(gaps) < 0.02
    gap = acc.mean(axis=1) - c.mean(axis=1)
    binomial = np.sqrt((c * (1 - c)).sum(axis=1)) / c.shape[1]
    assert np.sqrt(np.mean(gap**2)) / np.sqrt(np.mean(binomial**2)) < 1.25
