import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from adsl.profiling.replay import match_runs, replay, running_product_lengths


def test_match_runs():
    assert match_runs(np.array([1, 1, 0, 1, 1, 1, 0], bool)).tolist() == [2, 1, 0, 3, 2, 1, 0]


def test_replay_fixed_length():
    match = np.array([1, 1, 0, 1, 1, 1, 1, 0, 0, 1], bool)
    steps = replay(match, np.full(10, 3))
    assert steps.accepted.tolist() == [2, 3, 0]  # the window at 8 would pass the end
    assert steps.start.tolist() == [0, 3, 7]


def test_running_product_stops_at_tau():
    top1 = np.array([0.9, 0.9, 0.5, 0.99, 0.99])
    # H: 0.9, 0.81, 0.405 -> crosses 0.5 at the third token, which is still drafted
    assert running_product_lengths(top1, 0.5, 8)[0] == 3
    assert running_product_lengths(top1, 0.0, 4)[0] == 4  # tau = 0: never stops before d_max
    assert running_product_lengths(top1, 0.95, 8)[0] == 1


@settings(max_examples=100, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=80), st.integers(1, 12))
def test_replay_conserves_tokens(match, d):
    m = np.array(match)
    steps = replay(m, np.full(len(m), d))
    assert (steps.accepted <= steps.drafted).all()
    assert (steps.emitted == steps.accepted + 1).all()
    assert steps.start.is_monotonic_increasing
    if len(steps):
        assert steps.emitted.sum() == steps.start.iloc[-1] + steps.emitted.iloc[-1]
