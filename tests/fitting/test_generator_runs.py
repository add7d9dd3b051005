"""match_runs / _runs against a plain-loop definition, and logistic_table against its stated quantiles."""

import math

import numpy as np
import pytest

from adsl.fitting.generator import CONTINUED, FIRST, LOGISTIC_BITS, logistic_table, match_runs
from adsl.profiling.replay import match_runs as scalar_match_runs

UINT16_MAX = np.iinfo(np.uint16).max  # 65535


def _reference_runs(acc, continuing=False):
    """runs[r, i] by the definition: consecutive accepted positions from i (flagged streams: the first
    token needs FIRST, later ones CONTINUED; ``continuing``: every token needs CONTINUED)."""
    acc = np.asarray(acc)
    n, t = acc.shape
    out = np.zeros((n, t), dtype=np.int64)
    for r in range(n):
        for i in range(t):
            k = 0
            while i + k < t:
                x = acc[r, i + k]
                if acc.dtype != bool:
                    x = x & (FIRST if k == 0 and not continuing else CONTINUED)
                if not x:
                    break
                k += 1
            out[r, i] = k
    return out


EDGE_BOOL = {
    "all_accepted": np.ones((2, 7), dtype=bool),
    "none_accepted": np.zeros((2, 7), dtype=bool),
    "last_accepted": np.array([[0, 0, 0, 0, 1], [1, 0, 1, 0, 1]], dtype=bool),
    "length_one_accepted": np.ones((3, 1), dtype=bool),
    "length_one_rejected": np.zeros((3, 1), dtype=bool),
    "mixed": np.array([[1, 1, 0, 1, 1, 1, 0], [0, 1, 1, 1, 1, 1, 1]], dtype=bool),
}


@pytest.mark.parametrize("name", sorted(EDGE_BOOL))
def test_bool_runs_match_the_definition_on_edge_streams(name):
    """Bool streams: runs[r, i] is the number of consecutive accepted positions from i (all / none
    accepted, only the last accepted, streams of length 1)."""
    acc = EDGE_BOOL[name]
    np.testing.assert_array_equal(match_runs(acc), _reference_runs(acc))


def test_bool_runs_match_the_definition_on_random_streams():
    """Random bool streams of several lengths agree with the plain-loop definition."""
    rng = np.random.default_rng(11)
    for t in (1, 2, 3, 17, 64):
        acc = rng.random((5, t)) < 0.7
        np.testing.assert_array_equal(match_runs(acc), _reference_runs(acc))


@pytest.mark.parametrize("continuing", [False, True])
def test_flagged_runs_match_the_definition_on_edge_streams(continuing):
    """Flagged uint8 streams: FIRST for a draft's first token, CONTINUED for later ones (every token when
    ``continuing``), on all-both / none / only-FIRST / only-CONTINUED / last-only / length-1 streams."""
    both = FIRST | CONTINUED
    streams = [
        np.full((2, 6), both, dtype=np.uint8),
        np.zeros((2, 6), dtype=np.uint8),
        np.full((2, 6), FIRST, dtype=np.uint8),
        np.full((2, 6), CONTINUED, dtype=np.uint8),
        np.array([[0, 0, 0, both], [0, 0, 0, FIRST]], dtype=np.uint8),
        np.array([[0], [FIRST], [CONTINUED], [both]], dtype=np.uint8),
        np.array([[FIRST, CONTINUED, CONTINUED, 0, both, CONTINUED, FIRST]], dtype=np.uint8),
    ]
    for acc in streams:
        runs = match_runs(acc, continuing)
        np.testing.assert_array_equal(runs, _reference_runs(acc, continuing))


def test_short_stream_runs_are_uint16():
    """Streams shorter than 65535 positions give uint16 runs (half the memory traffic of int32), for
    bool streams and for flagged streams, from a draft's first token or continuing (a run is at most the
    stream's length)."""
    acc = np.array([[1, 1, 0, 1], [1, 1, 1, 1]], dtype=bool)
    assert match_runs(acc).dtype == np.uint16
    assert match_runs(np.ones((1, 1), dtype=bool)).dtype == np.uint16
    assert match_runs(acc * (FIRST | CONTINUED), True).dtype == np.uint16
    assert match_runs(acc * (FIRST | CONTINUED)).dtype == np.uint16
    long_short = np.ones((1, UINT16_MAX - 1), dtype=bool)  # the longest stream still kept in uint16
    runs = match_runs(long_short)
    assert runs.dtype == np.uint16
    assert int(runs[0, 0]) == UINT16_MAX - 1


def test_runs_of_a_65535_position_stream_leave_room_to_add_one():
    """At t = 65535 the runs switch to int32: an all-accepted stream has run 65535 at position 0, and
    runs + 1 (the advance of a step) must not wrap around as it would in uint16."""
    acc = np.ones((1, UINT16_MAX), dtype=bool)
    runs = match_runs(acc)
    assert runs.dtype == np.int32
    assert int(runs[0, 0]) == UINT16_MAX
    assert int((runs + 1)[0, 0]) == UINT16_MAX + 1
    assert int(runs[0, -1]) == 1


def test_runs_of_streams_longer_than_uint16_are_int32_and_correct():
    """Streams of 65536+ positions: int32 runs equal to the definition (all accepted, none accepted,
    and a random stream with the last position accepted)."""
    t = UINT16_MAX + 3
    rng = np.random.default_rng(5)
    rand = rng.random(t) < 0.999
    rand[-1] = True
    acc = np.stack([np.ones(t, dtype=bool), np.zeros(t, dtype=bool), rand])
    runs = match_runs(acc)
    assert runs.dtype == np.int32
    assert int(runs[0, 0]) == t
    # adsl.profiling.replay's scalar backward loop, row by row
    np.testing.assert_array_equal(runs, np.array([scalar_match_runs(row) for row in acc]))


def test_logistic_table_is_the_float32_mid_point_logistic_quantiles():
    """2^16 float32 entries, entry i = logit((i + 0.5) / 2^16) (computed here with math.log)."""
    table = logistic_table()
    size = 1 << LOGISTIC_BITS
    assert table.shape == (size,) == (65536,)
    assert table.dtype == np.float32
    idx = [0, 1, 2, 100, size // 2 - 1, size // 2, size - 101, size - 2, size - 1]
    idx += list(range(0, size, 997))
    expected = np.array([math.log((i + 0.5) / (size - i - 0.5)) for i in idx])
    np.testing.assert_allclose(table[idx].astype(np.float64), expected, rtol=1e-6, atol=1e-9)


def test_logistic_table_is_symmetric_and_strictly_increasing():
    """The standard logistic is symmetric: t[i] = -t[size - 1 - i]; quantiles strictly increase; all finite."""
    table = logistic_table().astype(np.float64)
    assert np.isfinite(table).all()
    assert (np.diff(table) > 0).all()
    np.testing.assert_allclose(table, -table[::-1], rtol=1e-6, atol=1e-9)


def test_logistic_table_noise_is_below_eta_with_probability_sigmoid_eta():
    """A uniform table entry is below eta (float32 comparison, as draw_streams does) with frequency
    sigmoid(eta) to within 2^-16."""
    table = logistic_table()
    size = table.size
    for eta in (-11.0, -4.0, -1.3, -0.2, 0.0, 1e-4, 0.7, 2.5, 6.0, 11.0):
        freq = np.count_nonzero(table < np.float32(eta)) / size
        sig = 1.0 / (1.0 + math.exp(-eta))
        assert abs(freq - sig) <= 1.0 / size, (eta, freq, sig)
