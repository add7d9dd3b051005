"""Vectorized replay and running-product lengths (adsl.fitting.generator) against hand counts, plain loops and
the scalar reference adsl.profiling.replay."""

import math
import sys
from pathlib import Path

import numpy as np
import pytest

from adsl.fitting.generator import (
    CONTINUED,
    FIRST,
    acceptance_rate,
    acceptance_rates,
    draft_log_products,
    fixed_lengths,
    log_running_sums,
    replay_lengths,
    running_product_lengths,
)
from adsl.profiling import replay as scalar

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_policies import lockstep_replay  # noqa: E402  (the numpy form the compiled replay replaced)


def expit(x):
    return 1.0 / (1.0 + math.exp(-x))


def logit(c):
    return math.log(c / (1.0 - c))


def loop_log_h(conf, start, k, boost=0.0):
    """log H of the draft of at most k tokens at ``start`` (what is left of the stream near its end): the
    first token at its confidence, later ones with their logit moved by ``boost``."""
    total = 0.0
    for j, c in enumerate(conf[start : start + k]):
        c = float(c)
        if j and boost:
            c = expit(logit(min(max(c, 1e-7), 1 - 1e-7)) + boost)
        total += math.log(min(max(c, 1e-300), 1.0))
    return total


def loop_lengths(conf, tau, d_max, boost=0.0):
    """The running-product rule as a loop: from each start, the first k <= d_max whose product is below tau
    (that token still drafted), else d_max or what is left of the stream."""
    t = len(conf)
    out = []
    for s in range(t):
        cap = min(d_max, t - s)
        cut = [k for k in range(1, cap + 1) if tau > 0 and loop_log_h(conf, s, k, boost) < math.log(tau)]
        out.append(cut[0] if cut else cap)
    return out


def test_replay_counts_hand_built_streams_and_zeroes_invalid_steps():
    """Fixed d = 3 on two streams of 10 whose every step is known: row 0 (runs 2, 3, 0) drafts at 0, 3, 7
    and its window at 8 passes the end; row 1 (all accepted) drafts at 0, 4 and its window at 8 passes the
    end, then has no step. Invalid and finished steps draft and accept 0 (callers sum without masking)."""
    acc = np.array(
        [
            [1, 1, 0, 1, 1, 1, 0, 0, 1, 1],
            [1, 1, 1, 1, 1, 1, 1, 1, 1, 1],
        ],
        dtype=bool,
    )
    r = replay_lengths(acc, np.full(acc.shape, 3, dtype=np.int64))
    assert r["valid"].tolist() == [[True, True], [True, True], [True, False], [False, False]]
    assert r["drafted"].tolist() == [[3, 3], [3, 3], [3, 0], [0, 0]]
    assert r["accepted"].tolist() == [[2, 3], [3, 3], [0, 0], [0, 0]]
    assert r["start"][r["valid"]].tolist() == [0, 0, 3, 4, 7]


def test_replay_matches_the_scalar_reference_per_stream():
    """Random streams and per-position draft lengths 1..6: each stream's valid steps are the scalar
    reference's steps (start, drafted, accepted), in order, and nothing else is counted."""
    rng = np.random.default_rng(7)
    acc = rng.random((6, 37)) < 0.7
    lengths = rng.integers(1, 7, acc.shape)
    r = replay_lengths(acc, lengths)
    for row in range(acc.shape[0]):
        v = r["valid"][:, row]
        ref = scalar.replay(acc[row], lengths[row])
        assert r["start"][v, row].tolist() == ref.start.tolist()
        assert r["drafted"][v, row].tolist() == ref.drafted.tolist()
        assert r["accepted"][v, row].tolist() == ref.accepted.tolist()
        assert r["drafted"][~v, row].sum() == 0 and r["accepted"][~v, row].sum() == 0


@pytest.mark.parametrize("flags", [False, True])
@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_replay_equals_the_lockstep_form_with_its_dtypes(flags, dtype):
    """Whole arrays, finished streams' rows and dtypes included, on bool and bit-flag streams with draft
    lengths 0..9 (0: a plain decode step) that run past the ends of the streams."""
    rng = np.random.default_rng(11)
    acc = rng.integers(0, 4, (9, 53)).astype(np.uint8) if flags else rng.random((9, 53)) < 0.75
    lengths = rng.integers(0, 10, acc.shape).astype(dtype)
    got, want = replay_lengths(acc, lengths), lockstep_replay(acc, lengths)
    for key in want:
        assert got[key].dtype == want[key].dtype and np.array_equal(got[key], want[key]), key


@pytest.mark.parametrize("d", [4, np.int16(4), np.uint8(4)])
def test_fixed_lengths_is_int64_d_everywhere(d):
    """The fixed-length policy is d at every position, as int64 whatever integer type d arrives as."""
    out = fixed_lengths((3, 5), d)
    assert out.shape == (3, 5)
    assert out.dtype == np.int64
    assert (out == 4).all()


def test_log_running_sums_is_a_loop_of_log_sums_with_clipping():
    """(n, t + 1): a leading zero column, then running sums of log confidence; a zero confidence counts as
    1e-300 (finite), and one rounded above 1 (float32 1 + 1 ulp) counts as 1, so H never exceeds 1."""
    above = float(np.nextafter(np.float32(1.0), np.float32(2.0)))
    conf = np.array([[0.9, 0.0, 0.5, 1.0], [above, above, 0.25, 0.75]], dtype=np.float32)
    got = log_running_sums(conf)
    assert got.shape == (2, 5)
    for row in range(2):
        want = [0.0]
        for c in conf[row]:
            want.append(want[-1] + math.log(min(max(float(c), 1e-300), 1.0)))
        assert np.isfinite(got[row]).all()
        np.testing.assert_allclose(got[row], want, rtol=1e-12, atol=1e-12)
    assert got[1, 1] == 0.0 and got[1, 2] == 0.0


@pytest.mark.parametrize("boost", [None, 0.0, 1.5, -0.7])
def test_draft_log_products_with_one_start_per_column(boost):
    """start as a row vector (the same starts for every stream): log H of the first k tokens, later ones at
    logit + boost; no boost argument means no boost. Drafts past the end keep what is left of the stream."""
    rng = np.random.default_rng(3)
    conf = rng.uniform(0.05, 0.95, (3, 9))
    log_h = draft_log_products(conf) if boost is None else draft_log_products(conf, boost)
    start = np.arange(9)
    for k in range(1, 6):
        got = log_h(start, k)
        assert got.shape == (3, 9)
        for row in range(3):
            want = [loop_log_h(conf[row], s, k, boost or 0.0) for s in start]
            np.testing.assert_allclose(got[row], want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("boost", [0.0, 1.5, -0.7])
def test_draft_log_products_with_one_start_column_per_stream(boost):
    """(n, m) starts (each stream its own draft starts) with k a scalar or (n, m) per-draft lengths: each
    entry is that stream's own log H from its own start."""
    rng = np.random.default_rng(4)
    conf = rng.uniform(0.05, 0.95, (4, 11))
    log_h = draft_log_products(conf, boost)
    start = rng.integers(0, 11, (4, 5))
    k = rng.integers(1, 5, (4, 5))
    for kk in (3, k):
        got = log_h(start, kk)
        assert got.shape == (4, 5)
        want = [
            [loop_log_h(conf[r], start[r, j], int(np.broadcast_to(kk, start.shape)[r, j]), boost) for j in range(5)]
            for r in range(4)
        ]
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


def test_running_product_lengths_tau_zero_never_cuts():
    """tau = 0: no product is below it, so every draft is d_max long, or what is left of the stream."""
    conf = np.random.default_rng(5).uniform(0.0, 1.0, (3, 10))
    for d_max in (1, 4, 12):
        want = [min(d_max, 10 - s) for s in range(10)]
        for boost in (0.0, 2.0):
            assert running_product_lengths(conf, 0.0, d_max, boost).tolist() == [want] * 3


def test_running_product_lengths_tau_one_cuts_at_the_first_unsure_token():
    """tau = 1: H < 1 as soon as a token is below 1 (that token still drafted); certain tokens (1.0) never
    cut, so a certain tail runs to d_max or to the end of the stream."""
    conf = np.array([[1.0, 1.0, 0.9, 1.0, 1.0, 1.0, 1.0], [0.5, 0.99, 1.0, 1.0, 0.2, 1.0, 1.0]])
    got = running_product_lengths(conf, 1.0, 3)
    assert got.tolist() == [[3, 2, 1, 3, 3, 2, 1], [1, 1, 3, 2, 1, 2, 1]]
    assert got.tolist() == [loop_lengths(c, 1.0, 3) for c in conf]


@pytest.mark.parametrize("boost", [0.0, 1.2, -0.8])
def test_running_product_lengths_match_a_loop_with_streams_ending_inside_drafts(boost):
    """Random confidences, several tau and d_max up to longer than the stream (so drafts near the end are
    cut by the stream's end): the first k whose product is below tau, as a plain loop computes it."""
    rng = np.random.default_rng(6)
    for t in (1, 3, 8):
        conf = rng.beta(4, 1, (4, t))
        for tau in (0.2, 0.5, 0.8):
            for d_max in (1, 3, 10):
                got = running_product_lengths(conf, tau, d_max, boost)
                assert got.tolist() == [loop_lengths(c, tau, d_max, boost) for c in conf]


def test_the_compiled_loops_equal_their_uncompiled_selves(monkeypatch):
    """``running_product_lengths``, ``draw_streams`` and ``replay_lengths`` run compiled loops; run as plain
    Python (their ``py_func``) they give the same arrays, so the plain form is their reference."""
    from adsl.fitting import generator
    from adsl.fitting.distributions import fit_confidence

    rng = np.random.default_rng(8)
    conf = rng.beta(5, 1.2, (6, 40))
    model = {
        "confidence": fit_confidence(np.concatenate([rng.beta(8, 1, 800), rng.beta(2, 2, 300)])),
        "joint": {"a": -0.2, "b": 0.9, "s": 0.5, "g": 0.4},
        "calibration": {"draft_continuation": 0.7, "applies_to": "confidence"},
    }
    compiled = [running_product_lengths(conf, 0.4, 9, b) for b in (0.0, 0.8)]
    compiled += list(generator.draw_streams(model, 7, 30, np.random.default_rng(2)))
    acc, lengths = conf > 0.6, rng.integers(0, 8, conf.shape)
    compiled += list(replay_lengths(acc, lengths).values())
    flags = rng.integers(0, 4, conf.shape).astype(np.uint8)
    compiled += [generator.match_runs(flags), generator.match_runs(flags, True), acceptance_rates(flags, [1, 3, 9])]
    for name in ("_first_below", "_positions", "_replay", "_match_runs"):
        monkeypatch.setattr(generator, name, getattr(generator, name).py_func)
    plain = [running_product_lengths(conf, 0.4, 9, b) for b in (0.0, 0.8)]
    plain += list(generator.draw_streams(model, 7, 30, np.random.default_rng(2)))
    plain += list(replay_lengths(acc, lengths).values())
    plain += [generator.match_runs(flags), generator.match_runs(flags, True), acceptance_rates(flags, [1, 3, 9])]
    for a, b in zip(compiled, plain, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)


@pytest.mark.parametrize("flagged", [False, True])
def test_acceptance_rates_are_the_replayed_totals_to_the_bit(flagged):
    """``acceptance_rates`` walks fixed-d drafts over the runs itself: per d, accepted / drafted over the valid
    steps of ``replay_lengths`` with d everywhere, equal to the bit (integer totals), d up to the stream's
    length (one step per stream at d = t, drafts that cannot fit are not counted)."""
    rng = np.random.default_rng(12)
    for t in (1, 5, 33):
        acc = rng.random((9, t)) < 0.7
        if flagged:
            acc = acc * FIRST | (rng.random((9, t)) < 0.8) * CONTINUED
        lengths = [d for d in (1, 2, 3, 8, 16) if d <= t]
        want = []
        for d in lengths:
            r = replay_lengths(acc, fixed_lengths(acc.shape, d))
            want.append(r["accepted"][r["valid"]].sum() / r["drafted"][r["valid"]].sum())
        got = acceptance_rates(acc, lengths)
        assert got.tolist() == want
        assert [acceptance_rate(acc, d) for d in lengths] == want
