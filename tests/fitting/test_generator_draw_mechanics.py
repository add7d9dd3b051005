"""draw_streams mechanics: output dtypes, odd request counts (two uint16 values per raw 64-bit word
pair), and the first position's acceptance without the text-level dependence g."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import special

from adsl.fitting.generator import draw_streams


def confidence(selected: str, params: dict) -> dict:
    """A confidence model dict shaped like fit_confidence's output (only the selected candidate is read)."""
    return {"selected": selected, "candidates": {selected: {"params": params, "loglik": 0.0, "k": 2, "aic": 0.0}}}


def model(joint: dict, conditional: bool) -> dict:
    """An acceptance model dict; ``conditional`` adds confidence distributions after a match / a miss."""
    m = {"confidence": confidence("beta", {"a": 3.0, "b": 1.2}), "joint": joint}
    if conditional:
        m["confidence_given_previous"] = {
            "after_match": confidence("beta", {"a": 5.0, "b": 1.0}),
            "after_miss": confidence("logit_normal", {"mu": 0.2, "sigma": 1.3}),
        }
    return m


JOINT = {"a": -0.5, "b": 0.9, "s": 0.6, "g": 0.5}


@pytest.mark.parametrize("conditional", [False, True])
@pytest.mark.parametrize("h", [None, 1.2])
def test_confidence_is_float32_whatever_the_acceptance_form(conditional, h):
    """The documented output: confidence float32 (half the memory of float64 for 1e6 x 64 streams), with
    acceptance bool, or uint8 flags when the continuation term h is not 0."""
    conf, acc = draw_streams(model(JOINT, conditional), 10, 6, np.random.default_rng(3), continuation=h)
    assert conf.dtype == np.float32
    assert acc.dtype == (bool if h is None else np.uint8)


@pytest.mark.parametrize("n", [1, 3, 7, 101])
@pytest.mark.parametrize("h", [None, 1.2])
def test_odd_request_counts_give_one_stream_per_request(n, h):
    """One raw 64-bit word holds two requests' 16-bit quantile index and 16-bit noise, so an odd n draws
    one spare request's worth of bits; the streams still have shape (n, t), confidences in (0, 1)."""
    t = 5
    conf, acc = draw_streams(model(JOINT, True), n, t, np.random.default_rng(n), continuation=h)
    assert conf.shape == acc.shape == (n, t)
    assert ((conf > 0) & (conf < 1)).all()


@pytest.mark.parametrize("conditional", [False, True])
@pytest.mark.parametrize("g", [1.2, -1.2])
def test_first_position_accepts_without_the_text_level_dependence(conditional, g):
    """At a stream's first position there is no previous token, so acceptance is
    Bernoulli(sigmoid(a + b logit(c))) with s = 0 (z = a for every request): no g. The observed rate over
    20000 requests matches the mean of expit(a + b logit(c)) over the drawn confidences within 0.015
    (binomial standard error about 0.0035; off by 0.003 at most here), while log-odds with g kept or
    added twice predict rates 0.2 to 0.4 away (0.44 -> 0.84 / 0.11 overall, 0.60 -> 0.92 / 0.20 after a match)."""
    joint = {"a": -1.5, "b": 1.0, "s": 0.0, "g": g}
    conf, acc = draw_streams(model(joint, conditional), 20000, 1, np.random.default_rng(17))
    c = conf[:, 0].astype(np.float64)
    predicted = special.expit(joint["a"] + joint["b"] * special.logit(c)).mean()
    with_g = special.expit(joint["a"] + joint["b"] * special.logit(c) + g).mean()
    assert abs(with_g - predicted) > 0.15  # the test can tell g apart at all
    assert acc[:, 0].mean() == pytest.approx(predicted, abs=0.015)
