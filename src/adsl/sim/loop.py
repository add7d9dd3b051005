"""The event loop of one replica, compiled with numba: the same plain loop is the scalar reference
(``NUMBA_DISABLE_JIT=1``, or each function's ``.py_func``) and the fast path.

State is structure-of-arrays: per slot (the request it holds, its position in its streams, the tokens it
has left, its context, its pool entry), per machine (sorted busy intervals), and append-only logs of the
jobs booked, the passes in them, the token events and the rounds. The Python side builds the inputs
(cost tables as flat arrays, acceptance runs, draft lengths, confidences) and turns the logs into a
``RunResult`` (``adsl.sim.result``).

Modes: ``AD`` decode passes; ``SD`` drafting then verification per micro-batch, strictly alternating;
``POOL`` the Shared Pool, verified once every entry is ready (or as soon as the verifier is idle), with
eager drafting during verification (SADDLE-s, SADDLE) or without it (SADDLE-p: then a request drafts only
what fits in the pool, and every request's entry is verified in each pass). Every float operation is the
one the earlier Python core did, in the same order, so results are the same to the bit.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic, overload

AD, SD, POOL = 0, 1, 2
KINDS = ("draft", "eager", "verify", "decode", "prefill")
# numpy scalars, not ints: numba types an int constant passed to a compiled function as a literal and
# compiles that function (and every one it passes the value on to) once per value
DRAFT, EAGER, VERIFY, DECODE, PREFILL = (np.int64(k) for k in range(5))
ZERO, ONE = np.int64(0), np.int64(1)
TABLES = ("draft", "verify", "decode", "prefill")  # a pass's cost table
T_DRAFT, T_VERIFY, T_DECODE, T_PREFILL = (np.int64(k) for k in range(4))
PRUNE = 8  # machines forget past intervals every PRUNE-th event
CHUNKS = 4  # FC / attention alternations per pass (split over a pipeline's stages)
CAPACITY = 4096  # busy intervals a machine may hold at once (past ones are pruned)
NONE = -1.0  # "no time" (a request left to arrive: never)
NEVER = 1 << 62  # a count no run reaches (``run_replica``'s ``stop``: run until every request has finished)
BINS = 256  # the pool cut's histogram bins over [0, 1] (``_cut``): about 2 scores a bin at SADDLE's pool sizes
# Functions only compiled code calls: no CPython or C entry point. numba builds both for every function and
# links them, with the function, into each caller's module, which it optimises again (a cold compile 77 -> 70 s
# on a 2-core EPYC, docs/simulator.md); those the tests or the Python side call keep theirs.
INNER = {"cache": True, "no_cpython_wrapper": True, "no_cfunc_wrapper": True}
# A compiled function increfs every array of every tuple it is passed on entry and decrefs them on exit (an
# atomic operation each: a third of SD's loop time), so what runs once a segment or a slot (run_pass, the cost
# look-ups, the log writers, fresh_lengths) is inlined into its callers (AD 1.7x, SD and PIM-SD 1.3x faster,
# docs/simulator.md, fifteenth session), and so is _issue where a pass is drafted (draft_chain: SD 6 % slower
# without). But numba types an inlined body again at every call site, and compiles each function together with
# every function below it (linked into its module and optimised again), so the cold compile pays once per call site
# of an inlined body and once per level of calls for what lies below. Hence: what runs once a job, a round or a
# request is compiled once (book, _verify_costs, settle, _drafter_idle, _releases; the thin wrappers admit_pool,
# draft_together and _refill, with one or two call sites, are inlined), and the tree of calls is shallow: the two
# loops admit, prefill and draft themselves instead of through settle and _finish (twenty-fourth session: the
# cold compile 21.0 -> 17.1 s on a Xeon, AD's loop 16 % slower for booking its decode passes through book). Small
# leaves are compiled apart (the heap's _push / _pop, advance, _bisect_right, waiting / next_arrival): a call that
# hands over two small arrays costs little. Those that allocate nothing and return no array (the busy-interval
# helpers, segments, advance, the heap, waiting / next_arrival) are compiled without reference counting
# (_nrt=False): their callers hold every array they are handed, and numba's count of each on entry and exit was
# the loops' commonest (AD's loop 25 %, SD's 15 % faster; docs/simulator.md, twenty-fifth session). So are the
# pass bookers and draft_chain (its step buffers in the machines) and the pool's helpers (their buffers from
# pool_state); with the narrow streams (core.narrow) AD 2.3x, SD and PIM-SD 1.6x faster (twenty-sixth session).
# numba compiles what such a function calls without reference counting too, so nothing below one may allocate.


# -- memory hints -------------------------------------------------------------------------------------
def prefetch(a, i, j):
    """Ask the processor to bring the cache line of ``a[i, j]`` in, ahead of a loop that reads it (``a`` 2-D; any
    address is safe: a prefetch never faults). Nothing uncompiled. Each round reads every slot's streams at its
    request's row, a cache line each, where a load waited for the one before it behind the loop's branches. Its
    calls are not mutated (``# pragma: no mutate``): mutation testing runs the loop uncompiled, where they do
    nothing, and a hint for another address changes no value."""


@intrinsic
def _prefetch(typingctx, a, i, j):
    def codegen(context, builder, signature, args):
        ty = signature.args[0]
        ptr = cgutils.get_item_pointer(
            context, builder, ty, context.make_array(ty)(context, builder, args[0]), args[1:]
        )
        i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]), "llvm.prefetch.p0"
        )
        # a read, kept in the caches near the core (locality 2 of 3), data
        builder.call(fn, [builder.bitcast(ptr, i8p), ir.Constant(i32, 0), ir.Constant(i32, 2), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return types.void(a, types.intp, types.intp), codegen


@overload(prefetch)
def _prefetch_compiled(a, i, j):
    return lambda a, i, j: _prefetch(a, i, j)


# -- cost look-ups ------------------------------------------------------------------------------------
@njit(cache=True, inline="always")
def at(gpu, pim, n, ctx, step):
    """(GPU + link s, PIM s) of a pass over ``n`` requests at mean context ``ctx``: linear in context between
    the grid points of tables ``gpu`` / ``pim`` (requests x context grid)."""
    if n <= 0:
        return 0.0, 0.0
    pos = ctx / step
    i = min(int(pos), gpu.shape[1] - 2)
    f = pos - i
    return gpu[n, i] * (1 - f) + gpu[n, i + 1] * f, pim[n, i] * (1 - f) + pim[n, i + 1] * f


@njit(inline="always", **INNER)
def draft_pass(dg, dp, n, ctx, step):
    """(variant, GPU s, PIM s): the faster draft-table variant (the scheduler's FC placement); ties keep
    the lower variant."""
    bv, bg, bp = ZERO, 0.0, 0.0
    for v in range(dg.shape[0]):
        g, p = at(dg[v], dp[v], n, ctx, step)
        if v == 0 or g + p < bg + bp:
            bv, bg, bp = v, g, p
    return bv, bg, bp


@njit(inline="always", **INNER)
def verify_pass(vg, vp, n, ctx, q, step):
    """(variant, integer q, weight of q + 1, GPU s, PIM s): linear between the integer-q tables, for 1 .. nq tokens
    a request (no pass verifies more than d + 1: past the last table a pass reads it at both ends)."""
    nq = vg.shape[1]
    q0 = min(int(q), nq)
    q1 = min(q0, nq - 1)  # the table of q0 + 1 tokens a request, or the last
    f = q - q0
    bv, bg, bp = ZERO, 0.0, 0.0
    for v in range(vg.shape[0]):
        g0, p0 = at(vg[v, q0 - 1], vp[v, q0 - 1], n, ctx, step)
        if f > 0:
            g1, p1 = at(vg[v, q1], vp[v, q1], n, ctx, step)
        else:
            g1, p1 = g0, p0
        g, p = g0 * (1 - f) + g1 * f, p0 * (1 - f) + p1 * f
        if v == 0 or g + p < bg + bp:
            bv, bg, bp = v, g, p
    return bv, q0, f, bg, bp


# -- machines -----------------------------------------------------------------------------------------
@njit(cache=True, _nrt=False)
def segments(gpu_s, pim_s, stages, pim, apart, seg_m, seg_d):
    """Fill (machine, duration) of a pass's segments into ``seg_m`` / ``seg_d``; returns their count. Through
    every pipeline stage in turn, or (``apart``: a replicated draft) all of the pass on every stage at once."""
    chunks = max(1, CHUNKS // stages)
    per = 2 if pim else 1
    split = 1 if apart else stages
    g, p = gpu_s / split / chunks, pim_s / split / chunks
    k = 0
    for s in range(stages):
        for _ in range(chunks):
            gm, pm = s * per, s * per + 1
            if g > 0 and p > 0:
                seg_m[k], seg_d[k], seg_m[k + 1], seg_d[k + 1] = gm, g, pm, p
                k += 2
            elif g > 0:
                seg_m[k], seg_d[k] = gm, g
                k += 1
            elif p > 0:
                seg_m[k], seg_d[k] = pm, p
                k += 1
    return k


@njit(_nrt=False, **INNER)
def _bisect_right(a, n, x):
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) // 2
        if x < a[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo


@njit(_nrt=False, **INNER)
def _insert(st, en, cnt, m, k, s, e):
    n = cnt[m]
    if n >= st.shape[1]:
        raise RuntimeError("adsl.sim.loop: a machine holds more busy intervals than CAPACITY")
    for j in range(n, k, -1):
        st[m, j] = st[m, j - 1]
        en[m, j] = en[m, j - 1]
    st[m, k] = s
    en[m, k] = e
    cnt[m] = n + 1


@njit(_nrt=False, **INNER)
def _delete(st, en, cnt, m, k, count):
    n = cnt[m]
    for j in range(k, n - count):
        st[m, j] = st[m, j + count]
        en[m, j] = en[m, j + count]
    cnt[m] = n - count


@njit(cache=True, _nrt=False)
def _place(st, en, cnt, m, t, dur):
    """First idle gap of machine ``m`` at or after ``t`` that holds ``dur``; books it, returns its start."""
    n = cnt[m]
    k = _bisect_right(en[m], n, t)
    while k < n and st[m, k] < t + dur:
        if en[m, k] > t:
            t = en[m, k]
        k += 1
    end = t + dur
    if k > 0 and en[m, k - 1] == t:  # touches the previous interval: extend it
        if k < n and st[m, k] == end:
            en[m, k - 1] = en[m, k]
            _delete(st, en, cnt, m, k, ONE)
        else:
            en[m, k - 1] = end
    elif k < n and st[m, k] == end:
        st[m, k] = t
    else:
        _insert(st, en, cnt, m, k, t, end)
    return t


@njit(cache=True, _nrt=False)
def advance(mach, now):
    """Forget intervals that ended before ``now``, every PRUNE-th call (placement skips them anyway)."""
    st, en, cnt, calls = mach[0], mach[1], mach[2], mach[4]
    calls[0] += 1
    if calls[0] % PRUNE:
        return
    for m in range(cnt.size):
        k = _bisect_right(en[m], cnt[m], now)
        if k:
            _delete(st, en, cnt, m, ZERO, k)


@njit(inline="always", **INNER)
def run_pass(mach, release, seg_m, seg_d, nseg, per_stage, apart, kind, logs):
    """Book segments in order from ``release`` (``apart``: each stage's from ``release``): (the first start, the
    last end). ``mach[5][0]`` afterwards holds when the pass cleared the first pipeline stage."""
    st, en, cnt, busy, first_stage, rows = mach[0], mach[1], mach[2], mach[3], mach[5], mach[8]
    segs, logged = logs[INTERVALS], logs[5]  # taken once, not at every segment
    t, stage = release, ZERO
    start, end = np.inf, release
    first_stage[0] = release
    for j in range(nseg):
        m, dur = seg_m[j], seg_d[j]
        if apart and m // per_stage != stage:
            t, stage = release, m // per_stage
        r = rows[m]  # the busy intervals it books into (shared stacks: its stage's GPU's)
        n = cnt[r]
        if n == 0 or en[r, n - 1] < t:  # after everything booked on the machine: the common case
            _insert(st, en, cnt, r, n, t, t + dur)
            s = t
        elif en[r, n - 1] == t:
            en[r, n - 1] = t + dur
            s = t
        else:
            s = _place(st, en, cnt, r, t, dur)
        start = min(start, s)
        t = s + dur
        end = max(end, t)
        if m < per_stage:
            first_stage[0] = t
        busy[m] += dur
        if segs.shape[0]:  # the run keeps its timeline
            _row(segs, logged, INTERVALS, (float(m), s, t, float(kind)))
    return (start if nseg else release), end


# -- the logs -----------------------------------------------------------------------------------------
# Append-only logs of one replica's run, one float64 array each (whole numbers stored exactly), rows
# counted in ``logs[5]``; ``adsl.sim.result`` reads them. A full log takes no more rows but goes on counting
# them, and the caller runs the replica again with as many rows as it counted (runs are deterministic; the
# loop never reads its logs).
JOBS, PASSES, EVENTS, ROUNDS, INTERVALS = range(5)
WIDTHS = (3, 7, 3, 3, 4)  # kind, start, end | job, table, variant, n, ctx, q0, f | t, emitted, completed |
# t, requests, drafted | machine, start, end, kind


@njit(inline="always", **INNER)
def _row(log, n, k, values):
    """Append ``values`` (floats, as many as the log has columns) as a row of ``log``, log ``k`` of ``logs`` (its
    rows counted in ``n``, ``logs[5]``; a row past the end is counted, not written); returns its index. Callers
    index ``logs`` with a constant themselves: indexed here, numba compiled a tuple look-up for every log and
    every kind of caller. Not raised: a raise kept numba's reference counts of ``log`` and ``n`` around every row
    (SD's loop 5 % slower, docs/simulator.md)."""
    i = n[k]
    if i < log.shape[0]:
        for j in range(len(values)):
            log[i, j] = values[j]
    n[k] = i + 1
    return i


def new_logs(rows: tuple[int, ...]) -> tuple:
    """Empty logs of ``rows`` rows each (intervals: 0 rows when the run keeps no timeline). Uninitialised:
    only the rows counted in ``logs[5]`` are ever read, and zeroing them cost more than a replica's run."""
    return (*(np.empty((r, WIDTHS[k])) for k, r in enumerate(rows)), np.zeros(5, np.int64))


@njit(inline="always", **INNER)
def _issue(mach, lay, logs, kind, release, g, p):
    """Book a job of GPU + link ``g`` and PIM ``p`` seconds (a replicated draft: on every stage at once);
    returns (job index, end). Its passes are logged by the caller."""
    stages, pim, per_stage, everywhere = lay[0], lay[1], lay[2], lay[3]
    seg_m, seg_d = mach[6], mach[7]
    apart = everywhere and stages > 1 and (kind == DRAFT or kind == EAGER)
    k = segments(g, p, stages, pim, apart, seg_m, seg_d)
    start, end = run_pass(mach, release, seg_m, seg_d, k, per_stage, apart, kind, logs)
    return _row(logs[JOBS], logs[5], JOBS, (float(kind), start, end)), end


@njit(inline="always", **INNER)
def _round(logs, t, n, drafted):
    _row(logs[ROUNDS], logs[5], ROUNDS, (float(t), float(n), float(drafted)))


@njit(inline="always", **INNER)
def _event(logs, t, emitted, completed):
    _row(logs[EVENTS], logs[5], EVENTS, (float(t), float(emitted), float(completed)))


@njit(_nrt=False, **INNER)
def book(mach, lay, logs, kind, release, g, p, table, variant, n, ctx, q0, f):
    """A job of one pass (``_issue``), its pass logged; returns its end. Compiled once for every caller that books
    one pass a job (a prefill, a decode or verification pass), where ``_issue`` inlined in each was typed again."""
    job, end = _issue(mach, lay, logs, kind, release, g, p)
    values = (float(job), float(table), float(variant), float(n), float(ctx), float(q0), float(f))
    _row(logs[PASSES], logs[5], PASSES, values)
    return end


# -- passes -------------------------------------------------------------------------------------------
@njit(_nrt=False, **INNER)
def draft_chain(mach, lay, tab, logs, counts, kind, release, lengths, ctx):
    """Draft passes of one micro-batch as one job: step j drafts for the requests with length > j (their
    mean context, + j); its serial GPU and PIM time are the sums of its steps', in step order. Returns
    the chain's end (``release`` when nobody drafts). Its steps' variants, requests and contexts go in the
    machines' step buffers (``mach[9]``, ``mach[10]``): allocating nothing, it is compiled without reference
    counting (see ``INNER``), where its arguments' counts were a fifth of a pool run's."""
    k, lo = 0, 1 << 30  # the longest draft, the shortest of those that draft
    for v in lengths:
        k = max(k, v)
        lo = min(lo, v if v > 0 else 1 << 30)
    if k <= 0:
        return release
    if k > mach[10].size:
        raise RuntimeError("adsl.sim.loop: a draft chain longer than the machines' step buffers")
    dg, dp, step, fc_on_pim = tab[0], tab[1], tab[8], tab[9]
    var, ns, cs = mach[9][0], mach[9][1], mach[10]
    # each step's requests and context sum, the sum in slot order; + 0.0 where a request drafts no further (the
    # same sums), so no branch on a length and no wait on a sum's last store
    if lo == k:  # every request drafts k tokens or none (a fixed draft length): every step's sums alike
        n0, c0 = 0, 0.0
        for i in range(lengths.size):
            n0, c0 = n0 + (lengths[i] > 0), c0 + (ctx[i] if lengths[i] > 0 else 0.0)
        for j in range(k):
            ns[j], cs[j] = n0, c0
    else:
        for j in range(0, k, 4):  # four steps at once
            n0, n1, n2, n3 = 0, 0, 0, 0
            c0, c1, c2, c3 = 0.0, 0.0, 0.0, 0.0
            for i in range(lengths.size):
                m, c = lengths[i], ctx[i]
                n0, c0 = n0 + (m > j), c0 + (c if m > j else 0.0)
                n1, c1 = n1 + (m > j + 1), c1 + (c if m > j + 1 else 0.0)
                n2, c2 = n2 + (m > j + 2), c2 + (c if m > j + 2 else 0.0)
                n3, c3 = n3 + (m > j + 3), c3 + (c if m > j + 3 else 0.0)
            for jj, (n, c) in enumerate(((n0, c0), (n1, c1), (n2, c2), (n3, c3))):
                if j + jj < k:
                    ns[j + jj], cs[j + jj] = n, c
    g_s, p_s = 0.0, 0.0
    on_pim = 0
    for j in range(k):
        n = ns[j]
        c = cs[j] / max(n, 1) + j
        v, g, p = draft_pass(dg, dp, n, c, step)
        var[j], cs[j] = v, c
        g_s += g
        p_s += p
        on_pim += fc_on_pim[v]
    # the Controller's decision after each step (running product vs tau), on the PIM where the draft uses it
    if p_s > 0:
        p_s += lay[5] * k
    else:
        g_s += lay[5] * k
    counts[0] += on_pim
    counts[1] += k
    job, end = _issue(mach, lay, logs, kind, release, g_s, p_s)
    passes, rows = logs[PASSES], logs[5]  # taken once: each inlined log writer handed the logs copies all six
    for j in range(k):
        _row(passes, rows, PASSES, (float(job), float(T_DRAFT), float(var[j]), float(ns[j]), float(cs[j]), 0.0, 0.0))
    return end


@njit(_nrt=False, **INNER)
def _verify_costs(tab, counts, n, ctx, q):
    """``verify_pass`` on the verify tables, counted (verify passes, those with attention on PIM): (variant, q0,
    weight of q0 + 1, GPU s, PIM s). The callers book the pass themselves, so ``_issue`` is not inlined again."""
    v, q0, f, g, p = verify_pass(tab[2], tab[3], n, ctx, q, tab[8])
    counts[2] += tab[10][v]
    counts[3] += 1
    return v, q0, f, g, p


@njit(_nrt=False, **INNER)
def prefill(mach, lay, tab, logs, release, n):
    """The prompts of ``n`` admitted requests, through each model in turn (target, then the draft)."""
    if n == 0:
        return release
    t = release
    pg, pp, step = tab[6], tab[7], tab[8]
    for i in range(pg.shape[0]):
        g, p = at(pg[i], pp[i], n, 0.0, step)
        t = book(mach, lay, logs, PREFILL, t, g, p, T_PREFILL, i, n, 0.0, ZERO, 0.0)
    return t


# -- requests in slots --------------------------------------------------------------------------------
@njit(_nrt=False, **INNER)
def waiting(rq, slots, t):
    """Requests queued by ``t`` (arrived, open loop) and not yet in a slot."""
    arrival, open_loop = rq[2], rq[3]
    n = rq[1].size
    arrived = n if not open_loop else _bisect_right(arrival, arrival.size, t)
    return max(0, arrived - slots[6][0])


@njit(_nrt=False, **INNER)
def next_arrival(rq, slots):
    """When the next request not yet admitted arrives (NONE: none left). Open loop only."""
    nid = slots[6][0]
    if nid >= rq[1].size:
        return NONE
    return rq[2][nid]


@njit(**INNER)
def admit(rq, slots, free, t):
    """Slots in ``free`` take the requests queued by ``t``, in slot order; returns the slots that got one."""
    cur, pos, left, ctx, next_id = slots[0], slots[1], slots[2], slots[3], slots[6]
    prompt, out = rq[0], rq[1]
    take = waiting(rq, slots, t)
    admitted = np.zeros(free.size, np.bool_)
    for s in range(free.size):
        if take == 0:
            break
        if free[s]:
            i = next_id[0]
            next_id[0] += 1
            cur[s], pos[s], left[s], ctx[s] = i, 0, out[i], prompt[i]
            admitted[s] = True
            take -= 1
    return admitted


@njit(_nrt=False, **INNER)
def start_requests(mach, lay, tab, logs, times, slots, admitted, t, with_prefill):
    """The requests just admitted to ``admitted`` slots enter at ``t`` (prefilled when asked); returns when
    their micro-batch may go on."""
    cur, t_admit, t_first = slots[0], times[0], times[1]
    n = ZERO
    for s in range(admitted.size):
        if admitted[s]:
            t_admit[cur[s]] = t
            n += 1
    if n == 0:
        return t
    if with_prefill:
        t = prefill(mach, lay, tab, logs, t, n)
    for s in range(admitted.size):
        if admitted[s]:
            t_first[cur[s]] = t
    return t


@njit(**INNER)
def settle(logs, times, rq, slots, a, b, t, emitted, verified):
    """After slots a..b emitted ``emitted`` at ``t``: record finished requests; returns the slots free to take
    queued requests (finished ones and, open loop, idle ones). A leaf: its caller admits, so the admission and
    its prefill are compiled into the loop once, not again inside this function (a shorter cold compile)."""
    cur, left, open_loop = slots[0], slots[2], rq[3]
    t_done = times[2]
    finished = 0
    total = 0.0
    for s in range(a, b):
        total += emitted[s - a]
        if verified[s - a] and left[s] == 0:
            finished += 1
            t_done[cur[s]] = t
    _event(logs, t, total, finished)
    free = np.zeros(cur.size, np.bool_)
    if open_loop or finished:
        for s in range(a, b):
            free[s] = left[s] == 0 and (open_loop or verified[s - a])
    return free


# -- micro-batches on their own (AD, SD) ---------------------------------------------------------------
@njit(cache=True, _nrt=False)
def _push(ht, hi, size, t, i):
    """Binary heap of (time, group); a group has at most one entry, so (time, group) pairs are distinct."""
    k = size
    ht[k], hi[k] = t, i
    while k > 0:
        parent = (k - 1) // 2
        if (ht[parent], hi[parent]) <= (ht[k], hi[k]):
            break
        ht[parent], ht[k] = ht[k], ht[parent]
        hi[parent], hi[k] = hi[k], hi[parent]
        k = parent
    return size + 1


@njit(cache=True, _nrt=False)
def _pop(ht, hi, size):
    t, i = ht[0], hi[0]
    size -= 1
    ht[0], hi[0] = ht[size], hi[size]
    k = 0
    while True:
        small, left, right = k, 2 * k + 1, 2 * k + 2
        if left < size and (ht[left], hi[left]) < (ht[small], hi[small]):
            small = left
        if right < size and (ht[right], hi[right]) < (ht[small], hi[small]):
            small = right
        if small == k:
            break
        ht[small], ht[k] = ht[k], ht[small]
        hi[small], hi[k] = hi[k], hi[small]
        k = small
    return t, i, size


@njit(inline="always", **INNER)
def length_table(rq, slots):
    """The adaptive rule's draft lengths in force: under the lowered tau (``rq[11]``) while at most
    ``rq[12]`` requests of the replica are in flight, else under tau."""
    if rq[12] > 0:
        active = 0
        for s in range(slots[2].size):
            active += slots[2][s] > 0
        if active <= rq[12]:
            return rq[11]
    return rq[7]


@njit(inline="always", **INNER)
def fresh_lengths(rq, slots, a, b, d):
    """Draft length of slots a..b from where each request stands, at most d (0 for an idle slot)."""
    cur, pos, left = slots[0], slots[1], slots[2]
    out = np.zeros(b - a, np.int64)
    lengths, adaptive = length_table(rq, slots), rq[8]
    for s in range(a, b):
        if left[s] > 0:
            out[s - a] = min(lengths[cur[s], pos[s]], d) if adaptive else d
    return out


@njit(cache=True, nogil=True)
def micro_batch_loop(mode, d, with_prefill, stop, mach, lay, tab, logs, counts, times, rq, slots, starts, stops):
    """Every micro-batch on its own: a heap of (time, group) holds when each group's round starts (its
    passes are booked and end at a known time) or ends (its tokens are emitted and finished slots take
    queued requests, in the order rounds end). Open loop: a group with nothing in flight admits what has
    arrived, or waits for the next arrival. The run ends after the time of its ``stop``-th completion
    (``run_replica``)."""
    cur, pos, left, ctx = slots[0], slots[1], slots[2], slots[3]
    runs, open_loop = rq[4], rq[3]
    groups = starts.size
    n_slots = cur.size
    ht = np.zeros(groups)  # every group starts at 0, in group order: already a heap
    hi = np.arange(groups)
    ending = np.zeros(groups, np.bool_)  # the group's entry is the end of a round
    size = groups
    # a round's outcome per slot (SD): tokens emitted, positions advanced, verified
    emitted = np.zeros(n_slots, np.int64)
    adv = np.zeros(n_slots, np.int64)
    act = np.zeros(n_slots, np.bool_)
    # AD: until a request of the group finishes, the group decodes the same requests and each context
    # grows by one token a pass: n, context sum, passes to the first completion and so far carry over
    stretch = np.zeros(groups, np.bool_)
    st_n = np.zeros(groups, np.int64)
    st_sum = np.zeros(groups)
    st_first = np.zeros(groups, np.int64)
    st_k = np.zeros(groups, np.int64)
    nobody = np.zeros(0, np.bool_)
    done, t_stop = 0, np.inf  # completions so far; the time of the stop-th
    # every branch below ends in ``wake``, when the group is due again (NONE: never), so the inlined heap push,
    # pass booking and logging are each typed once (a cold compile about 2 s shorter than one call site each)
    while size:
        t, i, size = _pop(ht, hi, size)
        if t > t_stop:  # events are logged at the times popped, in order: every later one is later still
            break
        advance(mach, t)
        a, b = starts[i], stops[i]
        wake = NONE
        free = nobody  # the slots that take the requests queued by t (none: no call of any() at every event)
        if ending[i]:
            ending[i] = False
            if mode == AD:
                n = st_n[i]
                for s in range(a, b):
                    e = 1 if act[s] else 0
                    left[s] -= e
                    ctx[s] += e  # AD reads no stream: a slot's position stays
                st_k[i] += 1
                if st_k[i] < st_first[i] and (not open_loop or n == b - a or waiting(rq, slots, t) == 0):
                    _event(logs, t, float(n), 0)  # nobody finished, nobody admitted
                else:
                    stretch[i] = False
                    for s in range(a, b):
                        emitted[s] = act[s]
                    free = settle(logs, times, rq, slots, a, b, t, emitted[a:b], act[a:b])
            else:
                for s in range(a, b):
                    left[s] -= emitted[s]
                    ctx[s] += emitted[s]
                    pos[s] += adv[s] if act[s] else 0
                free = settle(logs, times, rq, slots, a, b, t, emitted[a:b], act[a:b])
            if free.size and done < stop:  # closed loop (``stop``): the slots free are those that finished
                done += free[a:b].sum()
                t_stop = t if done >= stop else t_stop
            wake = t
        else:
            busy = False
            for s in range(a, b):
                busy |= left[s] > 0
            if not stretch[i] and not busy:
                if open_loop and waiting(rq, slots, t):
                    free = np.zeros(n_slots, np.bool_)
                    for s in range(a, b):
                        free[s] = left[s] == 0
                elif open_loop:
                    wake = next_arrival(rq, slots)
                    if wake != NONE:
                        wake = max(wake, t)
            else:
                if mode == AD:
                    if not stretch[i]:
                        n, total, first = 0, 0.0, 1 << 62
                        for s in range(a, b):
                            act[s] = left[s] > 0
                            if act[s]:
                                n += 1
                                total += ctx[s]
                                first = min(first, left[s])
                        stretch[i], st_n[i], st_sum[i], st_first[i], st_k[i] = True, n, total, first, 0
                    n, k = st_n[i], st_k[i]
                    c = (st_sum[i] + k * n) / n
                    g, p = at(tab[4], tab[5], n, c, tab[8])
                    kind, table, v, q0, f, drafted = DECODE, T_DECODE, 0, 0, 0.0, 0
                else:
                    lengths = fresh_lengths(rq, slots, a, b, d)
                    t = draft_chain(mach, lay, tab, logs, counts, DRAFT, t, lengths, ctx[a:b])
                    n, drafted, total = ZERO, 0, 0.0
                    for s in range(a, b):
                        act[s] = left[s] > 0
                        if act[s]:
                            n += 1
                            total += ctx[s]
                        drafted += lengths[s - a]
                    c = total / n
                    v, q0, f, g, p = _verify_costs(tab, counts, n, c, (drafted + n) / n)
                    kind, table = VERIFY, T_VERIFY
                    for s in range(a, b):
                        if act[s]:
                            acc = min(runs[cur[s], pos[s]], lengths[s - a])
                            emitted[s], adv[s] = min(acc + 1, left[s]), acc + 1
                        else:
                            emitted[s], adv[s] = 0, 1
                wake = book(mach, lay, logs, kind, t, g, p, table, v, n, c, q0, f)
                _round(logs, wake, n, drafted)
                ending[i] = True
        if free.size and free.any() and waiting(rq, slots, t):
            wake = max(
                start_requests(mach, lay, tab, logs, times, slots, admit(rq, slots, free, t), t, with_prefill), t
            )
        if wake != NONE:
            size = _push(ht, hi, size, wake, i)


# -- the pools (SADDLE-p, SADDLE-s, SADDLE) -----------------------------------------------------------
@njit(cache=True, _nrt=False)
def _kth_largest(a, k, b):
    """The k-th largest value of ``a`` (1-based): Wirth's selection on a copy in ``b`` (as long as ``a`` or longer)."""
    n = a.size
    for i in range(n):
        b[i] = a[i]
    want = n - k
    lo, hi = 0, n - 1
    while lo < hi:
        x = b[want]
        i, j = lo, hi
        while i <= j:
            while b[i] < x:
                i += 1
            while x < b[j]:
                j -= 1
            if i <= j:
                b[i], b[j] = b[j], b[i]
                i += 1
                j -= 1
        if j < want:
            lo = i
        if want < i:
            hi = j
    return b[want]


@njit(cache=True, _nrt=False)
def _cut(score, k, hist, held, b):
    """(the k-th largest (1-based) of running products in [0, 1], how many values exceed it): a histogram of
    ``BINS`` equal bins (into ``hist``, ``BINS`` + 1 long) finds the bin that holds it (``int(x * BINS)`` orders
    like ``x``, and equal values share a bin, so every value of a higher bin exceeds it), Wirth's selection finds
    it among that bin's few values (copied into ``held``, then ``b``: each one longer than ``score``). Values
    outside [0, 1] (no confidence gives one) take Wirth's over all. On a SADDLE run's own cuts (about 590 scores,
    k about 384) 6x faster than Wirth's alone (docs/simulator.md)."""
    hist[:] = 0
    for x in score:
        if not (x >= 0.0 and x <= 1.0):
            v = _kth_largest(score, k, b)
            above = 0
            for y in score:
                above += y > v
            return v, above
        hist[int(x * BINS)] += 1
    above, bin_ = 0, BINS
    while above + hist[bin_] < k:
        above += hist[bin_]
        bin_ -= 1
    j = 0
    for x in score:  # branch-free: the count moves on past a value of the bin (one spare: the last one over)
        held[j] = x
        j += int(x * BINS) == bin_
    v = _kth_largest(held[:j], k - above, b)
    for x in held[:j]:
        above += x > v
    return v, above


@njit(cache=True, _nrt=False)
def pool_admit(want, rq, slots, capacity, queries, out, cut, hist, grid):
    """Draft tokens admitted per slot, into ``out``: the ``capacity - queries`` tokens with the highest running
    product of the draft's confidences over all slots, never more than ``want``. The product falls along a
    draft, so each request keeps a prefix; ties at the cut go to the earlier slot. Buffers: ``cut`` (3 rows,
    longer than the tokens wanted) and ``hist`` for the cut (``_cut``), ``grid`` (a row a slot, as long as the
    most tokens a slot may want) for the scores by slot."""
    room = max(capacity - queries, 0)
    total = 0
    for s in range(want.size):
        out[s] = want[s]
        total += want[s]
    if total <= room:
        return
    if total >= cut.shape[1]:
        raise RuntimeError("adsl.sim.loop: more tokens wanted than the pool's cut buffers hold")
    cur, pos = slots[0], slots[1]
    first, later = rq[9], rq[10]
    for s in range(want.size):  # an idle slot's row may lie past the last request: a prefetch reads nothing
        prefetch(first, cur[s], pos[s])  # pragma: no mutate
        prefetch(later, cur[s], pos[s] + 1)  # pragma: no mutate
    score = cut[0, :total]  # slot by slot, each request's tokens in draft order
    grid[:] = np.nan  # and by slot, a row each: NaN (no token) is neither above nor equal to any cut
    i = 0
    for s in range(want.size):
        w = want[s]
        out[s] = 0
        if w == 0:  # an idle slot wants 0 tokens and reads nothing (its cur may lie past the last request)
            continue
        if w > grid.shape[1]:
            raise RuntimeError("adsl.sim.loop: a slot wants more tokens than the pool's grid holds")
        r, p = cur[s], pos[s]
        h = np.float64(first[r, p])  # 1.0 * first, as the product starts
        score[i] = grid[s, 0] = h
        for j in range(1, w):
            h *= np.float64(later[r, p + j])
            score[i + j] = grid[s, j] = h
        i += w
    if room <= 0:
        return
    v, above = _cut(score, room, hist, cut[1], cut[2])
    ties = room - above  # values equal to the cut, taken by the earlier slots (in draft order within a slot)
    for s in range(want.size):  # a fixed count a slot: no branch on how many tokens each wants
        gt, eq = 0, 0
        for j in range(grid.shape[1]):
            x = grid[s, j]
            gt += x > v
            eq += x == v
        take = min(eq, ties)
        ties -= take
        out[s] = gt + take


@njit(inline="always", **INNER)
def admit_pool(want, rq, slots, capacity, sel, counts, lv, work):
    """Pool admission of the entries of slots ``sel`` into ``lv`` (``pool_admit``); counts the largest pool so far."""
    pool_admit(want, rq, slots, capacity, sel.sum(), lv, work[W_CUT], work[W_HIST], work[W_GRID])
    pooled = 0
    for s in range(sel.size):
        pooled += lv[s] + 1 if sel[s] else 0
    counts[8] = max(counts[8], pooled)


@njit(_nrt=False, **INNER)
def pooled_verify(mach, lay, tab, logs, counts, release, sel, ctx, lv):
    """One verification of the pool: slots ``sel`` with their admitted tokens; returns (end, requests)."""
    n, total, q = ZERO, 0.0, 0
    for s in range(sel.size):
        if sel[s]:
            n += 1
            total += ctx[s]
            q += lv[s] + 1
    ctx_mean = total / n
    v, q0, f, g, p = _verify_costs(tab, counts, n, ctx_mean, q / n)
    end = book(mach, lay, logs, VERIFY, release, g, p, T_VERIFY, v, n, ctx_mean, q0, f)
    return end, n


@njit(_nrt=False, **INNER)
def _chains(mach, lay, tab, logs, counts, kind, lengths, ctx, release, starts, stops, ends):
    """One draft chain per micro-batch over the slots with ``lengths`` > 0, released at ``release[g]``;
    each slot's chain end into ``ends`` (a micro-batch that drafts nothing: its release, ``draft_chain``)."""
    for i in range(starts.size):
        a, b = starts[i], stops[i]
        end = draft_chain(mach, lay, tab, logs, counts, kind, release[i], lengths[a:b], ctx[a:b])
        for s in range(a, b):
            ends[s] = end


# The pool's buffers, one set a replica (``pool_loop``): the helpers that fill them allocate nothing and are
# compiled without reference counting, where their arguments' counts and their arrays' allocations were a tenth of
# SADDLE's loop (docs/simulator.md). Per slot: tokens (eager ones, a fresh entry's), tokens of one part of a
# draft, a chain's end, a context, when each slot's eager chain ends, when it drafts next, whether it is free,
# whether it drafts late; per micro-batch: a chain's release; the cut's buffers and the scores by slot (``pool_admit``).
W_TOKENS, W_PART, W_ENDS, W_CTX, W_EAGER_END, W_RELEASES, W_FREE, W_LATE, W_MB, W_CUT, W_HIST, W_GRID = range(12)


def pool_state(n_slots, n_groups, d):
    """What the pool loop keeps from one call to the next (``pool_loop``): each slot's entry (ready, offered,
    full), its buffers (``W_*``) for ``n_slots`` slots in ``n_groups`` micro-batches and entries of up to ``d``
    tokens, the slots of a pass, their wanted and admitted tokens, and where the loop stopped (``P_FIELDS``). Plain
    Python, called once a replica."""
    i, f, b = np.zeros(n_slots, np.int64), np.zeros(n_slots), np.zeros(n_slots, np.bool_)
    cut, hist, grid = np.zeros((3, n_slots * d + 2)), np.zeros(BINS + 1, np.int64), np.zeros((n_slots, max(d, 1)))
    work = (i, i.copy(), f, f.copy(), f.copy(), f.copy(), b, b.copy(), np.zeros(n_groups), cut, hist, grid)
    pool = (f.copy(), i.copy(), i.copy())
    return pool, work, b.copy(), i.copy(), i.copy(), np.zeros(len(P_FIELDS))


# where the pool loop stopped for a verification row it was not given: whether it did, the verifier's next free
# time, completions so far, the latest event, the time of the stop-th completion, the pass's start
P_FIELDS = ("paused", "verifier_free", "done", "last", "t_stop", "start")


@njit(_nrt=False, **INNER)
def draft_fresh(rule, mach, lay, tab, logs, counts, rq, slots, pool, starts, stops, sel, work):
    """Slots ``sel`` without a kept eager entry draft a fresh one (released per slot at ``work[W_RELEASES]``; a
    micro-batch's chain starts when its last drafting slot is released). Slots ``work[W_LATE]`` (requests
    admitted with a prefill) draft in a chain of their own after the rest of their micro-batch's, so a prefill
    does not hold back the drafting of requests already running. Without the Eager Pool a request drafts only
    what fits: the pool's room beside the other requests' entries and every request's query token, highest
    running product first (``pool_admit``). ``rule``: (d, pool capacity, eager, prefill)."""
    d, capacity, eager = rule[0], rule[1], rule[2]
    cur, pos, left, ctx, held = slots[0], slots[1], slots[2], slots[3], slots[4]
    ready, offered, full = pool[0], pool[1], pool[2]
    fresh, part_lengths, ends, start = work[W_TOKENS], work[W_PART], work[W_ENDS], work[W_MB]
    releases, late = work[W_RELEASES], work[W_LATE]
    lengths, adaptive = length_table(rq, slots), rq[8]
    n_slots = cur.size
    for s in range(n_slots):
        prefetch(lengths, cur[s], pos[s])  # pragma: no mutate
    for s in range(n_slots):  # an idle slot's full is never read: _finish reads verified slots, which are busy
        fresh[s] = 0
        if sel[s] and left[s] > 0:
            full[s] = min(lengths[cur[s], pos[s]], 2 * d + 1) if adaptive else d
            fresh[s] = min(full[s], d) if held[s] == 0 else 0
    if not eager:
        queries, others = ZERO, ZERO
        for s in range(n_slots):
            queries += left[s] > 0
            others += offered[s] if left[s] > 0 and not sel[s] else 0
        for s in range(n_slots):
            part_lengths[s] = fresh[s]
        pool_admit(part_lengths, rq, slots, capacity - others, queries, fresh, work[W_CUT], work[W_HIST], work[W_GRID])
    any_draft = False
    for s in range(n_slots):
        if sel[s]:
            offered[s] = held[s] if held[s] > 0 else fresh[s]
            ready[s] = releases[s]
            any_draft |= fresh[s] > 0
    if not any_draft:
        return
    first, tokens = np.inf, 0
    for part in range(2 if late.any() else 1):  # the slots released together, then those admitted with a prefill
        some = False
        for i in range(starts.size):
            start[i] = -np.inf
            for s in range(starts[i], stops[i]):
                part_lengths[s] = 0
                if fresh[s] > 0 and late[s] == (part == 1):
                    part_lengths[s] = fresh[s]
                    start[i] = max(start[i], releases[s])
                    first = min(first, releases[s])
                    tokens += fresh[s]
                    some = True
        if not some:
            continue
        _chains(mach, lay, tab, logs, counts, DRAFT, part_lengths, ctx, start, starts, stops, ends)
        for s in range(n_slots):
            if part_lengths[s] > 0:
                ready[s] = ends[s]
    _round(logs, first, 0, tokens)


@njit(inline="always", **INNER)
def draft_together(rule, mach, lay, tab, logs, counts, rq, slots, pool, starts, stops, sel, t, work):
    """Slots ``sel`` draft fresh entries, all released at ``t``."""
    work[W_RELEASES][:] = t
    work[W_LATE][:] = False
    draft_fresh(rule, mach, lay, tab, logs, counts, rq, slots, pool, starts, stops, sel, work)


@njit(inline="always", **INNER)
def _refill(rule, mach, lay, tab, logs, counts, times, rq, slots, pool, starts, stops, now, work):
    """Open loop, before a pooled pass at ``now``: idle slots take the requests that have arrived, are
    prefilled and draft their first entries; with nothing in flight, wait for the next arrival. Returns
    when the verifier may start (NONE: no request left)."""
    left, with_prefill = slots[2], rule[3]
    while True:
        idle = left == 0
        if idle.any() and waiting(rq, slots, now):
            admitted = admit(rq, slots, idle, now)
            t = start_requests(mach, lay, tab, logs, times, slots, admitted, now, with_prefill)
            draft_together(rule, mach, lay, tab, logs, counts, rq, slots, pool, starts, stops, admitted, t, work)
        if (left > 0).any():
            return now
        nxt = next_arrival(rq, slots)
        if nxt == NONE:
            return NONE
        now = max(now, nxt)


@njit(_nrt=False, **INNER)
def _drafter_idle(mach, lay, tab, n, ctx, t):
    """Whether the machine a draft pass of ``n`` requests at context ``ctx`` starts on (the first stage's GPU,
    or its PIM where the pass has no GPU part) is idle at ``t``. With shared stacks (``exclusive``) the PIM
    books into its GPU's row, which a prefill keeps busy."""
    st, en, cnt, rows = mach[0], mach[1], mach[2], mach[8]
    _, g, _ = draft_pass(tab[0], tab[1], n, ctx, tab[8])
    r = rows[0 if g > 0 or not lay[1] else 1]
    k = _bisect_right(en[r], cnt[r], t)
    return k >= cnt[r] or st[r, k] > t


@njit(_nrt=False, **INNER)
def _finish(rule, mach, lay, tab, logs, counts, times, rq, slots, pool, starts, stops, sel, start, end, lv, work):
    """Eager drafting of the verified requests during the pass (``rule``'s eager), then acceptance and the tokens
    emitted at ``end``; the slots left free into ``work[W_FREE]``, when each slot's eager chain ends into
    ``work[W_EAGER_END]``."""
    d, eager = rule[0], rule[2]
    cur, pos, left, ctx, held, cont = slots[0], slots[1], slots[2], slots[3], slots[4], slots[5]
    offered, full = pool[1], pool[2]
    runs, flagged, cont_runs, t_done = rq[4], rq[5], rq[6], times[2]
    extra, ends, after, release = work[W_TOKENS], work[W_ENDS], work[W_CTX], work[W_MB]
    eager_end, free = work[W_EAGER_END], work[W_FREE]
    n_slots = cur.size
    for s in range(n_slots):
        prefetch(cont_runs if flagged and cont[s] else runs, cur[s], pos[s])  # pragma: no mutate
    some = False
    for s in range(n_slots):
        extra[s] = min(max(full[s] - offered[s], 0), d + 1) if sel[s] and eager else 0  # the rest of its draft
        some |= extra[s] > 0
        eager_end[s] = start
    if some:
        for s in range(n_slots):
            after[s] = ctx[s] + offered[s]
        release[:] = start
        _chains(mach, lay, tab, logs, counts, EAGER, extra, after, release, starts, stops, ends)
        for s in range(n_slots):
            if extra[s] > 0:
                eager_end[s] = ends[s]
        _round(logs, start, 0, extra.sum())
    # acceptance, then the verified slots' tokens emitted (only verified slots accept, keep or lose tokens)
    completed, tokens = 0, 0
    for s in range(n_slots):
        free[s] = False
        if not sel[s]:
            continue
        r = cur[s]
        run = cont_runs[r, pos[s]] if flagged and cont[s] else runs[r, pos[s]]
        acc = min(run, lv[s])
        rest = offered[s] + extra[s] - lv[s]
        bonus = acc == lv[s] and run > lv[s] and rest > 0
        keep = bonus and rest > 1
        if eager:  # the Eager Pool's statistics (without it a closed loop verifies every drafted token)
            counts[4] += extra[s]
            counts[5] += rest - 1 if keep else 0
            counts[6] += 0 if keep else extra[s]
            counts[7] += 0 if keep else offered[s] + extra[s] - acc - bonus
        held[s] = rest - 1 if keep else 0
        cont[s] = keep
        emitted = min(acc + 1, left[s])
        left[s] -= emitted
        ctx[s] += emitted
        pos[s] += acc + 1
        tokens += emitted
        if left[s] == 0:
            cont[s] = False
            held[s] = 0
            completed += 1
            t_done[cur[s]] = end
            free[s] = True
    _event(logs, end, float(tokens), completed)


@njit(_nrt=False, **INNER)
def _releases(mach, lay, tab, slots, sel, admitted, end, t, work):
    """When each verified slot drafts its next entry (into ``work[W_RELEASES]``), and the slots that draft in a
    chain of their own (``work[W_LATE]``): after its eager chain, and after the prefill of the requests admitted
    at the pass's ``end`` (it ends at ``t``) unless the drafter is idle during that prefill: the others then
    draft from ``end``."""
    left, ctx = slots[2], slots[3]
    eager_end, releases, late = work[W_EAGER_END], work[W_RELEASES], work[W_LATE]
    n_slots = sel.size
    apart = False
    if t > end:  # prefilled: the others draft during it where their drafter is idle
        n, total = ZERO, 0.0
        for s in range(n_slots):
            if sel[s] and not admitted[s] and left[s] > 0:
                n += 1
                total += ctx[s]
        if n and _drafter_idle(mach, lay, tab, n, total / n, end):
            apart = admitted.any()
    for s in range(n_slots):
        late[s] = apart and admitted[s]
        # the late slots after the prefill, the others from the verification's end
        releases[s] = max(t, eager_end[s]) if late[s] or not apart else max(end, eager_end[s])


@njit(cache=True, nogil=True)
def pool_loop(rule, complete, stop, mach, lay, tab, logs, counts, times, rq, slots, starts, stops, state, known):
    """The Shared Pool: each request's next pool entry is ready when its drafting ends (at once for one that
    keeps its eager tokens); the verifier takes every ready entry as soon as it is idle (``complete`` False:
    the paper's rule) or once every request's entry is ready. The next pass may enter once this one has
    cleared the first pipeline stage. ``rule``: (d, pool capacity, eager, prefill); eager: the Eager Pool
    (SADDLE-s, SADDLE), without which (SADDLE-p) a request drafts only what fits, nothing is drafted during
    a pass and the verifier waits for every entry whatever ``complete`` says. The run ends before the first
    pass that starts after its ``stop``-th completion (``run_replica``).

    ``known``: the request counts whose rows of the verification tables the caller has given. A verification
    of any other count stops the loop before it changes anything: it returns that count, the caller costs
    the row and calls again with the same ``state`` (``pool_state``), and the run goes on from that
    verification as if the row had been there all along. Returns -1 once the run has ended."""
    d, capacity = rule[0], rule[1]
    complete = complete or not rule[2]
    left, ctx = slots[2], slots[3]
    n_slots = left.size
    pool, work, sel, want, lv, at_stop = state
    ready, offered = pool[0], pool[1]
    free = work[W_FREE]
    nobody = np.zeros(n_slots, np.bool_)
    resume = at_stop[0] > 0
    if resume:
        verifier_free, done, last, t_stop, start = at_stop[1], int(at_stop[2]), at_stop[3], at_stop[4], at_stop[5]
    else:
        every = np.ones(n_slots, np.bool_)
        draft_together(rule, mach, lay, tab, logs, counts, rq, slots, pool, starts, stops, every, 0.0, work)
        # completions so far, the latest event, the latest at the stop-th
        verifier_free, done, last, t_stop, start = 0.0, 0, -np.inf, np.inf, 0.0
    while True:
        if not resume:
            if rq[3]:  # idle slots take what has arrived before the next pass
                now = _refill(
                    rule, mach, lay, tab, logs, counts, times, rq, slots, pool, starts, stops, verifier_free, work
                )
                if now == NONE:
                    break
                verifier_free = now
            pending = -np.inf if complete else np.inf
            busy = False
            for s in range(n_slots):
                if left[s] > 0:
                    busy = True
                    pending = max(pending, ready[s]) if complete else min(pending, ready[s])
            if not busy:
                break
            start = max(verifier_free, pending)
            if start > t_stop:  # passes start in order and log at or after their start: nothing later is earlier
                break
            for s in range(n_slots):
                sel[s] = left[s] > 0 and ready[s] <= start
                want[s] = min(offered[s], d) if sel[s] else 0
        resume = False
        n = sel.sum()
        if not known[n]:  # nothing of this pass is done yet: the caller costs the row, and the pass starts again
            at_stop[0], at_stop[1], at_stop[2] = 1.0, verifier_free, done
            at_stop[3], at_stop[4], at_stop[5] = last, t_stop, start
            return n
        admit_pool(want, rq, slots, capacity, sel, counts, lv, work)
        advance(mach, min(start, verifier_free))
        end, n = pooled_verify(mach, lay, tab, logs, counts, start, sel, ctx, lv)
        verifier_free = mach[5][0]
        _round(logs, end, n, 0)
        _finish(rule, mach, lay, tab, logs, counts, times, rq, slots, pool, starts, stops, sel, start, end, lv, work)
        last = max(last, end)
        if done < stop:
            done += free.sum()
            t_stop = last if done >= stop else t_stop
        # finished slots take queued requests here, not inside _finish: numba compiles each function together with
        # every function it calls, so a shallower tree of calls compiles faster
        admitted, t = nobody, end
        if free.any() and waiting(rq, slots, end):
            admitted = admit(rq, slots, free, end)
            t = start_requests(mach, lay, tab, logs, times, slots, admitted, end, rule[3])
        _releases(mach, lay, tab, slots, sel, admitted, end, t, work)
        draft_fresh(rule, mach, lay, tab, logs, counts, rq, slots, pool, starts, stops, sel, work)
    at_stop[0] = 0.0
    return -1


# -- one replica --------------------------------------------------------------------------------------
def machines(n_machines, stages, shared, steps):
    """Empty machines: busy intervals (starts, ends, counts), busy seconds, events seen, the last pass's
    first-stage end, the segment buffers of one pass, the row of busy intervals each machine books
    into (its own, or with ``shared`` stacks, a stage's GPU and PIM machines, ``SystemSpec.shared_stacks``,
    its stage's GPU row, so the two take turns while each keeps its own busy seconds and timeline), and the
    step buffers of a draft chain of up to ``steps`` steps. Plain Python, called once a replica: compiled, it
    took about 0.9 s of a cold compile."""
    rows = np.arange(n_machines)
    if shared and n_machines == 2 * stages:
        for s in range(stages):
            rows[2 * s + 1] = 2 * s
    return (
        np.zeros((n_machines, CAPACITY)),
        np.zeros((n_machines, CAPACITY)),
        np.zeros(n_machines, np.int64),
        np.zeros(n_machines),
        np.zeros(1, np.int64),
        np.zeros(1),
        np.empty(4 * CHUNKS * stages, np.int64),
        np.empty(4 * CHUNKS * stages),
        rows,
        np.empty((2, steps), np.int64),
        np.empty(steps),
    )


def run_replica(
    mode, d, capacity, complete, eager, with_prefill, stop, logs, tab, lay, n_machines, rq, n_slots, starts, stops, rows
):
    """One replica's run into ``logs`` (``new_logs``). ``tab``: cost tables (draft, verify, decode, prefill as
    flat arrays; context step; draft variants with FC on PIM; verify variants with attention on PIM);
    ``lay``: (stages, PIM machines, machines per stage, replicated draft, shared stacks, the Controller's
    seconds per draft step); ``rq``: the requests (prompt,
    output, arrival, open loop, runs, flagged streams, continuing runs, draft lengths, adaptive,
    confidences, later confidences, draft lengths under a lowered tau, the in-flight requests at
    most at which those are in force); micro-batches are slots ``starts[i]..stops[i]``; ``mode``: AD, SD or
    POOL (``capacity``, ``complete`` and ``eager``: the pool's, ``pool_loop``). ``stop``: closed loop, the
    completions after which the run may end (``NEVER``: it runs until every request has finished): it ends once
    every event up to the time of that completion, and every pass that starts by then, is in ``logs``, which
    hold then exactly what the whole run's hold up to that time. ``rows``: (known, fill): the request counts
    whose rows of the verification tables are costed, and a function that costs the row of a count and returns
    the counts costed by then; the pool loop asks for the rows it reads as it goes (the micro-batch loop reads
    rows it is given). Returns the counters and the per-request times (admitted, first token, done).

    Plain Python: it sets the state up and calls the mode's compiled loop (each releases the GIL). Compiled, it
    linked every mode's loop into one more module that LLVM optimised and turned into machine code again: about
    4 s of a cold compile (seventeenth session)."""
    n_req = rq[1].size
    mach = machines(n_machines, lay[0], lay[4], d + 1)  # a draft takes d tokens, an eager one d + 1
    counts = np.zeros(9, np.int64)  # draft FC on PIM, draft passes, attention on PIM, verify passes, pool stats
    times = (np.full(n_req, np.nan), np.full(n_req, np.nan), np.full(n_req, np.nan))
    if rq[3]:  # open loop: slots start empty; requests enter as they arrive
        slots = (
            np.full(n_slots, n_req, np.int64),
            np.zeros(n_slots, np.int64),
            np.zeros(n_slots, np.int64),
            np.zeros(n_slots),
            np.zeros(n_slots, np.int64),
            np.zeros(n_slots, np.bool_),
            np.zeros(1, np.int64),
        )
    else:
        slots = (
            np.arange(n_slots).astype(np.int64),
            np.zeros(n_slots, np.int64),
            rq[1][:n_slots].copy(),
            rq[0][:n_slots].copy(),
            np.zeros(n_slots, np.int64),
            np.zeros(n_slots, np.bool_),
            np.full(1, n_slots, np.int64),
        )
    if mode == AD or mode == SD:
        micro_batch_loop(mode, d, with_prefill, stop, mach, lay, tab, logs, counts, times, rq, slots, starts, stops)
    else:
        rule = (np.int64(d), np.int64(capacity), bool(eager), bool(with_prefill))
        known, fill = rows
        state = pool_state(n_slots, starts.size, d)
        while (
            n := pool_loop(
                rule, complete, stop, mach, lay, tab, logs, counts, times, rq, slots, starts, stops, state, known
            )
        ) >= 0:
            known[:] = fill(n)
    return counts, times
