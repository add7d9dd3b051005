"""The event loop's own data structures against the standard library: the heap of (time, group) that
orders the micro-batches' rounds (``loop._push`` / ``loop._pop``) and the pool's cut (``loop._kth_largest``).
A heap that pops out of order or a cut one token off changes which round runs next and which drafts are
verified, in every run."""

import heapq

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from adsl.sim import loop

times = st.lists(st.sampled_from([0.0, 0.5, 1.0, 1.5, 2.0, 3.25]), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(first=times, later=st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0, 4.0]), max_size=12), pops=st.integers(0, 12))
def test_the_round_heap_pops_what_heapq_pops(first, later, pops):
    """Pushes, some pops, more pushes, then pops to the end: every pop is heapq's smallest (time, group),
    ties in time broken by the group (each group holds at most one entry, as in the loop)."""
    n = len(first) + len(later)
    ht, hi = np.empty(n), np.empty(n, np.int64)
    size, ref, group, got, want = 0, [], 0, [], []
    for t in first:
        size = loop._push(ht, hi, size, t, group)
        heapq.heappush(ref, (t, group))
        group += 1
    for _ in range(min(pops, size)):
        t, i, size = loop._pop(ht, hi, size)
        got.append((t, int(i)))
        want.append(heapq.heappop(ref))
    for t in later:
        size = loop._push(ht, hi, size, t, group)
        heapq.heappush(ref, (t, group))
        group += 1
    while size:
        t, i, size = loop._pop(ht, hi, size)
        got.append((t, int(i)))
        want.append(heapq.heappop(ref))
    assert got == want and not ref


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0]), min_size=1, max_size=40),
    data=st.data(),
)
def test_the_pools_cut_is_the_kth_largest_and_leaves_its_input_alone(values, data):
    """Wirth's selection returns the k-th largest (1-based), ties included, for every k, and works on a
    copy (the pool reads the scores again after the cut)."""
    a = np.array(values)
    before = a.copy()
    k = data.draw(st.integers(1, a.size))
    assert loop._kth_largest(a, k) == np.sort(a)[::-1][k - 1]
    assert np.array_equal(a, before)
