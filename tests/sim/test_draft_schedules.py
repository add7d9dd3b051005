"""Hugging Face assisted generation's length schedule, replayed on streams."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from adsl.sim.draft_schedules import assisted_generation


def _scalar(acc_row, out_len, start=5.0):
    """transformers 4.37.1 AssistedCandidateGenerator.update_candidate_strategy, one request."""
    n, pos, gen, steps, drafted, lengths = start, 0, 0, 0, 0, {}
    while gen < out_len:
        k = int(n)
        lengths[pos] = k
        a = 0
        while a < k and acc_row[pos + a]:
            a += 1
        gen += min(a + 1, out_len - gen)
        n = n + 2.0 if a == k else max(1.0, n - 1.0)
        pos += a + 1
        steps += 1
        drafted += k
    return lengths, steps, gen, drafted


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.floats(0.0, 1.0), st.integers(1, 60), st.integers(0, 2**31 - 1))
def test_vectorized_schedule_equals_the_transformers_rule(n, p, out_len, seed):
    acc = np.random.default_rng(seed).random((n, 400)) < p
    out = np.full(n, out_len)
    rep = assisted_generation(acc, out)
    for i in range(n):
        lengths, steps, gen, drafted = _scalar(acc[i], out_len)
        assert rep.steps[i] == steps and rep.emitted[i] == gen == out_len and rep.drafted[i] == drafted
        for pos, k in lengths.items():
            assert rep.lengths[i, pos] == k


def test_full_acceptance_grows_the_draft_by_two_and_misses_shrink_it_to_one():
    rep = assisted_generation(np.ones((1, 200), dtype=bool), np.array([40]))
    assert [rep.lengths[0, p] for p in (0, 6, 14)] == [5, 7, 9]  # 5 + 1 emitted, then 7 + 1, ...
    rep = assisted_generation(np.zeros((1, 60), dtype=bool), np.array([10]))
    assert [rep.lengths[0, p] for p in range(6)] == [5, 4, 3, 2, 1, 1]
    assert rep.tokens_per_step == 1.0
