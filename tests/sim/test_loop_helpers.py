"""The event loop's own data structures against the standard library and brute force: the heap of (time,
group) that orders the micro-batches' rounds (``loop._push`` / ``loop._pop``), the pool's cut
(``loop._kth_largest``) and a machine's busy intervals (``loop._place`` / ``advance``: first-fit gap
booking, merging, pruning, the capacity stop). A heap that pops out of order, a cut one token off or a
pass booked into a gap too short changes which round runs next, which drafts are verified and when, in
every run."""

import heapq

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from adsl.sim import loop
from tests.sim.builders import uncompiled

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
    assert loop._kth_largest(a, k, np.full(a.size + 2, np.nan)) == np.sort(a)[::-1][k - 1]
    assert np.array_equal(a, before)


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(
        st.one_of(
            st.floats(0.0, 1.0),
            st.sampled_from([0.0, 1.0, 0.5, 0.5 + 2**-40, 1 / 256, 1 / 256 - 2**-50, 255 / 256]),
        ),
        min_size=1,
        max_size=900,
    ),
    outside=st.lists(st.one_of(st.floats(-2.0, -1e-300), st.floats(1.0 + 2**-52, 3.0)), max_size=3),
    data=st.data(),
)
def test_the_binned_cut_is_the_kth_largest(values, outside, data):
    """The pool's cut by bins (``_cut``) gives the k-th largest for every k and how many values exceed it: values
    on bin edges and equal values in one bin, a bin holding the cut with values above and below it, values
    outside [0, 1] (Wirth's over all, wherever they stand), up to SADDLE's pool sizes; compiled and uncompiled
    alike, its input left alone."""
    for x in outside:
        values.insert(data.draw(st.integers(0, len(values))), x)
    a = np.array(values)
    before = a.copy()
    k = data.draw(st.integers(1, a.size))
    cut = np.sort(a)[::-1][k - 1]
    want = (cut, int((a > cut).sum()))
    for cut in (loop._cut, getattr(loop._cut, "py_func", loop._cut)):  # plain already under NUMBA_DISABLE_JIT
        hist = np.full(loop.BINS + 1, 7, np.int64)  # buffers as an earlier cut left them
        assert cut(a, k, hist, np.full(a.size + 1, np.nan), np.full(a.size + 1, np.nan)) == want
    assert np.array_equal(a, before)


def _union(intervals):
    """Sorted busy intervals with touching or overlapping ones merged."""
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [tuple(i) for i in out]


def _first_fit(intervals, t, dur):
    """The earliest start >= t whose [start, start + dur) overlaps no busy interval: t or some interval's end."""
    for c in sorted({t, *(e for _, e in intervals if e >= t)}):
        if all(e <= c or s >= c + dur for s, e in intervals):
            return c
    raise AssertionError("no gap")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(1, 6)), min_size=1, max_size=25))
def test_gap_booking_is_first_fit_and_keeps_merged_sorted_intervals(requests):
    """Passes released at times 0..30 for 1..6 time units (integers: touching intervals touch exactly) are
    booked on one machine of two: each at the first gap at or after its release, as a brute-force search
    finds it, and the machine's intervals stay the union of the bookings, sorted, touching ones merged
    (extend the previous one, fill a gap between two exactly, or start the next earlier)."""
    st_, en, cnt = np.zeros((2, 64)), np.zeros((2, 64)), np.zeros(2, np.int64)
    booked = []
    for release, dur in requests:
        want = _first_fit(booked, float(release), float(dur))
        assert loop._place(st_, en, cnt, 1, float(release), float(dur)) == want
        booked.append((want, want + dur))
        n = int(cnt[1])
        assert [(s, e) for s, e in zip(st_[1, :n], en[1, :n], strict=True)] == _union(booked)
        assert cnt[0] == 0


def test_the_prune_forgets_what_ended_by_now_every_pruneth_call_and_a_full_machine_stops():
    mach = loop.machines(2, 1, False, 1)
    for s in (0.0, 2.0, 4.0, 6.0):
        loop._place(mach[0], mach[1], mach[2], 0, s, 1.0)
    loop._place(mach[0], mach[1], mach[2], 1, 0.0, 10.0)
    for call in range(1, loop.PRUNE + 1):
        loop.advance(mach, 5.0)
        kept = [(s, e) for s, e in zip(mach[0][0, : mach[2][0]], mach[1][0, : mach[2][0]], strict=True)]
        assert kept == ([(0.0, 1.0), (2.0, 3.0), (4.0, 5.0), (6.0, 7.0)] if call < loop.PRUNE else [(6.0, 7.0)])
    assert mach[2][1] == 1 and (mach[0][1, 0], mach[1][1, 0]) == (0.0, 10.0)
    full = np.zeros((1, 2)), np.zeros((1, 2)), np.zeros(1, np.int64)
    loop._place(*full, 0, 0.0, 1.0)
    loop._place(*full, 0, 2.0, 1.0)
    with pytest.raises(RuntimeError, match=r"^adsl\.sim\.loop: a machine holds more busy intervals than CAPACITY$"):
        loop._place(*full, 0, 4.0, 1.0)


@pytest.fixture(scope="module")
def plain():
    return uncompiled(loop)


def _busy(intervals, t):
    return any(s <= t < e for s, e in intervals)


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("on_gpu", [True, False])
def test_the_drafter_is_idle_where_the_machine_its_pass_starts_on_books_nothing_at_t(plain, shared, on_gpu):
    """Whether requests already running draft during a new request's prefill (``_finish``) turns on
    ``_drafter_idle``: the first stage's GPU where the draft pass has a GPU part, else its PIM, which with
    shared stacks books into the GPU's row. Against a brute-force scan of that row's bookings, at times
    inside, at the ends and at the starts of intervals, between them and after them all."""
    mach = plain.machines(4, 2, shared, 1)  # a two-stage pipeline: GPU 0, PIM 1, GPU 2, PIM 3
    booked = {0: [(1.0, 2.0), (3.0, 5.0)], 1: [(2.0, 3.0), (6.0, 7.0)], 2: [(0.0, 9.0)], 3: [(0.0, 9.0)]}
    for m, row in booked.items():
        for s, e in row:
            plain._place(mach[0], mach[1], mach[2], mach[8][m], s, e - s)
    grid = np.zeros((1, 5, 4))  # draft variant x requests x context grid
    gpu, pim = (grid + 1e-3, grid + 2e-3) if on_gpu else (grid, grid + 2e-3)
    tab = (gpu, pim, *(None,) * 6, 16.0)
    lay = (2, True, 2, False, shared, 0.0)
    row = booked[0] + (booked[1] if shared else []) if on_gpu or shared else booked[1]
    for t in (0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 5.5, 6.0, 6.5, 7.0, 8.0):
        assert plain._drafter_idle(mach, lay, tab, 3, 20.0, t) == (not _busy(row, t)), t
    no_pim = plain.machines(1, 1, False, 1)
    plain._place(no_pim[0], no_pim[1], no_pim[2], 0, 1.0, 1.0)
    for t, idle in ((0.5, True), (1.0, False), (2.0, True)):
        gpu_only = (grid + 1e-3, grid, *(None,) * 6, 16.0)
        assert plain._drafter_idle(no_pim, (1, False, 1, False, False, 0.0), gpu_only, 3, 20.0, t) == idle


def test_a_booking_never_reads_past_a_machines_count(plain):
    """A pass placed after every interval of a machine is a new interval even where a slot past the count
    still holds a start equal to the pass's end (pruned or moved intervals leave such stale slots)."""
    st_, en, cnt = np.zeros((1, 8)), np.zeros((1, 8)), np.zeros(1, np.int64)
    st_[0, :3], en[0, :3], cnt[0] = (0.0, 5.0, 10.0), (1.0, 6.0, 11.0), 2  # slot 2: stale
    before = st_.copy(), en.copy(), cnt.copy()
    assert plain._place(st_, en, cnt, 0, 7.0, 3.0) == 7.0  # a new interval
    assert cnt[0] == 3 and list(zip(st_[0, :3], en[0, :3], strict=True)) == [(0.0, 1.0), (5.0, 6.0), (7.0, 10.0)]
    st_, en, cnt = before
    assert plain._place(st_, en, cnt, 0, 6.0, 4.0) == 6.0  # the last interval extended
    assert cnt[0] == 2 and list(zip(st_[0, :2], en[0, :2], strict=True)) == [(0.0, 1.0), (5.0, 10.0)]


def test_pass_variants_that_tie_go_to_the_lower_one_and_q_reads_up_to_the_last_column(plain):
    """Two draft or verification variants as fast as each other, one on the GPU and one in PIM: the
    scheduler keeps the first (the lower variant). Tokens per request q read the verify tables of the
    integer q below and the one above with the fraction's weight: at a whole q (the last table's too) its
    own, the next at weight 0; past the last table the last at both ends."""
    grid = np.zeros((2, 5, 4))
    gpu, pim = grid.copy(), grid.copy()
    gpu[0], pim[1] = 1e-3, 1e-3
    assert plain.draft_pass(gpu, pim, 3, 20.0, 16.0) == (0, 1e-3, 0.0)
    assert plain.draft_pass(gpu[::-1].copy(), pim[::-1].copy(), 3, 20.0, 16.0) == (0, 0.0, 1e-3)
    vg = np.zeros((2, 4, 5, 4))  # variant x tokens per request - 1 x requests x context grid
    vp = vg.copy()
    vg[0], vp[1] = 1e-2, 1e-2
    vg[0, :, 3, :] = vp[1, :, 3, :] = np.array([1.0, 2.0, 4.0, 8.0])[:, None] * 1e-2  # q = 1..4
    assert plain.verify_pass(vg, vp, 3, 20.0, 4.0, 16.0) == (0, 4, 0.0, 8e-2, 0.0)
    assert plain.verify_pass(vg, vp, 3, 20.0, 3.0, 16.0) == (0, 3, 0.0, 4e-2, 0.0)
    v, q0, f, g, p = plain.verify_pass(vg, vp, 3, 20.0, 4.5, 16.0)
    assert (v, q0, f, p) == (0, 4, 0.5, 0.0) and g == pytest.approx(8e-2, rel=1e-12)
    v, q0, f, g, p = plain.verify_pass(vg, vp, 3, 20.0, 2.5, 16.0)
    assert (v, q0, f, p) == (0, 2, 0.5, 0.0) and g == pytest.approx(3e-2, rel=1e-12)


def test_the_lowered_taus_lengths_are_in_force_while_at_most_so_many_requests_are_in_flight(plain):
    """``length_table``: the light-load lengths while the requests with tokens left number at most the
    limit (a request with one token left is in flight), the tau lengths above it or with no limit (0)."""
    normal, light = np.full((3, 4), 7), np.full((3, 4), 2)

    def table(left, at_most):
        rq = (None,) * 7 + (normal, True, None, None, light, np.int64(at_most))
        slots = (None, None, np.array(left, np.int64))
        return plain.length_table(rq, slots)

    assert table([1, 0, 0], 1) is light
    assert table([1, 1, 0], 1) is normal
    assert table([3, 1, 0], 2) is light
    assert table([1, 0, 0], 0) is normal


def _segments(plain, g, p, stages, pim, apart):
    seg_m, seg_d = np.empty(64, np.int64), np.empty(64)
    k = plain.segments(g, p, stages, pim, apart, seg_m, seg_d)
    return list(zip(seg_m[:k].tolist(), seg_d[:k].tolist(), strict=True))


def test_a_pass_runs_through_every_stage_in_chunks_on_its_gpu_and_pim(plain):
    """A pass's segments: CHUNKS (4) alternations of its GPU and PIM parts split over the pipeline's stages
    (one chunk a stage from 4 stages on), stage by stage on machines (GPU, PIM) = (2 s, 2 s + 1), or s on a
    GPU-only pipeline; a part of 0 s books nothing; a replicated draft (``apart``) runs all of it on every stage."""
    assert _segments(plain, 1.0, 0.0, 2, False, False) == [(0, 0.25), (0, 0.25), (1, 0.25), (1, 0.25)]
    assert _segments(plain, 1.0, 2.0, 4, True, False) == [(m, 0.25 if m % 2 == 0 else 0.5) for m in range(8)]
    assert _segments(plain, 0.0, 2.0, 8, True, False) == [(2 * s + 1, 0.25) for s in range(8)]
    assert _segments(plain, 1.0, 0.0, 2, True, True) == [(0, 0.5), (0, 0.5), (2, 0.5), (2, 0.5)]


def test_a_pass_books_its_segments_in_turn_merging_touching_intervals_and_counting_busy_seconds(plain):
    """``run_pass`` on a two-stage pipeline (GPU 0, PIM 1, GPU 2, PIM 3): each segment starts when the one
    before it ends; the pass's start and end; when it cleared the first stage (its last segment on machine
    0 or 1, read as the verifier's next free time); a second pass released as the first ends extends each
    machine's interval (touching intervals merge); each machine's busy seconds add up."""
    mach = plain.machines(4, 2, False, 1)
    logs = plain.new_logs((1, 1, 1, 1, 0))
    seg_m, seg_d = np.array([0, 1, 2, 3]), np.array([1.0, 2.0, 0.5, 0.25])
    assert plain.run_pass(mach, 0.0, seg_m, seg_d, 4, 2, False, plain.VERIFY, logs) == (0.0, 3.75)
    assert mach[5][0] == 3.0
    assert plain.run_pass(mach, 3.75, seg_m[:2], seg_d[:2], 2, 2, False, plain.VERIFY, logs) == (3.75, 6.75)
    assert mach[5][0] == 6.75
    st_, en, cnt = mach[0], mach[1], mach[2]
    got = [[(st_[m, j], en[m, j]) for j in range(cnt[m])] for m in range(4)]
    assert got == [[(0.0, 1.0), (3.75, 4.75)], [(1.0, 3.0), (4.75, 6.75)], [(3.0, 3.5)], [(3.5, 3.75)]]
    np.testing.assert_array_equal(mach[3], [2.0, 4.0, 0.5, 0.25])
    mach = plain.machines(2, 1, False, 1)
    plain.run_pass(mach, 0.0, np.array([0, 1]), np.array([1.0, 1.0]), 2, 2, False, plain.VERIFY, logs)
    plain.run_pass(mach, 1.0, np.array([0]), np.array([1.0]), 1, 2, False, plain.VERIFY, logs)
    assert mach[2][0] == 1 and (mach[0][0, 0], mach[1][0, 0]) == (0.0, 2.0)  # released as it ends: merged


def test_a_replicated_pass_books_every_stages_copy_from_the_release(plain):
    """``run_pass`` with ``apart`` (a replicated draft) on a two-stage pipeline with PIM: each stage's segments
    run in turn from the release, not after the stage before; the pass spans the earliest start to the latest
    end. Stage 1's GPU busy until 1.0 delays its copy alone."""
    mach = plain.machines(4, 2, False, 1)
    logs = plain.new_logs((1, 1, 1, 1, 0))
    mach[0][2, 0], mach[1][2, 0], mach[2][2] = 0.0, 1.0, 1
    seg_m, seg_d = np.array([0, 1, 2, 3]), np.array([1.0, 2.0, 1.0, 2.0])
    assert plain.run_pass(mach, 0.5, seg_m, seg_d, 4, 2, True, plain.DRAFT, logs) == (0.5, 4.0)
    st_, en, cnt = mach[0], mach[1], mach[2]
    got = [[(st_[m, j], en[m, j]) for j in range(cnt[m])] for m in range(4)]
    assert got == [[(0.5, 1.5)], [(1.5, 3.5)], [(0.0, 2.0)], [(2.0, 4.0)]]
    assert plain.run_pass(mach, 9.0, seg_m, seg_d, 0, 2, True, plain.DRAFT, logs) == (9.0, 9.0)
    # a copy on PIM alone, two chunks a stage: within a stage each chunk follows the one before, even where an
    # earlier gap (machine 3 idle until 1.0) would hold it
    mach = plain.machines(4, 2, False, 1)
    mach[0][3, 0], mach[1][3, 0], mach[2][3] = 1.0, 5.0, 1
    seg_m, seg_d = np.array([1, 1, 3, 3]), np.array([1.0, 1.0, 2.0, 1.0])
    assert plain.run_pass(mach, 0.0, seg_m, seg_d, 4, 2, True, plain.DRAFT, logs) == (0.0, 8.0)
    assert (mach[2][3], mach[0][3, 0], mach[1][3, 0]) == (1, 1.0, 8.0)


def test_a_job_on_a_gpu_only_pipeline_books_each_stages_gpu(plain):
    """``_issue`` on a two-stage pipeline without PIM: the job's GPU time in chunks through stage 0's GPU
    (machine 0), then stage 1's (machine 1), half on each."""
    mach = plain.machines(2, 2, False, 1)
    logs = plain.new_logs((4, 1, 1, 1, 0))
    job, end = plain._issue(mach, (2, False, 1, False, False, 0.0), logs, plain.VERIFY, 0.0, 1.0, 0.0)
    assert (job, end) == (0, 1.0)
    np.testing.assert_array_equal(mach[3], [0.5, 0.5])


def test_the_prune_of_a_machine_full_to_capacity_keeps_what_has_not_ended(plain):
    """A machine holding as many intervals as it has room for forgets the two that ended by now (on the
    PRUNE-th call) and keeps the other two in order, reading no slot past its count."""
    st_, en = np.array([[0.0, 2.0, 4.0, 6.0]]), np.array([[1.0, 3.0, 5.0, 7.0]])
    cnt, calls = np.array([4]), np.array([plain.PRUNE - 1])
    plain.advance((st_, en, cnt, np.zeros(1), calls), 3.5)
    assert cnt[0] == 2 and (st_[0, :2].tolist(), en[0, :2].tolist()) == ([4.0, 6.0], [5.0, 7.0])


def test_a_replicated_draft_runs_one_whole_pass_on_every_stage_at_once(plain):
    """``_issue`` of a replicated draft on a two-stage GPU-only pipeline: each stage's GPU runs the whole
    draft (its two chunks of 0.5 s) from the release at once, and the job spans the two copies."""
    mach = plain.machines(2, 2, False, 1)
    logs = plain.new_logs((4, 1, 1, 1, 0))
    job, end = plain._issue(mach, (2, False, 1, True, False, 0.0), logs, plain.DRAFT, 0.5, 1.0, 0.0)
    assert (job, end) == (0, 1.5)
    np.testing.assert_array_equal(mach[3], [1.0, 1.0])
    assert [(mach[0][m, 0], mach[1][m, 0]) for m in range(2)] == [(0.5, 1.5), (0.5, 1.5)]
    assert logs[plain.JOBS][0].tolist() == [plain.DRAFT, 0.5, 1.5]


def _chain(plain, lengths, ctx, steps):
    """``draft_chain`` (uncompiled) of one micro-batch released at 2.0 on one GPU whose draft table costs 1 s a
    step, its step buffers ``steps`` long: (its end, its logs, its counters)."""
    mach, logs, counts = plain.machines(1, 1, False, steps), plain.new_logs((4, 16, 1, 1, 0)), np.zeros(9, np.int64)
    ones = np.ones((1, 41, 4))
    tab = (ones, 0 * ones, None, None, None, None, None, None, 16.0, np.zeros(2, np.int64), None)
    lay = (1, False, 1, False, False, 0.0)
    end = plain.draft_chain(mach, lay, tab, logs, counts, plain.DRAFT, 2.0, np.asarray(lengths), np.asarray(ctx))
    return end, logs, counts


@settings(max_examples=150, deadline=None)
@given(
    lengths=st.one_of(
        st.lists(st.integers(0, 9), min_size=1, max_size=40),  # an adaptive rule's lengths
        st.integers(1, 9).flatmap(lambda k: st.lists(st.sampled_from([0, k]), min_size=1, max_size=40)),  # fixed d
    ),
    seed=st.integers(0, 2**16),
)
@example(lengths=[3, 4, 0, 4, 3], seed=0)  # lengths one apart: the four-step path, not the fixed length's one sum
@example(lengths=[2, 0, 2], seed=1)  # a fixed length: the one-sum path
def test_a_draft_chains_steps_count_their_requests_and_sum_their_contexts_in_slot_order(plain, lengths, seed):
    """``draft_chain``'s step j drafts for the requests with a length above j, at their mean context + j: its
    logged request count and context are those of a plain sum over the slots in order (every length up to
    step buffers as long as the chain, requests that draft nothing, and lengths all 0 or k, which take the
    one-sum path). A chain in which nobody drafts books nothing and ends at its release."""
    ctx = np.random.default_rng(seed).uniform(1.0, 5000.0, len(lengths))
    lengths = np.array(lengths, np.int64)
    k = int(lengths.max())
    end, logs, counts = _chain(plain, lengths, ctx, max(k, 1))  # step buffers as long as the chain: enough
    assert counts[1] == k and logs[5][plain.PASSES] == k
    assert end == (2.0 + k if k else 2.0)
    for j in range(k):
        n, total = 0, 0.0
        for m, c in zip(lengths, ctx, strict=True):
            if m > j:
                n, total = n + 1, total + c
        assert tuple(logs[plain.PASSES][j, 3:5]) == (n, total / n + j)


def test_a_draft_chain_longer_than_the_step_buffers_raises(plain):
    """The compiled chain writes its steps unchecked past this check: a chain of 4 steps in buffers of 3 raises
    (the loop's buffers hold d + 1 steps, an eager draft's most)."""
    with pytest.raises(RuntimeError, match=r"^adsl\.sim\.loop: a draft chain longer than the machines' step buffers$"):
        _chain(plain, [4, 1], [10.0, 20.0], 3)
