"""``simulate_core`` end to end: conservation of tokens and resources, the token accounting of drafts and
pools, and the cases where one run of the core must equal another run of it."""

import dataclasses
import types

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adsl.fitting.generator import running_product_lengths
from adsl.settings import Continuous
from adsl.sim import core
from adsl.sim.core import simulate_core
from adsl.sim.loop import KINDS, TABLES
from adsl.sim.setup import SimError
from adsl.sim.tables import Layout, PassTables
from adsl.sim.workload import Workload
from tests.sim.builders import GPU, PIM_DRAFT, flat_costs, inputs, logged, pim_sd, pooled, setup, streams, union

# a run and its accounting warn of nothing: a job of no time (free drafting) or a placement counter of no
# passes (AD has no draft) is a value, not a 0 / 0 for numpy to warn about
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")
PAIR = "OPT-66B"
CASES = [
    ("AD, 2 micro-batches", lambda hw: setup(hw, decoding="ad", mb=2, static_power=True)),
    ("PIM-SD, 2 micro-batches", lambda hw: pim_sd(hw)),
    ("SADDLE-p", lambda hw: pooled(hw, eager=False)),
    ("SADDLE-p, small pool", lambda hw: pooled(hw, eager=False, pool=12)),
    ("SADDLE-s, complete", lambda hw: pooled(hw, eager=True)),
    ("SADDLE-s, complete, small pool", lambda hw: pooled(hw, eager=True, pool=12)),
    ("SADDLE-s, idle", lambda hw: pooled(hw, eager=True, trigger="idle", mb=3)),
    ("SADDLE, pipeline", lambda hw: dataclasses.replace(pooled(hw, True, "idle", 4, system="saddle"), dynamic=True)),
]


def _run_case(monkeypatch, models, setup_, serving, x=2, out=None):
    n = 6 if serving is None else 18
    out = np.random.default_rng(3).integers(5, 60, (x, n)) if out is None else out
    conf, acc = streams(4, x, n, 100)
    lengths = np.stack([running_product_lengths(c, 0.4, 9) for c in conf])
    sd = setup_.decoding == "sd"
    work = Workload(np.full((x, n), 64.0), out, acc if sd else None, lengths if sd else None, conf, conf)
    res, _, reps = logged(monkeypatch, setup_, models.pair(PAIR), work, serving, timelines=True)
    return out, res, reps


@pytest.mark.parametrize("name,make", CASES)
@pytest.mark.parametrize("serving", [None, Continuous(6, 3, prefill=True)])
def test_the_logs_hold_no_empty_round_and_a_q_only_for_verifications(models, hw, monkeypatch, name, make, serving):
    """Every round the loop logs has requests or drafted tokens, at a finite time; a pass other than a
    verification is logged at q0 = 0 with no fraction, and a decode pass on its one table (variant 0)."""
    _, res, reps = _run_case(monkeypatch, models, make(hw), serving)
    for rep in reps:
        assert np.isfinite(rep.round_t).all() and ((rep.round_n > 0) | (rep.round_drafted > 0)).all(), name
        other = rep.pass_table != TABLES.index("verify")
        assert (rep.pass_q0[other] == 0).all() and (rep.pass_f[other] == 0).all(), name
        assert (rep.pass_variant[rep.pass_table == TABLES.index("decode")] == 0).all(), name


def test_machines_forget_past_intervals_so_a_run_may_book_more_than_they_hold_at_once(pair, hw):
    """A machine holds at most ``loop.CAPACITY`` busy intervals at once and forgets those that have ended
    every ``PRUNE``-th event: one request decoding 1,100 tokens books about 4,400 intervals on the GPU (four
    layer chunks a pass, PIM attention between them) and runs to its end."""
    res = simulate_core(setup(hw, decoding="ad"), pair, Workload(np.full((1, 1), 64.0), np.full((1, 1), 1100)))
    assert res.tokens.tolist() == [1100.0]


def test_a_log_that_fills_up_counts_its_rows_and_the_replica_runs_again_with_as_many(pair, hw, monkeypatch):
    """Logs that start with two rows each: every log fills, counts the rows it could not take, and the replica
    runs again with that many; the result is the one with logs large enough from the start (a SD and a pool
    run, timelines kept)."""
    conf, acc = streams(5, 2, 6, 140)
    out = np.random.default_rng(5).integers(10, 40, (2, 6))
    lengths = np.full(acc.shape, 3)
    work = Workload(np.full((2, 6), 64.0), out, acc, lengths, conf, conf)
    for s in (setup(hw, "motivation-4gpu", d=3, mb=2), pooled(hw, True, d=3, pool=30)):
        whole = simulate_core(s, pair, work, timelines=True)
        counted: list = []

        def spy(*args, counted=counted, inner=core.loop.run_replica):
            out = inner(*args)
            counted.append(args[7][5].copy())  # the rows each log counted
            return out

        monkeypatch.setattr(core, "log_rows", lambda tokens, timelines: (2, 2, 2, 2, 2))
        monkeypatch.setattr(core.loop, "run_replica", spy)
        small = simulate_core(s, pair, work, timelines=True, workers=1)
        monkeypatch.undo()
        assert len(counted) == 4  # each replica twice: its logs full, then as large as they counted
        for first, again in (counted[:2], counted[2:]):
            assert (first > 2).all() and (again == first).all()
        for field in ("time_s", "energy_j", "tokens", "drafted"):
            np.testing.assert_array_equal(getattr(small, field), getattr(whole, field), err_msg=field)
        assert small.timelines == whole.timelines


def test_an_open_loop_pool_with_slots_never_filled_cuts_and_serves_every_request(pair, hw):
    """Open loop with three slots and two requests (at 0 s and 5 s): a slot that never held a request is
    scored too by a pool that cuts (4 tokens), and every request emits its output."""
    conf, acc = streams(7, 1, 2, 60)
    out = np.array([[20, 12]])
    work = Workload(np.full((1, 2), 64.0), out, acc, np.full(conf.shape, 4), conf, arrivals=np.array([[0.0, 5.0]]))
    res = simulate_core(pooled(hw, True, "idle", 1, d=4, pool=4), pair, work, Continuous(3, 0))
    assert res.window["total_tokens"].tolist() == [32.0] and res.pool["pool_max"][0] == 4


@pytest.mark.parametrize("name,make", CASES)
@pytest.mark.parametrize("serving", [None, Continuous(6, 3, prefill=True)])
def test_conservation_and_resources(models, hw, monkeypatch, name, make, serving):
    """Every request emits exactly its output; no machine runs two segments at once, and on a static batch
    the time booked on each kind of machine is the device time the result reports; no pooled pass
    verifies more than C tokens (the small pools fill up)."""
    setup_ = make(hw)
    out, res, reps = _run_case(monkeypatch, models, setup_, serving)
    np.testing.assert_array_equal(res.window["total_tokens"], out.sum(axis=1))
    if serving is None:
        np.testing.assert_array_equal(res.tokens, out.sum(axis=1))
    machines = Layout.of(setup_.system).machines
    for r, timeline in enumerate(res.timelines):
        by_machine, booked = {}, {"gpu": 0.0, "pim": 0.0}
        for m, s, e, kind in timeline["segments"]:
            assert kind in KINDS and e > s, name
            by_machine.setdefault(m, []).append((s, e))
            booked[machines[m][:3]] += e - s
        assert set(by_machine) <= set(range(len(machines))), name
        for spans in by_machine.values():
            spans.sort()
            assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False)), name
        if serving is None:
            assert booked["gpu"] == pytest.approx(res.busy_s["gpu"][r] + res.busy_s["link"][r], rel=1e-9), name
            assert booked["pim"] == pytest.approx(res.busy_s["pim"][r], rel=1e-9, abs=1e-15), name
    if setup_.pool_tokens:
        assert (res.pool["pool_max"] <= setup_.pool_tokens).all()
        for rep in reps:
            v = rep.pass_table == TABLES.index("verify")
            assert (rep.pass_n[v] * (rep.pass_q0[v] + rep.pass_f[v]) <= setup_.pool_tokens + 1e-9).all(), name
        if setup_.pool_tokens == 12:
            assert (res.pool["pool_max"] == 12).all(), name
    assert (res.time_s > 0).all() and np.isfinite(res.energy_j).all()


def _drafted_and_verified(rep):
    """(draft tokens the replica drafted, draft tokens its verification passes verified), whole run."""
    v = rep.pass_table == TABLES.index("verify")
    verified = np.round(rep.pass_n[v] * (rep.pass_q0[v] + rep.pass_f[v] - 1)).sum()
    return int(rep.round_drafted.sum()), int(verified)


@pytest.mark.parametrize("name,make", [c for c in CASES if not c[0].startswith("AD")])
@pytest.mark.parametrize("serving", [None, Continuous(6, 3, prefill=True)])
def test_every_drafted_token_is_verified_cut_or_wasted(models, hw, monkeypatch, name, make, serving):
    """Without the Eager Pool every drafted token is verified (the sequential pool cuts drafts before
    they are drafted) and nothing is wasted. With it, no token is verified twice, and what is drafted
    is what passes (emitted tokens less one a verified request) plus what is wasted, plus at most
    the target's bonus token a verified request, the overshoot of a request's last pass and the held
    tokens a finished request drops; what is never verified was wasted, held or matched a bonus token."""
    setup_ = make(hw)
    d = setup_.draft_length
    out, res, reps = _run_case(monkeypatch, models, setup_, serving)
    for r, rep in enumerate(reps):
        drafted, verified = _drafted_and_verified(rep)
        emitted, rounds, n = rep.event_emitted.sum(), int(rep.round_n.sum()), rep.out.size
        if serving is None:
            assert res.drafted[r] == drafted and res.request_rounds[r] == rounds
        assert verified >= emitted - rounds  # every accepted token was verified
        pool = dict(zip(("eager", "migrated", "discarded", "wasted"), rep.counts[4:8], strict=True))
        if not setup_.eager:
            assert drafted == verified > 0, name
            assert pool == dict.fromkeys(pool, 0), name
            continue
        assert 0 < verified < drafted, name
        assert 0 < pool["discarded"] <= pool["eager"] < drafted, name
        assert pool["wasted"] + emitted - rounds <= drafted, name
        assert drafted <= pool["wasted"] + emitted - rounds + rounds + n * d + pool["migrated"], name
        assert drafted - verified <= pool["wasted"] + pool["migrated"] + rounds, name


@pytest.mark.parametrize("eager", [False, True])
def test_with_every_draft_rejected_every_drafted_token_is_wasted(pair, hw, monkeypatch, eager):
    """Acceptance streams of no passing token: every pass emits the target's token alone, nothing is
    held, and every drafted token is verified (sequential pool) or wasted (Eager Pool)."""
    n = 6
    conf, _ = streams(5, 2, n, 100)
    acc = np.zeros(conf.shape, bool)
    out = np.random.default_rng(5).integers(5, 40, (2, n))
    lengths = np.stack([running_product_lengths(c, 0.4, 9) for c in conf])
    res, _, reps = logged(
        monkeypatch, pooled(hw, eager), pair, Workload(np.full((2, n), 64.0), out, acc, lengths, conf, conf)
    )
    np.testing.assert_array_equal(res.tokens, out.sum(axis=1))
    np.testing.assert_array_equal(res.request_rounds, out.sum(axis=1))
    for r, rep in enumerate(reps):
        drafted, verified = _drafted_and_verified(rep)
        assert res.drafted[r] == drafted > 0
        assert res.pool["migrated"][r] == 0
        if eager:
            assert res.pool["wasted"][r] == drafted > verified > 0
            assert res.pool["discarded"][r] == res.pool["eager"][r] > 0
        else:
            assert res.pool["wasted"][r] == 0 and verified == drafted


@settings(max_examples=10, deadline=None)
@given(
    st.integers(1, 6), st.integers(1, 5), st.sampled_from(["dgx-a100", "saddle-tp", "saddle"]), st.integers(0, 2**31)
)
def test_one_micro_batch_runs_its_passes_back_to_back(pair, hw, n, d, system, seed):
    """One micro-batch and no pool, AD and SD with fixed and adaptive lengths, one stage or a pipeline:
    each job starts when the previous one ends, so the run takes the sum of its jobs, and every request
    emits its output."""
    conf, acc = streams(seed, 2, n, 90)
    out = np.random.default_rng(seed).integers(1, 40, (2, n))
    prompt = np.full((2, n), 64.0)
    lengths = np.stack([running_product_lengths(c, 0.5, d) for c in conf])
    for decoding, lens in (("ad", None), ("sd", None), ("sd", lengths)):
        s = setup(hw, system, decoding, d, policy="running_product" if lens is not None else "fixed")
        res = simulate_core(s, pair, Workload(prompt, out, acc if decoding == "sd" else None, lens), timelines=True)
        np.testing.assert_array_equal(res.tokens, out.sum(axis=1))
        assert res.placement["micro_batches"] == 1.0
        for r, timeline in enumerate(res.timelines):
            jobs = timeline["jobs"]
            assert jobs[0][1] == 0.0 and all(a[2] == b[1] for a, b in zip(jobs, jobs[1:], strict=False))
            assert res.time_s[r] == pytest.approx(sum(e - s for _, s, e in jobs), rel=1e-12)


@pytest.mark.parametrize(
    "system,decoding,d,copies,target,n,p,o",
    [
        ("saddle-tp", "ad", 0, 1, GPU, 4, 64, 30),
        ("saddle-tp", "ad", 0, 1, PIM_DRAFT, 4, 64, 30),
        ("saddle-tp", "sd", 3, 2, None, 5, 64, 30),
        ("dgx-a100", "sd", 3, 2, None, 5, 64, 30),
        ("saddle-tp", "sd", 1, 1, None, 3, 4, 60),  # outputs far longer than the prompts
        ("saddle-tp", "sd", 8, 1, None, 48, 4, 3),  # a batch larger than any context, drafts past the outputs
    ],
)
def test_other_placements_copies_and_lengths_conserve_tokens(pair, hw, system, decoding, d, copies, target, n, p, o):
    """The target's mapping for AD, the draft's copies, contexts far past the prompt, more requests than
    context positions and a draft longer than the outputs: every request emits its output, the run is
    its passes back to back, and verification never verifies more than d + 1 tokens a request."""
    kw = {} if target is None else {"target_mapping": target}
    s = setup(hw, system, decoding, d, draft_copies=copies, **kw)
    _, acc = streams(5, 2, n, o + d + 1, p=0.7)
    out = np.full((2, n), o)
    res = simulate_core(s, pair, Workload(np.full((2, n), float(p)), out, acc if d else None), timelines=True)
    np.testing.assert_array_equal(res.tokens, out.sum(axis=1))
    for r, timeline in enumerate(res.timelines):
        assert res.time_s[r] == pytest.approx(sum(e - s for _, s, e in timeline["jobs"]), rel=1e-12)
    if d:
        assert (res.drafted <= d * res.request_rounds).all() and (res.drafted > 0).all()
    else:
        np.testing.assert_array_equal(res.iterations, [o, o])


def test_the_pool_without_eager_drafting_waits_for_every_entry_whatever_the_trigger(pair, hw):
    """SADDLE-p verifies every request's entry in each pass: under the ``idle`` trigger (two micro-batches,
    continuous batching with prefill) it runs pass for pass as under ``complete``."""
    conf, acc = streams(14, 2, 16, 140)
    out = np.random.default_rng(14).integers(10, 60, (2, 16))
    lengths = np.stack([running_product_lengths(c, 0.5, 9) for c in conf])
    work = Workload(np.full((2, 16), 64.0), out, acc, lengths, conf, conf)
    runs = [
        simulate_core(pooled(hw, False, t, mb=2, pool=20), pair, work, Continuous(4, 3, True))
        for t in ("complete", "idle")
    ]
    for field in ("time_s", "energy_j", "tokens", "iterations", "drafted"):
        np.testing.assert_array_equal(getattr(runs[1], field), getattr(runs[0], field), err_msg=field)


def test_sequential_pool_micro_batches_change_only_when_drafts_end(pair, hw):
    """SADDLE-p admits and verifies every request in one pooled pass whatever the number of Draft
    Generators: more micro-batches move when drafting ends, never which tokens are verified."""
    conf, acc = streams(12, 2, 9, 140)
    out = np.random.default_rng(12).integers(10, 60, (2, 9))
    prompt = np.full((2, 9), 64.0)
    lengths = np.stack([running_product_lengths(c, 0.5, 9) for c in conf])
    setups = [pooled(hw, False, mb=m, pool=20) for m in (1, 2, 3)]
    runs = [simulate_core(s, pair, Workload(prompt, out, acc, lengths, conf, conf)) for s in setups]
    for res in runs[1:]:
        assert res.placement["micro_batches"] > 1
        for field in ("tokens", "iterations", "request_rounds", "drafted"):
            np.testing.assert_array_equal(getattr(res, field), getattr(runs[0], field), err_msg=field)
        np.testing.assert_array_equal(res.pool["pool_max"], runs[0].pool["pool_max"])


def test_stage_times_are_the_union_of_the_jobs_of_each_kind(pair, hw):
    """Fig. 16's draft / verify / overlap shares come from the jobs' kinds: every job carries one of
    KINDS, and each stage's time is the union of its jobs' intervals."""
    conf, acc = streams(13, 1, 8, 140)
    out = np.random.default_rng(13).integers(10, 60, (1, 8))
    lengths = np.stack([running_product_lengths(c, 0.5, 9) for c in conf])
    for s in (pim_sd(hw), pooled(hw, False), pooled(hw, True, "idle")):
        lens = lengths if s.pool_tokens else None
        res = simulate_core(s, pair, Workload(np.full((1, 8), 64.0), out, acc, lens, conf, conf), timelines=True)
        jobs = res.timelines[0]["jobs"]
        assert {k for k, _, _ in jobs} <= set(KINDS) and {"draft", "verify"} <= {k for k, _, _ in jobs}
        end = res.time_s[0]
        draft = union([(a, b) for k, a, b in jobs if k in ("draft", "eager")], 0.0, end)
        verify = union([(a, b) for k, a, b in jobs if k == "verify"], 0.0, end)
        assert res.stage_s["draft"][0] == pytest.approx(draft) and draft > 0
        assert res.stage_s["verify"][0] == pytest.approx(verify) and verify > 0
        every = union([(a, b) for _, a, b in jobs], 0.0, end)
        assert res.stage_s["overlap"][0] == pytest.approx(draft + verify - every, abs=1e-12)
        # drafting overlaps verification across micro-batches and with the Eager Pool, not in SADDLE-p
        assert (res.stage_s["overlap"][0] > 0) == (s.eager or not s.pool_tokens)


def test_open_loop_with_every_request_waiting_at_zero_is_the_closed_loop(pair, hw):
    """Arrivals all at time 0 and no prefill: the open loop fills its empty slots at once and then runs
    the closed loop's micro_batching, pass for pass (the open-loop refill path against the closed loop); with
    one output token a request, every request still finishes."""
    n = 18
    conf, acc = streams(4, 2, n, 140)
    lengths = np.stack([running_product_lengths(c, 0.4, 9) for c in conf])
    prompt = np.full((2, n), 64.0)
    serving = Continuous(6, 3, False)
    for s in (pooled(hw, True, "idle"), pim_sd(hw)):
        lens = lengths if s.pool_tokens else None
        for out in (np.random.default_rng(3).integers(5, 60, (2, n)), np.ones((2, n), np.int64)):
            closed = simulate_core(s, pair, Workload(prompt, out, acc, lens, conf, conf), serving)
            opened = simulate_core(
                s, pair, Workload(prompt, out, acc, lens, conf, conf, arrivals=np.zeros((2, n))), serving
            )
            np.testing.assert_array_equal(opened.window["total_tokens"], out.sum(axis=1))
            np.testing.assert_allclose(opened.window["total_s"], closed.window["total_s"], rtol=1e-12)
            for k, v in closed.pool.items():
                np.testing.assert_array_equal(opened.pool[k], v, err_msg=k)
            assert np.isfinite(opened.requests["finished"]).all()


def test_free_drafting_reaches_the_verification_only_bound(pair, hw, monkeypatch):
    """Hiding more work can only help: with drafting free (draft tables of zero seconds), the run takes
    exactly its verification passes, sequential pool or Eager Pool."""
    flat_costs(monkeypatch, 0, 0)
    conf, acc = streams(11, 1, 8, 160)
    out = np.full((1, 8), 80)
    lengths = np.stack([running_product_lengths(c, 0.4, 9) for c in conf])
    for eager in (False, True):
        res = simulate_core(
            pooled(hw, eager, mb=2), pair, Workload(np.full((1, 8), 64.0), out, acc, lengths, conf, conf)
        )
        assert res.time_s[0] == pytest.approx(res.stage_s["verify"][0], rel=1e-9)
        assert res.stage_s["draft"][0] == 0.0 and res.drafted[0] > 0
        np.testing.assert_array_equal(res.tokens, out.sum(axis=1))


@pytest.mark.parametrize("on_pim", [True, False])
def test_the_controller_adds_its_decision_to_every_draft_step_of_a_per_token_policy(pair, hw, monkeypatch, on_pim):
    """One micro-batch drafting then verifying in turn, a static batch: with the Controller's decision
    charged, the run is longer by exactly that time per draft step (draft in PIM or on the GPU), spent by
    the drafting device (its draft segments, the timeline); a fixed draft length (no per-token decision)
    pays nothing; the tokens and passes are the same."""
    conf, later, acc, out, lengths = inputs(4, 1, 8)
    w = Workload(np.full(out.shape, 64.0), out, acc, lengths, conf, later)
    mapping = {"fc": "pim", "attention": "pim"} if on_pim else {"fc": "gpu", "attention": "gpu"}
    base = dataclasses.replace(setup(hw, d=4, draft_mapping=mapping), policy="running_product")
    step = 2.5e-5
    free, _, reps = logged(monkeypatch, base, pair, w, timelines=True)
    paid = simulate_core(dataclasses.replace(base, controller_step_s=step), pair, w, timelines=True)
    steps = int((reps[0].pass_table == TABLES.index("draft")).sum())
    assert steps > 0
    assert paid.time_s[0] == pytest.approx(free.time_s[0] + step * steps, rel=1e-12)

    def drafting(res, on):  # draft seconds on the GPUs (even machines) or the PIMs (odd)
        return sum(e - b for m, b, e, k in res.timelines[0]["segments"] if k == "draft" and m % 2 == on)

    assert drafting(paid, on_pim) == pytest.approx(drafting(free, on_pim) + step * steps, rel=1e-9)
    assert drafting(paid, not on_pim) == pytest.approx(drafting(free, not on_pim), rel=1e-9)
    np.testing.assert_array_equal(paid.tokens, free.tokens)
    np.testing.assert_array_equal(paid.iterations, free.iterations)
    fixed = dataclasses.replace(base, policy="fixed")
    fixed_paid = simulate_core(
        dataclasses.replace(fixed, controller_step_s=step), pair, Workload(w.prompt_len, out, acc)
    )
    assert fixed_paid.time_s[0] == simulate_core(fixed, pair, Workload(w.prompt_len, out, acc)).time_s[0]


@pytest.mark.parametrize("kind", ["SADDLE-s", "SADDLE-p", "SD"])
def test_lengths_under_a_lowered_tau_are_in_force_only_while_few_requests_are_in_flight(pair, hw, kind):
    """SADDLE-s, SADDLE-p and SD drafting by the running product (two micro-batches), a static batch of 8:
    lengths for light load in force at any load (at most 8 in flight) are the run with those lengths;
    never in force (0), the run without them; in force from 4 in flight on, in between (the batch drains
    from 8 requests). A bound without lengths for light load is the run without them."""
    conf, later, acc, out, lengths = inputs(6, 1, 8)
    s = {
        "SADDLE-s": pooled(hw, eager=True, mb=1, pool=64),
        "SADDLE-p": pooled(hw, eager=False, mb=2, pool=64),
        "SD": setup(hw, mb=2, policy="running_product"),
    }[kind]
    w = Workload(np.full(out.shape, 64.0), out, acc, lengths, conf, later)
    longer = np.minimum(lengths + 3, 12)
    plain = simulate_core(s, pair, w)
    runs = {k: simulate_core(s, pair, dataclasses.replace(w, light_lengths=longer, light_at_most=k)) for k in (0, 4, 8)}
    swapped = simulate_core(s, pair, dataclasses.replace(w, draft_lengths=longer))
    unset = simulate_core(s, pair, dataclasses.replace(w, light_at_most=8))  # no lengths for light load: tau stays
    for field in ("time_s", "drafted", "iterations"):
        np.testing.assert_array_equal(getattr(runs[0], field), getattr(plain, field), err_msg=field)
        np.testing.assert_array_equal(getattr(unset, field), getattr(plain, field), err_msg=field)
        np.testing.assert_array_equal(getattr(runs[8], field), getattr(swapped, field), err_msg=field)
    assert plain.drafted[0] < runs[4].drafted[0] < runs[8].drafted[0]
    with pytest.raises(SimError, match=r"^light_lengths lower an adaptive rule's tau: they need draft_lengths$"):
        simulate_core(s, pair, dataclasses.replace(w, draft_lengths=None, light_lengths=longer, light_at_most=8))


def test_draft_lengths_of_any_integer_type_give_the_run_of_the_same_lengths_as_int64(pair, hw):
    """A policy of one's own may hand lengths over as int32 or uint8: the run is the one of the same lengths
    as int64 (the loop is compiled for int64 lengths), with and without lengths for light load."""
    conf, later, acc, out, lengths = inputs(6, 1, 8)
    s = pooled(hw, eager=True, mb=1, pool=64)
    w = Workload(np.full(out.shape, 64.0), out, acc, lengths, conf, later, light_lengths=lengths + 1, light_at_most=4)
    want = simulate_core(s, pair, w)
    for dtype in (np.int32, np.uint8):
        got = simulate_core(
            s,
            pair,
            dataclasses.replace(w, draft_lengths=lengths.astype(dtype), light_lengths=(lengths + 1).astype(dtype)),
        )
        assert got.time_s.tobytes() == want.time_s.tobytes() and got.drafted.tobytes() == want.drafted.tobytes()


# the loop's per-request arguments (``rq``) as ``core.replica_logs`` hands them over, one dtype per field: prompt,
# output, arrival, open loop, runs, flagged, continuing runs, lengths, adaptive, confidences (first, later), lengths
# for light load, their bound
RQ_DTYPES = tuple("float64 int64 float64 bool uint8 bool uint8 uint8 bool float32 float32 uint8 int64".split())


@pytest.mark.parametrize("flagged", [False, True])
def test_the_loop_is_handed_one_dtype_per_field_whatever_the_workload_holds(pair, hw, monkeypatch, flagged):
    """numba compiles the loop once per set of argument types: float32 or float64 confidences, int32 or uint8
    lengths, bool or flagged streams (whose runs ``match_runs`` gives as uint16 or int32) reach it as float32
    confidences and uint8 lengths and runs (capped at what the loop reads, ``core.narrow``), so no workload a
    user builds pays a second compile."""
    conf, later, acc, out, lengths = inputs(6, 1, 8, flagged=flagged)
    s = pooled(hw, eager=True, mb=1, pool=64)
    seen = []

    def spy(*args, run=core.loop.run_replica):
        seen.append(tuple(np.asarray(a).dtype.name for a in args[11]))  # a Python bool is numpy's bool
        return run(*args)

    monkeypatch.setattr(core.loop, "run_replica", spy)
    prompt = np.full(out.shape, 64.0)
    for c, ln in ((conf, lengths), (conf.astype(np.float64), lengths.astype(np.uint8))):
        simulate_core(s, pair, Workload(prompt, out, acc, ln, c, c, light_lengths=ln, light_at_most=4))
    assert seen == [RQ_DTYPES, RQ_DTYPES]


def _flat(dg, dp):
    """A stand-in for ``PassTables`` whose ``flat()`` holds draft tables ``dg`` / ``dp`` and empty others."""
    z = np.zeros((1, 1, 1, 2))
    tables = (np.asarray(dg, float), np.asarray(dp, float), z, z, z[0, 0], z[0, 0], z[0], z[0], 16.0, None, None)
    return types.SimpleNamespace(flat=lambda: tables, verify_key="")


def test_the_loop_key_tells_runs_apart_by_their_pass_costs_and_orders_untied_variants(pair, hw):
    """``loop_key``: two setups alike but for the draft's placement, or the target's, cost different passes, so
    their keys differ. ``tables_digest``: draft variants enter in a canonical order unless two of them cost the same
    somewhere on the grid (GPU + PIM seconds, rows of one request or more), where the loop's tie rule (the
    lower variant) makes their order count."""
    slots, ctx_max, prompt = 4, 200.0, 64.0
    a, b = setup(hw, d=3, draft_mapping=GPU), setup(hw, d=3, draft_mapping=PIM_DRAFT)
    ta, tb = PassTables(a, pair, slots, ctx_max, prompt), PassTables(b, pair, slots, ctx_max, prompt)
    assert core.loop_key(a, ta, None) != core.loop_key(b, tb, None)
    assert core.loop_key(a, ta, None) == core.loop_key(a, ta, None, core.tables_digest(ta))
    # the verification's tables enter by what they are built from (their rows are costed as runs ask): the same
    # setup's tables built again give the same key, the target's attention placed elsewhere another
    assert core.loop_key(a, PassTables(a, pair, slots, ctx_max, prompt), None) == core.loop_key(a, ta, None)
    c = setup(hw, d=3, target_mapping=GPU, draft_mapping=GPU)
    assert core.loop_key(c, PassTables(c, pair, slots, ctx_max, prompt), None) != core.loop_key(a, ta, None)
    idle = [[9.0, 9.0], [1.0, 2.0]]  # row 0 (no request) is never read
    untied = ([[idle[0], [1.0, 0.0]], [idle[0], [2.0, 1.0]]], [[idle[0], [1.0, 3.0]], [idle[0], [0.5, 1.0]]])
    tied = ([[idle[0], [1.0, 0.0]], [idle[0], [2.0, 1.0]]], [[idle[0], [1.0, 3.0]], [idle[0], [0.0, 1.0]]])
    for (dg, dp), same in ((untied, True), (tied, False)):  # tied: 1 + 1 == 2 + 0 at one request, context 0
        swapped = _flat(dg[::-1], dp[::-1])
        assert (core.tables_digest(_flat(dg, dp)) == core.tables_digest(swapped)) == same


def test_replicas_already_run_are_taken_as_they_are_and_never_more_than_the_workload_has(pair, hw):
    """``replica_logs(done=...)``: logs of replicas already run stand for the workload's first replicas (all
    of them: nothing is run again); more than the workload has is an error naming both counts. Negative
    draft lengths are an error."""
    s = pooled(hw, eager=True, mb=1, pool=64)
    conf, later, acc, out, lengths = inputs(6, 1, 8)
    w = Workload(np.full(out.shape, 64.0), out, acc, lengths, conf, later)
    tables, reps = core.replica_logs(s, pair, w)
    again = core.replica_logs(s, pair, w, tables=tables, done=reps)[1]
    assert len(again) == 1 and again[0] is reps[0]
    with pytest.raises(SimError, match=r"^2 replicas already run of a workload of 1$"):
        core.replica_logs(s, pair, w, tables=tables, done=reps + reps)
    with pytest.raises(SimError, match=r"^draft_lengths must be >= 0 \(0: no draft\)$"):
        simulate_core(s, pair, dataclasses.replace(w, draft_lengths=lengths - 100))


def test_narrow_caps_what_the_loop_reads_in_a_byte_where_the_cap_fits_one():
    """``core.narrow``: values capped at ``cap``, uint8 up to a cap of 255 (the loop is compiled for it), int64
    above, where a byte would wrap (a pool's draft lengths up to 2 d + 1 with d >= 128)."""
    a = np.array([[0, 3, 255, 256, 70000]])
    got = core.narrow(a, 255)
    assert got.dtype == np.uint8 and got.tolist() == [[0, 3, 255, 255, 255]]
    got = core.narrow(a, 257)
    assert got.dtype == np.int64 and got.tolist() == [[0, 3, 255, 256, 257]]
