"""The later-token confidence boost and the bit-flag form of acceptance streams (adsl.fitting.generator)."""

import numpy as np
import pytest
from scipy import special

from adsl.fitting.generator import CONTINUED, FIRST, as_flags, continuation_boost, later_confidence, match_runs


def _model(calibration, b=2.5):
    return {"calibration": calibration, "joint": {"a": 0.3, "b": b, "g": 0.1, "s": 0.4}}


@pytest.mark.parametrize(("h", "b"), [(0.6, 1.5), (-0.8, 2.5), (1.2, 0.4), (0.5, -4.0)])
def test_continuation_boost_is_h_over_b_for_a_confidence_calibration(h, b):
    """A calibration that moves confidences gives later tokens the logit h / b (h: draft_continuation,
    b: the acceptance curve's slope on logit confidence), so that b * boost adds exactly h to the log-odds."""
    boost = continuation_boost(_model({"applies_to": "confidence", "shift": 0.2, "draft_continuation": h}, b))
    assert boost == pytest.approx(h / b, rel=1e-12)
    assert b * boost == pytest.approx(h, rel=1e-12)


@pytest.mark.parametrize(
    "calibration",
    [
        None,
        {},
        {"applies_to": "acceptance", "shift": 0.2, "draft_continuation": 0.7},
        {"shift": 0.2, "draft_continuation": 0.7},
        {"applies_to": "confidence", "shift": 0.2},
    ],
)
def test_continuation_boost_is_zero_unless_a_confidence_calibration_has_a_continuation(calibration):
    """No calibration, one that moves the acceptance curve (or names no mode: acceptance is the default),
    or a confidence calibration without draft_continuation (h = 0): later tokens keep their confidence."""
    assert continuation_boost(_model(calibration)) == 0.0


@pytest.mark.parametrize("boost", [-1.5, 0.7, 2.0])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_later_confidence_moves_the_logit_by_boost_and_keeps_the_dtype(boost, dtype):
    """Inside (0, 1) the result's logit is the input's logit plus boost, and the array keeps its dtype."""
    conf = np.random.default_rng(7).uniform(0.01, 0.99, (4, 50)).astype(dtype)
    out = later_confidence(conf, boost)
    assert out.dtype == conf.dtype
    assert out.shape == conf.shape
    tol = 1e-4 if dtype == np.float32 else 1e-9
    moved = special.logit(out.astype(np.float64)) - special.logit(conf.astype(np.float64))
    np.testing.assert_allclose(moved, boost, atol=tol)


def test_later_confidence_without_boost_is_the_same_array():
    """A zero boost hands back the very same array object (no copy, no rounding)."""
    conf = np.random.default_rng(3).uniform(0.0, 1.0, (2, 10)).astype(np.float32)
    assert later_confidence(conf, 0.0) is conf


@pytest.mark.parametrize("boost", [-1.0, 1.0])
def test_later_confidence_keeps_certain_inputs_off_zero_and_one(boost):
    """Confidences of exactly 0 or 1 are clipped before the logit, so a moved confidence is strictly inside
    (0, 1) with a finite logit (float64, where 1e-7-level margins are representable) and the order of the
    inputs is kept."""
    conf = np.array([0.0, 0.5, 1.0])
    out = later_confidence(conf, boost)
    assert np.all((out > 0.0) & (out < 1.0))
    assert np.all(np.isfinite(special.logit(out)))
    assert out[0] < out[1] < out[2]


def test_as_flags_gives_a_bool_stream_both_flags():
    """A bool stream's outcome holds for a draft's first and later tokens: uint8 3 (FIRST | CONTINUED) where
    True, 0 where False."""
    acc = np.random.default_rng(11).random((3, 40)) < 0.6
    out = as_flags(acc)
    assert out.dtype == np.uint8
    assert np.all(out[acc] == 3)
    assert np.all(out[~acc] == 0)
    np.testing.assert_array_equal((out & FIRST) != 0, acc)
    np.testing.assert_array_equal((out & CONTINUED) != 0, acc)


def test_as_flags_leaves_a_flagged_stream_unchanged():
    """A stream already in flag form (each of the four FIRST / CONTINUED combinations) comes back as is."""
    flags = np.random.default_rng(5).integers(0, 4, (3, 40)).astype(np.uint8)
    assert set(np.unique(flags)) == {0, 1, 2, 3}
    out = as_flags(flags)
    assert out.dtype == np.uint8
    np.testing.assert_array_equal(out, flags)


@pytest.mark.parametrize("continuing", [False, True])
def test_match_runs_reads_the_flag_form_of_a_bool_stream_alike(continuing):
    """The flag form of a bool stream accepts the same runs from every position as the bool stream."""
    acc = np.random.default_rng(13).random((4, 60)) < 0.7
    np.testing.assert_array_equal(match_runs(as_flags(acc), continuing), match_runs(acc, continuing))
