"""Mechanism tests of the Shared and Eager Pools on the one core (``adsl.sim.loop``), not paper numbers:
admission to the pool, its capacity, what the Eager Pool keeps and loses, the cases where a pool reduces
to fixed-length SD, the triggers, overlap, settings, and the counts and draft steps of every round
against a slot-by-slot reference of the rules."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import adsl.sim.core as core
from adsl.fitting.generator import CONTINUED, FIRST, match_runs, running_product_lengths
from adsl.settings import Continuous
from adsl.sim import loop
from adsl.sim.core import simulate_core
from adsl.sim.setup import SimError
from adsl.sim.tables import PassTables
from adsl.sim.workload import Workload
from tests.sim.builders import flat_costs, logged, pooled, streams, uncompiled, use_loop

PAIR = "OPT-66B"
NO_ROWS = np.zeros((1, 1), np.int64)
NO_RUNS = np.zeros((1, 1), np.int32)


# -- pool admission ----------------------------------------------------------------------------------------
def _admit(want, conf, later, pos, capacity, queries, cut_len=None, grid_len=None):
    """``loop.pool_admit`` over one slot per request: request s in slot s at position ``pos[s]`` of its
    streams, its draft's first token at ``conf``, later ones at ``later`` (the tuples of
    ``loop.run_replica``); its cut buffers ``cut_len`` long and its grid's rows ``grid_len`` (default: room to
    spare)."""
    n = len(want)
    rq = (
        np.full(n, 64.0),  # prompt
        np.full(n, 10, np.int64),  # output
        np.zeros(1),  # arrivals
        False,  # open loop
        NO_RUNS,  # runs
        False,  # flagged streams
        NO_RUNS,  # continuing runs
        NO_ROWS,  # draft lengths
        False,  # adaptive
        np.ascontiguousarray(conf, np.float64),
        np.ascontiguousarray(later, np.float64),
    )
    slots = (
        np.arange(n, dtype=np.int64),  # request per slot
        np.asarray(pos, np.int64),  # position
        np.full(n, 10, np.int64),  # tokens left
        np.full(n, 64.0),  # context
        np.zeros(n, np.int64),  # held eager tokens
        np.zeros(n, np.bool_),  # continuing
        np.full(1, n, np.int64),  # next request
    )
    want = np.asarray(want, np.int64)
    out, hist = np.full(n, -7, np.int64), np.full(loop.BINS + 1, 7, np.int64)  # buffers as an earlier pass left them
    cut = np.full((3, cut_len or want.sum() + 2), np.nan)
    grid = np.full((n, grid_len or max(want.max(), 1) + 1), 2.0)  # above any cut
    loop.pool_admit(want, rq, slots, capacity, queries, out, cut, hist, grid)
    return out


def test_pool_admission_refuses_buffers_too_small_for_the_tokens_wanted():
    """``pool_admit`` reads its buffers unchecked past its checks: the cut's hold one more value than the
    tokens wanted (its spare), a grid row as many as a slot wants. Exactly long enough ones admit (two
    slots at 0.5 a token, room for 4 of 5 tokens: the ties at 0.25 go one to each); shorter ones raise."""
    conf = np.full((2, 8), 0.5)
    args = ([3, 2], conf, conf, [0, 0], 6, 2)
    assert list(_admit(*args, cut_len=6, grid_len=3)) == [2, 2]
    with pytest.raises(RuntimeError, match=r"^adsl\.sim\.loop: more tokens wanted than the pool's cut buffers hold$"):
        _admit(*args, cut_len=5)
    with pytest.raises(RuntimeError, match=r"^adsl\.sim\.loop: a slot wants more tokens than the pool's grid holds$"):
        _admit(*args, grid_len=2)


def test_pool_admits_highest_running_products_first():
    conf = np.array([[0.9, 0.9, 0.9], [0.5, 0.5, 0.5], [0.99, 0.2, 0.95]])
    want = [3, 3, 3]
    # 3 query tokens + 4 draft tokens: H = .9 .81 .729 | .5 .25 .125 | .99 .198 .188 (ranking the raw
    # confidences instead would admit .99 and .95 of the last request: [2, 0, 2])
    assert _admit(want, conf, conf, [0, 0, 0], 7, 3).tolist() == [3, 0, 1]
    assert _admit(want, conf, conf, [0, 0, 0], 3, 3).tolist() == [0, 0, 0]
    assert _admit(want, conf, conf, [0, 0, 0], 100, 3).tolist() == [3, 3, 3]
    # the same drafts further along the streams: a draft's first token at its own confidence, the later
    # ones at the later-token calibration (here the second request's first token alone moves to .95:
    # H .95 .475 .2375, its first token now ranks ahead of the first request's third, .729)
    shifted = np.concatenate([np.full((3, 2), 0.1), conf], axis=1)
    first = shifted.copy()
    first[1, 2] = 0.95
    assert _admit(want, first, shifted, [2, 2, 2], 7, 3).tolist() == [2, 1, 1]


def _admit_by_sorting(want, window, queries, capacity):
    """The reference: every candidate token's running product, ranked by a stable sort (ties: earlier
    request, then earlier token)."""
    r, w = window.shape
    h = np.cumprod(window.astype(np.float64), axis=1)
    cand = np.arange(w)[None, :] < np.asarray(want)[:, None]
    score = np.where(cand, h, -1.0).reshape(r * w)
    order = np.argsort(-score, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(r * w)
    keep = (rank < max(capacity - queries, 0)) & cand.reshape(r * w)
    return keep.reshape(r, w).sum(axis=1)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9), st.integers(1, 6), st.integers(0, 40), st.integers(0, 2**31 - 1))
def test_pool_admission_equals_a_stable_ranking(r, w, capacity, seed):
    rng = np.random.default_rng(seed)
    t = w + 6
    conf = rng.choice([0.5, 0.9, 1.0], size=(r, t))  # coarse values: many ties
    later = rng.choice([0.5, 0.9, 1.0], size=(r, t))
    pos = rng.integers(0, t - w + 1, r)
    want = rng.integers(0, w + 1, r)
    queries = int(rng.integers(0, r + 1))
    window = np.stack([later[s, pos[s] : pos[s] + w] for s in range(r)])
    window[:, 0] = conf[np.arange(r), pos]
    got = _admit(want, conf, later, pos, capacity, queries)
    np.testing.assert_array_equal(got, _admit_by_sorting(want, window, queries, capacity))


# -- runs of one replica ---------------------------------------------------------------------------------
def _run(models, setup_, out, conf, acc, tau, **kw):
    """One replica of ``len(out)`` requests, prompts of 64 tokens, running-product lengths at ``tau``
    (capped at 2 d + 1)."""
    out = np.asarray(out)[None, :]
    lengths = running_product_lengths(conf[0], tau, 2 * setup_.draft_length + 1)[None]
    return simulate_core(setup_, models.pair(PAIR), Workload(np.full(out.shape, 64.0), out, acc, lengths, conf), **kw)


def _flagged(acc, seed):
    """FIRST outcomes ``acc`` with CONTINUED outcomes that pass more often (a within-draft term)."""
    cont = np.random.default_rng(seed).random(acc.shape) < 0.9
    return acc.astype(np.uint8) * FIRST | cont.astype(np.uint8) * CONTINUED


@settings(max_examples=20, deadline=None)
@given(
    st.integers(1, 12),
    st.integers(1, 6),
    st.integers(0, 60),
    st.booleans(),
    st.sampled_from(["complete", "idle"]),
    st.floats(0.0, 0.9),
    st.integers(0, 2**31 - 1),
)
def test_pool_capacity_and_token_conservation(models, hw, batch, d, extra_room, eager, trigger, tau, seed):
    pool = batch + 1 + extra_room
    out = np.random.default_rng(seed).integers(1, 40, batch)
    conf, acc = streams(seed, 1, batch, out.max() + d + 1, 0.7)  # the shortest streams a run takes
    res = _run(models, pooled(hw, eager, trigger, mb=1, d=d, pool=pool, system="saddle"), out, conf, acc, tau)
    assert res.pool["pool_max"][0] <= pool
    assert res.tokens[0] == out.sum()
    assert res.time_s[0] > 0 and np.isfinite(res.energy_j[0])


def test_eager_tokens_discarded_on_rejection_and_kept_on_full_acceptance(models, hw):
    d = 3
    st_ = pooled(hw, True, mb=1, d=d, pool=1 + d)  # one request, the pool holds exactly its d tokens
    conf = np.ones((1, 1, 80), dtype=np.float32)  # tau never stops a draft: always 2 d + 1 available
    all_acc = np.ones((1, 1, 80), dtype=bool)
    res = _run(models, st_, [40], conf, all_acc, 0.5)
    # every pass accepts its d tokens and the bonus, which the first eager token matches: the d eager
    # tokens after it are the next pass's entry; nothing is wasted or discarded
    assert res.iterations[0] == 40 // (d + 1)
    assert res.pool["wasted"][0] == 0 and res.pool["discarded"][0] == 0
    assert res.pool["eager"][0] == 10 * (d + 1) and res.pool["migrated"][0] == 10 * d
    assert res.drafted[0] == d + 10 * (d + 1)  # one fresh draft, then eager drafting only
    none_acc = np.zeros((1, 1, 80), dtype=bool)
    res = _run(models, st_, [10], conf, none_acc, 0.5)
    # every pass rejects the first token: the d verified and d + 1 eager tokens of each pass are lost
    assert res.iterations[0] == 10
    assert res.drafted[0] == 10 * (2 * d + 1)
    assert res.pool["wasted"][0] == res.drafted[0]
    assert res.pool["discarded"][0] == res.pool["eager"][0] == 10 * (d + 1) and res.pool["migrated"][0] == 0


def test_kept_eager_tokens_continue_their_draft(models, pair, hw):
    """With a within-draft term, tokens kept from the Eager Pool continue an accepted draft (CONTINUED
    outcomes), while fixed-length SD starts every draft afresh (FIRST outcomes)."""
    d, out = 3, 40
    st_ = pooled(hw, True, mb=1, d=d, pool=1 + d)
    conf = np.ones((1, 1, 80), dtype=np.float32)
    flags = np.full((1, 1, 80), CONTINUED, dtype=np.uint8)
    flags[0, 0, 0] |= FIRST  # only the very first draft's first token passes as a first token
    saddle = _run(models, st_, [out], conf, flags, 0.0)
    assert saddle.iterations[0] == -(-out // (d + 1)) and saddle.pool["wasted"][0] == 0
    fixed = dataclasses.replace(st_, policy="fixed", pool_tokens=0, eager=False)
    ref = simulate_core(fixed, pair, Workload(np.full((1, 1), 64.0), np.array([[out]]), flags))
    assert ref.iterations[0] == 1 + (out - (d + 1))  # one full draft, then one token per pass


@pytest.mark.parametrize("system", ["saddle", "saddle-tp"])
@pytest.mark.parametrize("flagged", [False, True])
def test_tau_zero_and_ample_pool_is_fixed_length_sd(models, pair, hw, flagged, system):
    """SADDLE-p with tau = 0 (never stop early) and a pool that never binds = fixed-d SD with one pooled
    verification pass per iteration (also with a within-draft term: both start every draft afresh)."""
    d, batch = 4, 6
    conf, acc = streams(3, 1, batch, 60 + d + 1, 0.7)
    if flagged:
        acc = _flagged(acc, 3)
    out = np.full(batch, 60)
    st_ = pooled(hw, False, mb=1, d=d, pool=batch * (d + 1), system=system)
    pool = _run(models, st_, out, conf, acc, 0.0)
    fixed = dataclasses.replace(st_, policy="fixed", pool_tokens=0)
    ref = simulate_core(fixed, pair, Workload(np.full((1, batch), 64.0), out[None], acc))
    for field in ("tokens", "iterations", "request_rounds", "drafted"):
        assert getattr(pool, field)[0] == getattr(ref, field)[0], field
    assert pool.time_s[0] == pytest.approx(ref.time_s[0], rel=1e-9)
    assert pool.energy_j[0] == pytest.approx(ref.energy_j[0], rel=1e-9)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 6), st.floats(0.0, 1.0), st.integers(0, 2**31 - 1), st.sampled_from(["complete", "idle"]))
def test_saddle_with_tau_zero_and_a_one_request_pool_is_fixed_length_sd(models, pair, hw, d, p, seed, trigger):
    """One request, tau = 0 (never stop early), a pool of d + 1 tokens: the Eager Pool keeps exactly
    the next d-token draft when the bonus matches, so verification windows and emitted tokens are
    those of fixed-length SD; only the time differs (drafting overlaps verification). Streams long
    enough that every draft may reach 2 d + 1 tokens."""
    conf, acc = streams(seed, 1, 1, 50 + 4 * d + 4, p)
    st_ = pooled(hw, True, trigger, mb=1, d=d, pool=d + 1, system="saddle")
    saddle = _run(models, st_, [50], conf, acc, 0.0)
    fixed = dataclasses.replace(st_, policy="fixed", pool_tokens=0, eager=False)
    ref = simulate_core(fixed, pair, Workload(np.full((1, 1), 64.0), np.array([[50]]), acc))
    assert saddle.tokens[0] == ref.tokens[0] == 50
    # one request: the verifier has nobody else's tokens to start on, so both triggers wait for the
    # same complete draft and verify the same windows as fixed-length SD
    assert saddle.iterations[0] == ref.iterations[0]
    flipped = dataclasses.replace(st_, pool_trigger="idle" if trigger == "complete" else "complete")
    other = _run(models, flipped, [50], conf, acc, 0.0)
    assert other.time_s[0] == pytest.approx(saddle.time_s[0], rel=1e-12)


def test_idle_trigger_verifies_partial_drafts_of_several_requests(models, hw):
    """Several requests, d = 2: the idle trigger starts a pass on whatever the pool holds instead of
    waiting for every draft, so it verifies more often than the complete trigger, with the same tokens."""
    conf, acc = streams(1, 1, 8, 60 + 12, 0.7)
    res = {}
    for trigger in ("complete", "idle"):
        st_ = pooled(hw, True, trigger, mb=1, d=2, pool=8 * 3, system="saddle")
        res[trigger] = _run(models, st_, np.full(8, 60), conf, acc, 0.3)
    assert res["idle"].tokens[0] == res["complete"].tokens[0] == 8 * 60
    assert res["idle"].iterations[0] > 1.2 * res["complete"].iterations[0]


def test_async_overlap_never_slower_than_its_parts(models, hw):
    """SADDLE on a pipeline: the run takes its drafting and verification less what of them overlaps (no
    idle gap), a real share of the drafting is hidden, and with acceptance that follows the confidences
    (the running products predict it, so eager tokens are often kept) it beats the sequential pool."""
    conf, acc = streams(5, 1, 16, 200 + 36)
    st_ = dataclasses.replace(pooled(hw, True, mb=1, d=8, pool=512, system="saddle"), dynamic=True)
    res = _run(models, st_, np.full(16, 200), conf, acc, 0.3)
    stage = {k: v[0] for k, v in res.stage_s.items()}
    assert res.time_s[0] == pytest.approx(stage["draft"] + stage["verify"] - stage["overlap"], rel=1e-9)
    # the Eager Pool drafts during verification: a real share of the drafting is hidden
    assert stage["overlap"] > 0.05 * stage["draft"]
    lazy = _run(models, dataclasses.replace(st_, eager=False), np.full(16, 200), conf, acc, 0.3)
    assert lazy.stage_s["overlap"][0] == 0.0
    assert lazy.time_s[0] == pytest.approx(lazy.stage_s["draft"][0] + lazy.stage_s["verify"][0], rel=1e-9)
    assert res.time_s[0] < lazy.time_s[0]


def test_eager_rounds_take_no_longer_than_their_drafting_and_pass_in_sequence(pair, hw):
    """A round of the Eager Pool overlaps the pass with drafting: it lasts at least its longer part and
    at most the two one after the other, so the reported overlap lies between 0 and the shorter stage,
    and the run has no idle gap (its time is the union of its stages)."""
    conf, acc = streams(4, 1, 6, 120)
    out = np.random.default_rng(4).integers(10, 50, (1, 6))
    lengths = np.random.default_rng(5).integers(0, 10, conf.shape)
    for trigger in ("complete", "idle"):
        setup_ = pooled(hw, True, trigger, mb=1, pool=20)
        res = simulate_core(setup_, pair, Workload(np.full((1, 6), 64.0), out, acc, lengths, conf))
        st_ = res.stage_s
        assert 0 <= st_["overlap"][0] <= min(st_["draft"][0], st_["verify"][0]) + 1e-12
        assert res.time_s[0] == pytest.approx(st_["draft"][0] + st_["verify"][0] - st_["overlap"][0], rel=1e-12)


# -- counts and draft steps against a slot-by-slot reference ------------------------------------------------
def _slot_reference(runs, cont_runs, lengths, prompt, out, d, slots, eager, trigger):
    """One replica, scalar, round by round, with a pool that never overflows (each request's entry is
    all of it): ``slots`` slots served from the queue of requests in order. A round verifies the entries
    of the requests it verifies in one pass; with the Eager Pool they draft on during the pass. Fresh
    drafts (from a correction, or of a request just admitted) come before the pass (``complete``: it
    waits for them) or during it (``idle``: the pass starts on the entries ready, a request drafting
    catches the next pass; one with nothing to draft joins at once). Returns per round the requests busy
    at its start, completions, verified requests and their summed context, pool tokens, drafted, wasted
    and emitted tokens; and the draft chains in the order they are drafted: (kind, [(slot, tokens,
    context of the first)])."""
    n_req = len(out)
    slot = [None] * slots
    nxt = 0

    def admit(i):
        nonlocal nxt
        if nxt < n_req:
            slot[i] = dict(req=nxt, pos=0, ctx=float(prompt[nxt]), left=int(out[nxt]), held=0, ready=False, cont=False)
            nxt += 1
        else:
            slot[i] = None

    for i in range(slots):
        admit(i)
    rounds, chains = [], []
    while any(s is not None for s in slot):
        rd = dict(n=sum(s is not None for s in slot), nv=0, pool=0, drafted=0, wasted=0, emitted=0, ctx=0.0)
        fresh_chain, eager_chain = [], []
        done = []
        for i, s in enumerate(slot):
            if s is None:
                continue
            full = min(int(lengths[s["req"], s["pos"]]), 2 * d + 1)
            fresh = min(full, d) if not s["ready"] else 0
            if not eager:
                verifying, offered = True, fresh
            elif trigger == "complete":
                verifying, offered = True, (s["held"] if s["ready"] else fresh)
            else:
                verifying = s["ready"] or fresh == 0
                offered = s["held"] if verifying else 0
            fresh_chain.append((i, fresh, s["ctx"]))
            rd["drafted"] += fresh
            if not verifying:  # idle: drafting from a correction, catches the next pass
                s["held"], s["ready"], s["cont"] = fresh, True, False
                continue
            extra = max(0, min(full, offered + d + 1) - offered) if eager else 0
            eager_chain.append((i, extra, s["ctx"] + offered))
            rd["drafted"] += extra
            lv = min(offered, d)
            run = int(cont_runs[s["req"], s["pos"]] if s["cont"] else runs[s["req"], s["pos"]])
            acc = min(run, lv)
            rd["nv"] += 1
            rd["ctx"] += s["ctx"]
            rd["pool"] += lv + 1
            if eager:
                left = offered + extra - lv
                bonus = acc == lv and run > lv and left > 0
                keep = bonus and left > 1
                if not keep:
                    rd["wasted"] += offered + extra - acc - bonus
                s["held"], s["ready"], s["cont"] = (left - 1 if keep else 0), keep, keep
            emit = min(acc + 1, s["left"])
            rd["emitted"] += emit
            s["left"] -= emit
            s["ctx"] += emit
            s["pos"] += acc + 1
            if s["left"] == 0:
                done.append(i)
        rd["done"] = len(done)
        for i in done:
            admit(i)
        rounds.append(rd)
        chains += [("draft", fresh_chain), ("eager", eager_chain)]
    return rounds, [(kind, chain) for kind, chain in chains if any(k > 0 for _, k, _ in chain)]


def _steps(chain, d):
    """Requests drafting their j-th token and their summed context (context of the first + j), j < 2 d + 1."""
    steps = np.zeros((2 * d + 1, 2))
    for _, k, ctx in chain:
        for j in range(k):
            steps[j] += (1, ctx + j)
    return steps


def _logged_chains(rep, d):
    """The draft chains a replica booked, in booking order: (kind, steps as in ``_steps``)."""
    out = []
    for job, kind in enumerate(rep.job_kind):
        if loop.KINDS[kind] not in ("draft", "eager"):
            continue
        rows = np.flatnonzero((rep.pass_job == job) & (rep.pass_table == loop.TABLES.index("draft")))
        steps = np.zeros((2 * d + 1, 2))
        steps[: rows.size, 0] = rep.pass_n[rows]
        steps[: rows.size, 1] = rep.pass_n[rows] * rep.pass_ctx[rows]
        out.append((loop.KINDS[kind], steps))
    return out


@pytest.mark.parametrize("flagged", [False, True])
@pytest.mark.parametrize("eager,trigger", [(False, "complete"), (True, "complete"), (True, "idle")])
@pytest.mark.parametrize("serving", [None, Continuous(2, 0, prefill=False), Continuous(3, 2, prefill=False)])
def test_counts_and_draft_steps_follow_a_slot_by_slot_reference(
    pair, hw, monkeypatch, eager, trigger, serving, flagged
):
    """With a pool that never overflows each slot runs on its own, so the scalar reference fixes every
    round: the requests each pass verifies and their context, tokens, passes, drafted and wasted tokens and
    the largest pool (static batch, or refilled slots from a queue, with the window from the pass that completes the
    warm-up-th request to the one that leaves the queue empty), and every draft chain in the order it is
    booked: requests drafting their j-th token and their summed context, fresh drafts and eager ones.
    Drafting a chain takes less than a pass (unit costs: a draft step 0.02 s on PIM, a pass 1 s on the
    GPU), so under the ``idle`` trigger a request drafting from a correction catches the next pass.
    Lengths include zeros (nothing above tau: an ``idle`` request joins the pass at once) and lengths
    beyond the 2 d + 1 cap. Flagged streams: a draft that continues kept eager tokens reads the continuing
    runs, and a request that takes a finished one's slot starts afresh."""
    flat_costs(monkeypatch, 0, 0.02, 1.0, 0)
    d, n, x = 3, 6, 2
    rng = np.random.default_rng(5)
    t = 60 + d + 1
    out = rng.integers(5, 40, (x, n))
    prompt = rng.integers(20, 70, (x, n)).astype(float)
    acc = rng.random((x, n, t)) < 0.7
    if flagged:  # a continuing draft's outcome the opposite of a first one's: the wrong runs always show
        acc = acc.astype(np.uint8) * FIRST | (~acc).astype(np.uint8) * CONTINUED
    conf = np.ones((x, n, t), dtype=np.float32)
    lengths = np.where(rng.random((x, n, t)) < 0.3, 0, rng.integers(1, 2 * d + 4, (x, n, t)))
    slots = n if serving is None else serving.slots
    setup_ = pooled(hw, eager, trigger, mb=1, d=d, pool=slots * (d + 1))
    work = Workload(prompt, out, acc, lengths, conf, conf)
    res, _, reps = logged(monkeypatch, setup_, pair, work, serving)
    for r in range(x):
        runs, cont = match_runs(acc[r]), match_runs(acc[r], continuing=flagged)
        rounds, chains = _slot_reference(runs, cont, lengths[r], prompt[r], out[r], d, slots, eager, trigger)
        rep = reps[r]
        passes = [rd for rd in rounds if rd["nv"] > 0]
        # every pass verifies the requests the reference verifies, one event (emitted, completed) a pass
        np.testing.assert_array_equal(rep.round_n[rep.round_n > 0], [rd["nv"] for rd in passes])
        verify = rep.pass_table == loop.TABLES.index("verify")  # at the mean context of the verified requests
        np.testing.assert_allclose(rep.pass_n[verify] * rep.pass_ctx[verify], [rd["ctx"] for rd in passes], rtol=1e-12)
        np.testing.assert_array_equal(rep.event_emitted, [rd["emitted"] for rd in passes])
        np.testing.assert_array_equal(rep.event_completed, [rd["done"] for rd in passes])
        # every draft chain, in booking order
        booked = _logged_chains(rep, d)
        assert [k for k, _ in booked] == [k for k, _ in chains], r
        for (_, got), (_, chain) in zip(booked, chains, strict=True):
            np.testing.assert_array_equal(got[:, 0], _steps(chain, d)[:, 0])
            np.testing.assert_allclose(got[:, 1], _steps(chain, d)[:, 1], rtol=1e-12)
        # whole-run counts
        assert res.window["total_tokens"][r] == sum(rd["emitted"] for rd in rounds) == out[r].sum()
        assert rep.round_drafted.sum() == sum(rd["drafted"] for rd in rounds)
        assert res.pool["wasted"][r] == sum(rd["wasted"] for rd in rounds)
        assert res.pool["pool_max"][r] == max(rd["pool"] for rd in rounds)
        if serving is None:
            assert res.tokens[r] == sum(rd["emitted"] for rd in rounds)
            assert res.iterations[r] == len(passes)
            assert res.drafted[r] == sum(rd["drafted"] for rd in rounds)
            continue
        # the measured window: passes after the one that completes the warm-up-th request, up to the one
        # that completes the (N - slots + 1)-th (from then on a slot finds the queue empty)
        done = np.cumsum([rd["done"] for rd in passes])
        first = int(np.searchsorted(done, serving.warmup)) if serving.warmup else -1
        last = int(np.searchsorted(done, n - slots + 1))
        inw = passes[first + 1 : last + 1]
        assert 0 < len(inw) < len(passes)
        assert res.tokens[r] == sum(rd["emitted"] for rd in inw)
        assert res.iterations[r] == len(inw)
        assert res.window["completed"][r] == sum(rd["done"] for rd in inw)


# -- continuous batching: the window and its prefill ---------------------------------------------------------
def _prefill(tables, admitted):
    """Energy, device and class times of prefilling ``admitted`` requests in one go (target, then draft)."""
    energy, busy, cls = 0.0, {}, {}
    for t in tables.prefill:
        c = t.table.lookup(np.array([admitted]), np.array([0.0]))
        energy += float(c.energy_j[0])
        for k, v in c.busy_s.items():
            busy[k] = busy.get(k, 0.0) + float(v[0])
        for k, v in c.by_class_s.items():
            cls[k] = cls.get(k, 0.0) + float(v[0])
    return energy, busy, cls


def test_continuous_window_and_prefill_follow_the_passes_and_the_prefill_costs(pair, hw):
    """One micro-batch without the Eager Pool under continuous batching: the measured window starts at
    the pass that completes the warm-up-th request and holds the passes up to the one that leaves the
    queue empty; with prefill the same passes run, and energy, device and class times grow by exactly
    the prefill passes of the requests admitted at the window's passes (its start included, its end
    not: their prefill runs after it) while the draft / verify overlap is unchanged; an all-rejecting
    Eager Pool wastes every token it drafts."""
    setup_ = pooled(hw, False, mb=1, pool=20)
    conf, acc = streams(10, 1, 16, 140)
    out = np.random.default_rng(10).integers(10, 60, (1, 16))
    prompt = np.random.default_rng(11).integers(30, 90, (1, 16)).astype(float)
    lengths = np.random.default_rng(12).integers(0, 9, conf.shape)
    # the passes (a SADDLE-p pass verifies every busy slot; its completions free slots the queue refills
    # at once, while it lasts), the window's first and last pass and the requests admitted per pass
    runs = match_runs(acc[0])
    rounds, _ = _slot_reference(runs, runs, lengths[0], prompt[0], out[0], 4, 4, False, "complete")
    done = np.cumsum([rd["done"] for rd in rounds])
    first, last = int(np.searchsorted(done, 3)), int(np.searchsorted(done, 16 - 4 + 1))
    queue = 16 - 4
    admitted = []
    for rd in rounds:
        admitted.append(min(rd["done"], queue))
        queue -= admitted[-1]
    plain = simulate_core(setup_, pair, Workload(prompt, out, acc, lengths, conf, conf), Continuous(4, 3, False))
    assert plain.window["start_s"][0] > 0 and plain.window["completed"][0] < 16
    assert plain.iterations[0] == last - first
    assert plain.tokens[0] == sum(rd["emitted"] for rd in rounds[first + 1 : last + 1])
    assert plain.window["completed"][0] == done[last] - done[first]

    filled = simulate_core(
        setup_, pair, Workload(prompt, out, acc, lengths, conf, conf), Continuous(4, 3, True), timelines=True
    )
    # (not ``drafted``: draft tokens count in the window when their drafting starts, which a prefill moves)
    for k in ("tokens", "iterations", "request_rounds"):
        np.testing.assert_array_equal(getattr(filled, k), getattr(plain, k), err_msg=k)
    np.testing.assert_array_equal(filled.window["completed"], plain.window["completed"])
    assert sum(admitted[:first]) > 0  # prefill outside the window must not count
    tables = PassTables(setup_, pair, 4, 4096.0, float(prompt.mean()))
    energy, busy, cls = 0.0, {}, {}
    for a in admitted[first:last]:
        e, b, c = _prefill(tables, a)
        energy += e
        for k, v in b.items():
            busy[k] = busy.get(k, 0.0) + v
        for k, v in c.items():
            cls[k] = cls.get(k, 0.0) + v
    prefills = [j for j in filled.timelines[0]["jobs"] if j[0] == "prefill"]
    assert len(prefills) == 2 * sum(a > 0 for a in admitted)  # the target's prompt, then the draft's
    np.testing.assert_allclose(filled.energy_j - plain.energy_j, energy, rtol=1e-9)
    for got, base, add in ((filled.busy_s, plain.busy_s, busy), (filled.class_s, plain.class_s, cls)):
        assert set(got) == set(base) | set(add)
        for k in got:
            np.testing.assert_allclose(got[k], base.get(k, 0.0) + add.get(k, 0.0), rtol=1e-9, err_msg=k)
    np.testing.assert_allclose(filled.stage_s["overlap"], plain.stage_s["overlap"], rtol=1e-9, atol=1e-12)
    assert (filled.stage_s["prefill"] > 0).all() and (plain.stage_s["prefill"] == 0).all()
    np.testing.assert_allclose(filled.time_s, plain.time_s + filled.stage_s["prefill"], rtol=1e-9)
    whole = [sum(e - s for k, s, e in t["jobs"] if k == "prefill") for t in filled.timelines]
    np.testing.assert_allclose(filled.window["total_s"], plain.window["total_s"] + whole, rtol=1e-9)

    rejects = np.zeros_like(acc)
    eager = pooled(hw, True, mb=1, pool=20)
    static = simulate_core(eager, pair, Workload(prompt, out, rejects, lengths, conf))
    assert static.pool["wasted"][0] == static.drafted[0] > 0
    queued = simulate_core(eager, pair, Workload(prompt, out, rejects, lengths, conf, conf), Continuous(4, 3))
    assert queued.pool["discarded"][0] == queued.pool["eager"][0] > 0 and queued.pool["migrated"][0] == 0


def test_too_short_streams_are_rejected_with_the_length_needed(pair, hw):
    """A run reads up to d + 1 positions past the longest output (a request drafts from positions below
    its output length, at most d on): one position fewer is refused with a message that names both
    lengths (the other streams: test_tables)."""
    d = 3
    out = np.array([[20, 30]])
    need = 30 + d + 1
    setup_ = pooled(hw, True, mb=1, d=d, pool=16)
    prompt = np.full((1, 2), 64.0)
    for t, ok in ((need - 1, False), (need, True)):
        conf, acc = streams(1, 1, 2, t)
        lengths = np.full(conf.shape, 2)
        if ok:
            assert simulate_core(setup_, pair, Workload(prompt, out, acc, lengths, conf)).tokens[0] == 50
            continue
        with pytest.raises(SimError, match=rf"^acceptance streams of {t} positions; need >= {need}$"):
            simulate_core(setup_, pair, Workload(prompt, out, acc, lengths, conf))


def _late_case(hw, n=16, seed=7, p=0.7):
    """A pooled SADDLE of one micro-batch whose 4 slots take ``n`` requests with a prefill each, a draft
    token accepted with probability ``p`` (under ``_unit_costs(0.002, 0.1)``: a draft step 2 ms on PIM
    alone, a verification 0.1 s on the GPU)."""
    d = 3
    rng = np.random.default_rng(seed)
    out = rng.integers(5, 30, (1, n))
    acc = rng.random((1, n, 60)) < p
    conf = np.ones((1, n, 60), dtype=np.float32)
    lengths = rng.integers(1, 2 * d + 2, (1, n, 60))
    setup_ = pooled(hw, True, "complete", mb=1, d=d, pool=4 * (d + 1))
    return setup_, Workload(np.full((1, n), 64.0), out, acc, lengths, conf, conf), Continuous(4, 2, prefill=True)


def test_the_drafter_idle_check_is_asked_about_the_running_requests_at_their_mean_context(pair, hw, monkeypatch):
    """Where requests are admitted with a prefill, whether the others may draft during it is asked of the
    draft pass of the requests already running (verified by the pass, not just admitted, with tokens
    left) at their mean context after the pass's tokens, and only where there are some (the uncompiled
    loop, its check and the admission it follows spied on). Near the queue's end a verified slot finishes
    and finds no request to take: it is not running."""
    flat_costs(monkeypatch, 0, 0.002, 0.1, 0)
    plain = uncompiled(loop)
    use_loop(monkeypatch, plain)
    seen, calls = {}, []
    finish, admit, idle = plain._finish, plain.admit, plain._drafter_idle

    def spy_finish(*args):
        seen["slots"], seen["sel"] = args[8], args[12].copy()
        return finish(*args)

    def spy_admit(*args):
        seen["admitted"] = admit(*args)
        return seen["admitted"]

    def spy_idle(mach, lay, tab, n, ctx, t):
        left, context = seen["slots"][2], seen["slots"][3]
        running = seen["sel"] & ~seen["admitted"] & (left > 0)
        empty = seen["sel"] & ~seen["admitted"] & (left == 0)
        calls.append((n, ctx, running.sum(), context[running].sum() / max(running.sum(), 1), empty.any()))
        return idle(mach, lay, tab, n, ctx, t)

    monkeypatch.setattr(plain, "_finish", spy_finish)
    monkeypatch.setattr(plain, "admit", spy_admit)
    monkeypatch.setattr(plain, "_drafter_idle", spy_idle)
    setup_, work, serving = _late_case(hw, n=19, seed=0)
    simulate_core(setup_, pair, work, serving)
    for n, ctx, want_n, want_ctx, _ in calls:
        assert n == want_n > 0
        assert ctx == pytest.approx(want_ctx, rel=1e-12)
    assert len({n for n, *_ in calls}) > 1 and any(empty for *_, empty in calls)


@pytest.mark.parametrize("p", [0.7, 1.0])
def test_running_requests_draft_during_a_new_requests_prefill_where_their_drafter_is_idle(pair, hw, monkeypatch, p):
    """With the draft on PIM alone (unit costs: no GPU or link part) and prompts prefilled on the GPU, a
    request admitted with its prefill drafts in a chain of its own once the prefill has ended, while the
    requests already running draft during the prefill (``_finish``'s late slots). After every prefill
    that a fresh chain starts inside: that chain is the only one inside and drafts for requests already
    running (their contexts have grown past the 64-token prompts), and exactly one chain starts between
    the prefill's end and the next verification (which waits for every entry, ``complete``), drafting for
    the admitted requests alone (context 64). After every prefill a chain starts before the next
    verification (the admitted requests' first entries, with or without the others'), also where every
    running request keeps its eager tokens and drafts nothing (every token accepted). Some prefill has a
    chain inside where drafts are rejected."""
    flat_costs(monkeypatch, 0, 0.002, 0.1, 0)
    setup_, work, serving = _late_case(hw, p=p)
    _, _, (rep,) = logged(monkeypatch, setup_, pair, work, serving)
    kinds = np.array(loop.KINDS)[rep.job_kind]
    drafts = np.flatnonzero(kinds == "draft")
    verifies = rep.job_start[kinds == "verify"]
    pre = np.flatnonzero(kinds == "prefill")
    assert pre.size % 2 == 0 and pre.size
    spans = [(rep.job_start[pre[i]], rep.job_end[pre[i + 1]]) for i in range(0, pre.size, 2)]  # target, draft

    def first_context(job):  # the mean context of the chain's first step
        return rep.pass_ctx[np.flatnonzero(rep.pass_job == job)[0]]

    inside_some = 0
    for a, b in spans:
        inside = drafts[(rep.job_start[drafts] >= a) & (rep.job_start[drafts] < b)]
        nxt = verifies[verifies >= b].min()
        after = drafts[(rep.job_start[drafts] >= b) & (rep.job_start[drafts] < nxt)]
        assert after.size, (a, b)  # the admitted requests draft, whether or not others drafted during it
        if not inside.size:
            continue
        inside_some += 1
        assert inside.size == 1 and after.size == 1, (a, b)
        assert first_context(inside[0]) > 64.0 and first_context(after[0]) == 64.0, (a, b)
    assert inside_some > 0 or p == 1.0


def test_saddle_p_with_a_fixed_length_drafts_d_tokens_for_every_request_each_round(pair, hw, monkeypatch):
    """SADDLE-p under the fixed policy and an ample pool: each round both micro-batches draft d tokens for
    every request with tokens left (however few it has left), and one pass verifies them all (the loop logs
    a round of drafting, then the pass's round)."""
    d = 3
    setup_ = dataclasses.replace(pooled(hw, eager=False, mb=2, d=d, pool=64), policy="fixed")
    conf, acc = streams(2, 1, 8, 80)
    out = np.random.default_rng(2).integers(5, 40, (1, 8))
    _, _, (rep,) = logged(monkeypatch, setup_, pair, Workload(np.full((1, 8), 64.0), out, acc, confidence=conf))
    drafting, passes = (rep.round_n[::2], rep.round_drafted[::2]), (rep.round_n[1::2], rep.round_drafted[1::2])
    assert rep.round_n.size > 10 and (drafting[0] == 0).all() and (passes[0] > 0).all() and (passes[1] == 0).all()
    np.testing.assert_array_equal(drafting[1], d * passes[0])


def test_saddle_p_drafts_into_the_room_the_entries_in_flight_leave(pair, hw, monkeypatch):
    """SADDLE-p (d = 4, a pool of 5 tokens, the fixed policy) on an open loop whose second request arrives
    during the first one's first pass, every draft rejected (one token a pass): alone, request 0 drafts 4 of
    the 4 tokens of room beside its query token (an idle slot asks no query), twice; request 1, admitted
    beside request 0's waiting entry of 4 (with one token left to emit), finds no room and drafts nothing;
    the pass cuts request 0's entry to the 3 tokens left beside the two query tokens; then request 1 alone
    drafts 4 a pass. Hand-timed: draft rounds and each verification's requests and tokens."""
    flat_costs(monkeypatch, 0, 0.002, 0.1, 0)
    setup_ = dataclasses.replace(pooled(hw, eager=False, mb=1, d=4, pool=5), policy="fixed")
    conf = np.full((1, 2, 40), 0.5, np.float32)
    work = Workload(
        np.full((1, 2), 64.0),
        np.array([[2, 3]]),
        np.zeros((1, 2, 40), bool),
        confidence=conf,
        arrivals=np.array([[0.0, 0.05]]),
    )
    _, _, (rep,) = logged(monkeypatch, setup_, pair, work, Continuous(2, 1, False))
    drafting = rep.round_n == 0
    np.testing.assert_array_equal(rep.round_drafted[drafting], [4, 4, 4, 4])
    np.testing.assert_array_equal(rep.round_n[~drafting], [1, 2, 1, 1])
    v = rep.pass_table == loop.TABLES.index("verify")
    np.testing.assert_allclose(rep.pass_n[v] * (rep.pass_q0[v] + rep.pass_f[v]), [5, 5, 5, 5], rtol=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_a_pass_waits_for_the_eager_tokens_drafted_during_the_previous_one(pair, hw, monkeypatch, seed):
    """SADDLE-s under the ``complete`` trigger with draft steps (0.5 s on PIM) slower than a verification
    (0.1 s on the GPU), one request: its next entry includes the eager tokens drafted during its last
    pass, so no verification starts before the eager chain booked during the one before it has ended,
    whatever follows the chain (a fresh draft, kept tokens, or nothing to draft: lengths of 0)."""
    flat_costs(monkeypatch, 0, 0.5, 0.1, 0)
    rng = np.random.default_rng(seed)
    d = 3
    acc = rng.random((1, 1, 100)) < 0.6
    conf = np.ones((1, 1, 100), dtype=np.float32)
    lengths = np.where(rng.random((1, 1, 100)) < 0.4, 0, rng.integers(1, 2 * d + 2, (1, 1, 100)))
    work = Workload(np.full((1, 1), 64.0), np.full((1, 1), 60), acc, lengths, conf, conf)
    _, _, (rep,) = logged(monkeypatch, pooled(hw, True, "complete", mb=1, d=d, pool=16), pair, work)
    kinds = np.array(loop.KINDS)[rep.job_kind]
    verify = np.flatnonzero(kinds == "verify")
    eager = np.flatnonzero(kinds == "eager")
    assert eager.size > 5
    for a, b in zip(verify[:-1], verify[1:], strict=True):
        during = eager[(rep.job_start[eager] >= rep.job_start[a]) & (rep.job_start[eager] < rep.job_start[b])]
        assert (rep.job_end[during] <= rep.job_start[b]).all(), (a, b)


def test_only_the_verified_entries_enter_the_cut_and_a_draft_is_capped_at_2d_plus_1(pair, hw, monkeypatch):
    """SADDLE under the ``idle`` trigger with an overflowing pool (the uncompiled loop, its admission and
    fresh drafts spied on): the cut ranks only the entries of the requests the pass verifies (nothing of
    those still drafting), some passes verify only some requests and cut them, a request's draft from
    where it stands is its length there, capped at 2 d + 1 (lengths here reach 3 d + 2), and an entry
    offers a pass at most d tokens, also where its request kept more than d."""
    flat_costs(monkeypatch, 0, 0.02, 0.1, 0)
    plain = uncompiled(loop)
    use_loop(monkeypatch, plain)
    d, n, pool = 3, 6, 10
    cuts, fulls, kept = [], [], []
    admit_pool, draft_fresh = plain.admit_pool, plain.draft_fresh

    def spy_admit(want, rq, slots, capacity, sel, counts, lv, work):
        cuts.append((want.copy(), sel.copy(), capacity))
        kept.extend(slots[4][sel])
        admit_pool(want, rq, slots, capacity, sel, counts, lv, work)

    def spy_fresh(rule, mach, lay, tab, logs, counts, rq, slots, pool_, starts, stops, sel, work):
        draft_fresh(rule, mach, lay, tab, logs, counts, rq, slots, pool_, starts, stops, sel, work)
        cur, pos, left = slots[0], slots[1], slots[2]
        for s in np.flatnonzero(sel & (left > 0)):
            fulls.append((pool_[2][s], lengths[0, cur[s], pos[s]]))  # the workload's (the loop reads them capped)

    monkeypatch.setattr(plain, "admit_pool", spy_admit)
    monkeypatch.setattr(plain, "draft_fresh", spy_fresh)
    rng = np.random.default_rng(4)
    acc = rng.random((1, n, 120)) < 0.8
    conf = rng.random((1, n, 120)).astype(np.float32)
    lengths = rng.integers(0, 3 * d + 3, (1, n, 120))
    out = rng.integers(10, 40, (1, n))
    simulate_core(
        pooled(hw, True, "idle", mb=2, d=d, pool=pool),
        pair,
        Workload(np.full((1, n), 64.0), out, acc, lengths, conf, conf),
    )
    for want, sel, _ in cuts:
        assert (want[~sel] == 0).all() and (want <= d).all()  # an entry offers at most d tokens, however many it kept
    assert any(held > d for held in kept)
    assert any(not sel.all() and want.sum() > cap - sel.sum() for want, sel, cap in cuts)
    assert all(full == min(length, 2 * d + 1) for full, length in fulls)
    assert any(length > 2 * d + 1 for _, length in fulls)


def test_a_drafts_later_confidences_default_to_its_first_ones_and_rank_the_pools_cut(pair, hw):
    """An overflowing pool (SADDLE, 6 requests of up to 2 d + 1 tokens, room for 10) ranks drafted tokens by
    their running products: without ``confidence_later`` a draft's later tokens take the first's stream,
    the same run as passing it; a later stream of its own ranks them otherwise."""
    d, n = 3, 6
    rng = np.random.default_rng(9)
    conf = rng.random((1, n, 120)).astype(np.float32)
    later = rng.random((1, n, 120)).astype(np.float32)
    acc = rng.random((1, n, 120)) < 0.8
    out, lengths = rng.integers(10, 40, (1, n)), rng.integers(1, 2 * d + 2, (1, n, 120))
    s, prompt = pooled(hw, True, "idle", mb=1, d=d, pool=10), np.full((1, n), 64.0)
    alone = simulate_core(s, pair, Workload(prompt, out, acc, lengths, conf))
    same = simulate_core(s, pair, Workload(prompt, out, acc, lengths, conf, conf))
    other = simulate_core(s, pair, Workload(prompt, out, acc, lengths, conf, later))
    np.testing.assert_array_equal(alone.time_s, same.time_s)
    np.testing.assert_array_equal(alone.drafted, same.drafted)
    assert other.time_s[0] != alone.time_s[0]


def test_a_pooled_run_counts_its_verifications_and_those_with_attention_in_pim(pair, hw):
    """The counters a pooled verification keeps (``ReplicaLog.counts``; the placement share of the result) are
    its logged verify passes, and of those the ones whose variant puts the target's attention in PIM: with the
    dynamic scheduler both variants occur, on SADDLE-p and SADDLE-s alike."""
    rng = np.random.default_rng(5)
    out = rng.integers(20, 60, (1, 48))
    conf, acc = streams(5, 1, 48, out.max() + 9, 0.7)
    lengths = np.stack([running_product_lengths(c, 0.3, 8) for c in conf])
    w = Workload(np.full(out.shape, 64.0), out, acc, lengths, conf, conf)
    for eager in (False, True):
        s = dataclasses.replace(pooled(hw, eager, "idle", mb=2, d=4, pool=120, system="saddle"), dynamic=True)
        tables, (rep,) = core.replica_logs(s, pair, w, workers=1)
        verify = rep.pass_table == loop.TABLES.index("verify")
        on_pim = tables.flat()[10][rep.pass_variant[verify]]
        assert rep.counts[3] == verify.sum() > 0, eager
        assert rep.counts[2] == on_pim.sum() and 0 < on_pim.sum() < verify.sum(), eager
