"""A run's result from the replicas' logs (``adsl.sim.result``): every number of a RunResult recomputed by
hand from the jobs and passes the loop booked (``timelines=True`` jobs, the ``ReplicaLog``'s passes) and the
cost tables, the measured window, and ``union_length``."""

import dataclasses
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import adsl.sim.core as core
from adsl.settings import Continuous, MicroBatching
from adsl.sim import loop, result
from adsl.sim.core import simulate_core
from adsl.sim.result import POOL_STATS, ReplicaLog, pass_groups, throughput, window
from adsl.sim.setup import SimError
from adsl.sim.workload import Workload
from tests.sim.builders import inputs, logged, pooled, setup, union

# a run and its accounting warn of nothing: a job of no time (free drafting) or a placement counter of no
# passes (AD has no draft) is a value, not a 0 / 0 for numpy to warn about
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")
PAIR = "OPT-66B"
RESULT_ARRAYS = ("time_s", "energy_j", "tokens", "iterations", "drafted", "request_rounds")
WINDOW_KEYS = {"start_s", "end_s", "completed", "total_s", "total_tokens"}


def _split(setup_, mb=2):
    return dataclasses.replace(setup_, micro_batching=MicroBatching(mb, split="always"))


def _saddle_s(hw, **kw):
    return pooled(hw, True, "idle", **kw)


def _inputs(seed, x, n):
    """Prompts of 30..89 tokens, outputs, bool acceptance streams, running-product lengths, confidences."""
    conf, _, acc, out, lengths = inputs(seed, x, n)
    prompt = np.random.default_rng(seed).integers(30, 90, (x, n)).astype(float)
    return prompt, out, acc, lengths, conf


def _run(monkeypatch, setup_, pair, seed, n, serving=None, x=1, timelines=True, out=None, **kw):
    """Run the core and keep what it booked: (result, pass tables, replica logs)."""
    prompt, out_, acc, lengths, conf = _inputs(seed, x, n)
    sd = setup_.decoding == "sd"
    work = Workload(prompt, out_ if out is None else out, acc if sd else None, lengths if sd else None, conf, conf)
    return logged(monkeypatch, setup_, pair, work, serving, timelines=timelines, **kw)


def _pass_cost(tables, table, variant, n, ctx, q0, f):
    """One pass's cost as a scalar look-up: a verification at a fractional tokens-per-request q0 + f is
    the linear blend of the integer-q tables around it."""
    if table == "verify":
        parts = [(tables.verify[variant][q0 - 1], 1.0 - f), (tables.verify[variant][q0], f)] if f else []
        parts = parts or [(tables.verify[variant][q0 - 1], 1.0)]
    elif table == "decode":
        parts = [(tables.decode, 1.0)]
    else:
        parts = [({"draft": tables.draft, "prefill": tables.prefill}[table][variant], 1.0)]
    energy, busy, cls = 0.0, {}, {}
    for pt, w in parts:
        c = pt.table.lookup(n, ctx)
        energy += w * float(c.energy_j)
        for k, v in c.busy_s.items():
            busy[k] = busy.get(k, 0.0) + w * float(v)
        for k, v in c.by_class_s.items():
            cls[k] = cls.get(k, 0.0) + w * float(v)
    return energy, busy, cls


def _passes(rep):
    """The replica's passes one by one: (job, table, variant, n, ctx, q0, f)."""
    for i in range(rep.pass_job.size):
        yield (
            int(rep.pass_job[i]),
            loop.TABLES[rep.pass_table[i]],
            int(rep.pass_variant[i]),
            int(rep.pass_n[i]),
            float(rep.pass_ctx[i]),
            int(rep.pass_q0[i]),
            float(rep.pass_f[i]),
        )


def _by_hand(tables, rep, jobs, lo, hi):
    """Energy, device and class times of a replica's passes, each counted by its job's share in [lo, hi]."""
    energy, busy, cls = 0.0, {"gpu": 0.0, "pim": 0.0, "link": 0.0}, {}
    for job, *p in _passes(rep):
        _, s, e = jobs[job]
        assert e > s  # every booked pass takes time
        assert p[2] > 0  # no pass over zero requests is ever booked
        share = max(0.0, min(e, hi) - max(s, lo)) / (e - s)
        en, b, c = _pass_cost(tables, *p)
        energy += share * en
        for k, v in b.items():
            busy[k] += share * v
        for k, v in c.items():
            cls[k] = cls.get(k, 0.0) + share * v
    return energy, busy, cls


def _brute_union(intervals, lo, hi):
    """Union length by sweeping the elementary pieces between all endpoints."""
    cuts = sorted({lo, hi} | {min(max(t, lo), hi) for iv in intervals for t in iv})
    return sum(b - a for a, b in zip(cuts, cuts[1:], strict=False) if any(s <= a and b <= e for s, e in intervals))


RUNS = [
    ("AD, 2 micro-batches, static", lambda hw: _split(setup(hw, decoding="ad")), None),
    ("PIM-SD, 2 micro-batches, continuous", lambda hw: _split(setup(hw)), Continuous(4, 3, True)),
    ("SADDLE-s, idle, continuous", lambda hw: _saddle_s(hw), Continuous(4, 2, True)),
    ("SADDLE-p, static, GPU-only", lambda hw: pooled(hw, eager=False, system="dgx-a100"), None),
]


@pytest.mark.parametrize("name,make,serving", RUNS)
def test_energy_device_and_class_times_are_the_windowed_sum_of_the_pass_costs(
    pair, hw, monkeypatch, name, make, serving
):
    """Energy, busy time per device and time per operator class are the passes' table costs, each pass
    counted by the share of its job inside the measured window (a fractional verification blended
    between its integer-q tables); every device key is there, also on a system without PIM."""
    setup_ = make(hw)
    res, tables, reps = _run(monkeypatch, setup_, pair, 21, 6 if serving is None else 16, serving)
    assert set(res.busy_s) == {"gpu", "pim", "link"}, name
    fractional = partial = False
    for r, rep in enumerate(reps):
        lo, hi = res.window["start_s"][r], res.window["end_s"][r]
        jobs = res.timelines[r]["jobs"]
        energy, busy, cls = _by_hand(tables, rep, jobs, lo, hi)
        assert res.energy_j[r] == pytest.approx(energy, rel=1e-12), name
        for k, v in busy.items():
            assert res.busy_s[k][r] == pytest.approx(v, rel=1e-12, abs=1e-15), (name, k)
        assert set(res.class_s) == set(cls) and len(cls) > 1
        for k, v in cls.items():
            assert res.class_s[k][r] == pytest.approx(v, rel=1e-12, abs=1e-15), (name, k)
        fractional |= any(p[6] > 0 for p in _passes(rep))
        partial |= any(s < lo < e or s < hi < e for _, s, e in jobs)
    if not setup_.system.pim:
        assert (res.busy_s["pim"] == 0).all()
    if setup_.pool_tokens:
        assert fractional, name  # some verification ran a fractional q
    if serving is not None:
        assert partial, name  # some job straddles an edge of the window


@pytest.mark.parametrize("name,make,serving", RUNS)
def test_each_group_of_passes_adds_up_as_one_float64_sum_to_the_bit(pair, hw, monkeypatch, name, make, serving):
    """A group's passes (one table, variant and q) cost as numpy sums one float64 array of their look-ups
    times their weights (pairwise, ``CostTable.sums``), to the bit: not one by one, as an object array adds."""
    setup_ = make(hw)
    res, tables, reps = _run(monkeypatch, setup_, pair, 21, 6 if serving is None else 16, serving)
    lookup = {"draft": tables.draft, "prefill": tables.prefill}
    largest = 0
    for r, rep in enumerate(reps):
        energy, busy = 0.0, dict.fromkeys(res.busy_s, 0.0)
        for (table, variant, q0), (n, ctx, f, w) in pass_groups(rep, res.window["start_s"][r], res.window["end_s"][r]):
            largest = max(largest, n.size)
            if table == "verify":
                cut = tables.verify[variant]
                parts = [(cut[q0 - 1], 1 - f)] + ([(cut[min(q0, len(cut) - 1)], f)] if (f > 0).any() else [])
            else:
                parts = [(tables.decode if table == "decode" else lookup[table][variant], np.ones(n.size))]
            for pt, wt in parts:
                c = pt.table.lookup(n, ctx)
                energy += float((c.energy_j * wt * w).sum())
                for k, v in c.busy_s.items():
                    busy[k] += float((v * wt * w).sum())
        if setup_.static_power:
            energy += setup_.system.static_power_w * res.time_s[r]
        assert res.energy_j[r] == energy, name
        assert {k: res.busy_s[k][r] for k in busy} == busy, name
    assert largest > 8, name  # numpy adds arrays of more than 8 pairwise: one by one would differ


@pytest.mark.parametrize("name,make,serving", RUNS)
def test_pass_groups_give_every_pass_once_with_its_jobs_share_of_the_window(pair, hw, monkeypatch, name, make, serving):
    """``pass_groups`` of a ReplicaLog: every pass over some requests whose job reaches into the window,
    once, under its (table, variant, q0), groups in the order they first appear, rows in booking order."""
    res, _, (rep,) = _run(monkeypatch, make(hw), pair, 21, 6 if serving is None else 16, serving)
    lo, hi = res.window["start_s"][0], res.window["end_s"][0]
    jobs = res.timelines[0]["jobs"]
    want = {}
    for job, table, v, n, ctx, q0, f in _passes(rep):
        _, s, e = jobs[job]
        share = max(0.0, min(e, hi) - max(s, lo)) / (e - s)
        if share > 0:
            want.setdefault((table, v, q0), []).append((n, ctx, f, share))
    groups = pass_groups(rep, lo, hi)
    assert [key for key, _ in groups] == list(want)
    for key, (n, ctx, f, share) in groups:
        wn, wctx, wf, wshare = (np.array(c) for c in zip(*want[key], strict=True))
        np.testing.assert_array_equal(n, wn, err_msg=str((name, key)))
        np.testing.assert_array_equal(ctx, wctx)
        np.testing.assert_array_equal(f, wf)
        np.testing.assert_allclose(share, wshare, rtol=1e-15, err_msg=str((name, key)))


def test_static_power_adds_power_times_the_measured_time(pair, hw, monkeypatch):
    """With static power on, the energy is the passes' energy plus the system's static power times the
    measured time, for a static batch and a steady-state window alike."""
    for serving in (None, Continuous(4, 3, True)):
        n = 6 if serving is None else 16
        base = _split(setup(hw, decoding="ad"))
        dyn = _run(monkeypatch, base, pair, 5, n, serving)[0]
        res = _run(monkeypatch, dataclasses.replace(base, static_power=True), pair, 5, n, serving)[0]
        np.testing.assert_array_equal(res.time_s, dyn.time_s)
        assert (res.time_s != 1.0).all() and base.system.static_power_w > 0
        np.testing.assert_allclose(res.energy_j, dyn.energy_j + base.system.static_power_w * dyn.time_s, rtol=1e-12)


@pytest.mark.parametrize("name,make,serving", RUNS)
def test_pass_counters_and_stage_times_follow_the_booked_jobs(pair, hw, monkeypatch, name, make, serving):
    """Iterations count the verification (decode) passes ending inside the window, request rounds the
    requests they verify, drafted the draft tokens; completed counts the requests finishing inside it;
    total time is the last job's end; each stage's time is the union of its jobs in the window and the
    overlap is what the stages share."""
    setup_ = make(hw)
    n = 6 if serving is None else 16
    res, _, reps = _run(monkeypatch, setup_, pair, 22, n, serving)
    stages = {"draft": ("draft", "eager"), "verify": ("verify", "decode"), "prefill": ("prefill",)}
    for r, rep in enumerate(reps):
        lo, hi = res.window["start_s"][r], res.window["end_s"][r]
        jobs = res.timelines[r]["jobs"]
        assert jobs == [(loop.KINDS[k], s, e) for k, s, e in zip(rep.job_kind, rep.job_start, rep.job_end, strict=True)]
        assert res.window["total_s"][r] == max(e for _, _, e in jobs)
        ver = {i for i, (k, _, e) in enumerate(jobs) if k in ("verify", "decode") and (serving is None or lo < e <= hi)}
        assert res.iterations[r] == len(ver) > 0
        passes = list(_passes(rep))
        assert res.request_rounds[r] == sum(p[3] for p in passes if p[0] in ver)
        done = rep.t_done if serving is None else rep.t_done[(rep.t_done > lo) & (rep.t_done <= hi)]
        assert res.window["completed"][r] == done.size > 0
        if serving is None:
            assert res.drafted[r] == sum(p[3] for p in passes if p[1] == "draft")
            assert min(p[3] for p in passes if p[0] in ver) == 1  # a pass over one request
            if setup_.decoding == "ad":
                assert res.request_rounds[r] == res.tokens[r] == rep.out.sum() and res.drafted[r] == 0
        spans = {k: [(s, e) for kind, s, e in jobs if kind in kinds] for k, kinds in stages.items()}
        total = 0.0
        for k, iv in spans.items():
            assert res.stage_s[k][r] == pytest.approx(_brute_union(iv, lo, hi), rel=1e-9, abs=1e-15), (name, k)
            total += res.stage_s[k][r]
        every = _brute_union([iv for v in spans.values() for iv in v], lo, hi)
        assert res.stage_s["overlap"][r] == pytest.approx(total - every, rel=1e-9, abs=1e-12), name
        if serving is not None:
            assert res.stage_s["prefill"][r] > 0 and res.stage_s["verify"][r] > 0
        if setup_.decoding == "sd":
            assert res.stage_s["draft"][r] > 0


@pytest.mark.parametrize("name,make,serving", RUNS)
def test_every_field_is_a_float_array_per_replica(pair, hw, monkeypatch, name, make, serving):
    """Counts and times alike are float arrays of one value a replica; the window, stage and pool
    dicts carry their fixed keys; a closed loop reports no requests."""
    x = 2
    res = _run(monkeypatch, make(hw), pair, 23, 6 if serving is None else 16, serving, x=x)[0]
    for f in RESULT_ARRAYS:
        assert getattr(res, f).dtype == float and getattr(res, f).shape == (x,), (name, f)
    for f, keys in (("window", WINDOW_KEYS), ("stage_s", {"draft", "verify", "prefill", "overlap"})):
        assert set(getattr(res, f)) == keys, (name, f)
    assert set(res.pool) == set(POOL_STATS)
    for f in ("busy_s", "class_s", "stage_s", "window", "pool"):
        for k, v in getattr(res, f).items():
            assert v.dtype == float and v.shape == (x,), (name, f, k)
    assert res.requests is None and len(res.timelines) == x
    assert res.placement["micro_batches"] == 2.0


@pytest.mark.parametrize("name,make,serving", RUNS)
def test_replicas_accounted_for_in_their_threads_give_the_result_of_an_accounting_after_them(
    pair, hw, monkeypatch, name, make, serving
):
    """``simulate_core`` accounts for each replica in the thread that ran it (its log carries its ``Account``):
    the result is the one ``run_result`` gives from the bare logs, every value to the bit and every dict's keys
    in the same order (a device or class first used by a later replica comes after the earlier ones')."""
    s = make(hw)
    _, tables, reps = _run(monkeypatch, s, pair, 31, 6 if serving is None else 16, serving, x=3)
    assert all(isinstance(rep.account, result.Account) for rep in reps)
    bare = [dataclasses.replace(rep, account=None) for rep in reps]
    got, want = (result.run_result(s, tables, logs, serving, False) for logs in (reps, bare))
    for f in RESULT_ARRAYS:
        assert getattr(got, f).tobytes() == getattr(want, f).tobytes(), (name, f)
    for f in ("busy_s", "class_s", "stage_s", "window", "pool"):
        assert list(getattr(got, f)) == list(getattr(want, f)), (name, f)
        assert all(getattr(got, f)[k].tobytes() == v.tobytes() for k, v in getattr(want, f).items()), (name, f)
    assert got.placement == want.placement and list(got.placement) == list(want.placement)


@pytest.mark.parametrize("name,make,serving", RUNS)
def test_the_search_s_throughput_is_the_result_s_to_the_bit(pair, hw, monkeypatch, name, make, serving):
    """What the search compares candidates by (``throughput``, without the rest of the accounting) is the
    full result's throughput, replica by replica."""
    res, _, reps = _run(monkeypatch, make(hw), pair, 31, 6 if serving is None else 16, serving, x=3)
    got = throughput(reps, serving)
    assert got.tobytes() == res.throughput_tok_s.tobytes(), name
    assert np.unique(got).size == 3  # replicas differ: the test tells them apart


def test_timelines_only_when_asked(pair, hw, monkeypatch):
    res = _run(monkeypatch, _saddle_s(hw), pair, 3, 6, timelines=False)[0]
    assert res.timelines is None
    # a result made again from logs already run (the search's): no timeline unless asked either
    _, tables, reps = _run(monkeypatch, _saddle_s(hw), pair, 3, 6)
    assert core.result_of(_saddle_s(hw), tables, reps).timelines is None
    assert len(core.result_of(_saddle_s(hw), tables, reps, timelines=True).timelines) == len(reps)


@pytest.mark.parametrize(
    "slots,warmup,mb",
    [(4, 0, 2), (4, 1, 2), (4, 5, 2), (1, 2, 1), (3, 1, 1)],
)
def test_steady_state_window_runs_from_the_warmup_th_to_the_queue_running_dry(pair, hw, monkeypatch, slots, warmup, mb):
    """Continuous batching: the window opens at the warmup-th completion (at 0 without warm-up) and
    closes at the N - slots + 1-th completion, when a slot first finds the queue empty, recomputed
    from the requests' finish times."""
    n = 4 * slots
    res, _, reps = _run(monkeypatch, _saddle_s(hw, mb=mb), pair, 7, n, Continuous(slots, warmup, True))
    for r, rep in enumerate(reps):
        done = np.sort(rep.t_done)
        assert np.isfinite(done).all()
        start = done[warmup - 1] if warmup else 0.0
        assert res.window["start_s"][r] == start
        assert res.window["end_s"][r] == done[n - slots]
        assert res.time_s[r] == done[n - slots] - start


def test_one_pass_run_measures_from_zero_to_its_end(pair, hw, monkeypatch):
    """Every slot's one request done in one verification: a single completion event, still a valid
    window from 0 to that pass's end."""
    res, _, reps = _run(
        monkeypatch,
        _saddle_s(hw, mb=1),
        pair,
        8,
        4,
        Continuous(4, 0, False),
        out=np.ones((1, 4), np.int64),
    )
    assert reps[0].event_t.size == 1
    (verify,) = [j for j in res.timelines[0]["jobs"] if j[0] == "verify"]
    assert res.window["start_s"][0] == 0.0 and res.window["end_s"][0] == verify[2] > 0
    assert res.window["completed"][0] == 4


def test_windows_that_cannot_be_measured_say_why(pair, hw):
    """A warm-up longer than the run, or one that ends with the window's closing completion, raises a
    SimError that names the problem."""
    prompt, out, acc, lengths, conf = _inputs(9, 1, 4)
    setup_ = _saddle_s(hw, mb=1)
    early = "continuous batching: the run ended before its warm-up; raise requests_per_slot"
    with pytest.raises(SimError, match=f"^{re.escape(early)}$"):
        simulate_core(setup_, pair, Workload(prompt, out, acc, lengths, conf, conf), Continuous(2, 5, True))
    # one slot: the window closes at the 4th completion, where a warm-up of 4 ends too
    empty = "continuous batching: empty steady-state window; raise simulation.batching.requests_per_slot"
    with pytest.raises(SimError, match=f"^{re.escape(empty)}$"):
        simulate_core(setup_, pair, Workload(prompt, out, acc, lengths, conf, conf), Continuous(1, 4, True))


@pytest.mark.parametrize("warmup", [0, 2, 4, 5, 9])
def test_open_loop_window_runs_from_the_warmup_th_arrival_to_the_last(pair, hw, warmup):
    """Open loop: the window opens at the warmup-th arrival (the last one where the warm-up covers every
    request) and closes at the last arrival."""
    prompt, out, acc, lengths, conf = _inputs(10, 1, 5)
    arrivals = np.array([[0.0, 0.3, 0.7, 1.1, 1.6]])
    res = simulate_core(
        _saddle_s(hw),
        pair,
        Workload(prompt, out, acc, lengths, conf, conf, arrivals=arrivals),
        Continuous(2, warmup, True),
    )
    assert res.window["start_s"][0] == arrivals[0, min(warmup, 4)]
    assert res.window["end_s"][0] == 1.6


def test_the_open_loop_reports_every_request_and_the_closed_loop_none(pair, hw):
    """One micro-batch without a pool, open loop: every request's arrival, admission, first token and
    finish as float arrays (integer arrival times included), admitted once arrived; the closed loop
    reports none and keeps no timelines unless asked."""
    n = 6
    _, _, acc, _, _ = inputs(4, 1, n, 80)
    prompt, out = np.full((1, n), 64.0), np.full((1, n), 10)
    s = setup(hw)
    serving = Continuous(2, 1, False)
    arrivals = np.array([[0, 0, 1, 1, 2, 3]])
    res = simulate_core(s, pair, Workload(prompt, out, acc, arrivals=arrivals), serving=serving)
    assert res.placement["micro_batches"] == 1.0
    np.testing.assert_array_equal(res.requests["arrival"], arrivals[0])
    np.testing.assert_array_equal(res.requests["out"], out[0])
    np.testing.assert_array_equal(res.requests["replica"], np.zeros(n))
    for k in ("arrival", "admitted", "first_token", "finished", "out"):
        assert res.requests[k].dtype == float and res.requests[k].shape == (n,), k
    assert np.isfinite(res.requests["finished"]).all()
    assert (res.requests["admitted"] >= res.requests["arrival"]).all()
    assert (res.requests["first_token"] >= res.requests["admitted"]).all()
    assert (res.requests["finished"] > res.requests["first_token"]).all()
    closed = simulate_core(s, pair, Workload(prompt, out, acc), serving=serving)
    assert closed.requests is None and closed.timelines is None


# -- window and pass_groups of a hand-made log ------------------------------------------------------------


def _log(jobs=(), passes=(), events=(), out=(1,), slots=1, arrival=None):
    """A ReplicaLog from (kind, start, end) jobs, (job, table, variant, n, ctx, q0, f) passes and
    (t, emitted, completed) events."""

    def cols(rows, width, dtypes):
        a = list(zip(*rows, strict=True)) or [()] * width
        return [np.array(c, dt) for c, dt in zip(a, dtypes, strict=True)]

    kind, start, end = cols([(loop.KINDS.index(k), s, e) for k, s, e in jobs], 3, (np.int64, float, float))
    p = cols(
        [(j, loop.TABLES.index(t), v, n, c, q, f) for j, t, v, n, c, q, f in passes],
        7,
        (np.int64, np.int64, np.int64, np.int64, float, np.int64, float),
    )
    ev = cols(events, 3, (float, float, np.int64))
    out = np.array(out, np.int64)
    none = np.full(out.size, np.nan)
    empty = (np.zeros(0, np.int64), np.zeros(0), np.zeros(0), np.zeros(0, np.int64))
    rounds = (np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.int64))
    return ReplicaLog(
        kind, start, end, *p, *ev, *rounds, empty, np.zeros(9, np.int64), none, none, none, out, arrival, slots
    )


def test_pass_groups_of_a_hand_made_log():
    """Shares of [lo, hi] per job (a job of no length inside it counts whole), passes over nobody and jobs
    outside the window dropped, groups by (table, variant, q0) in order of first appearance."""
    rep = _log(
        jobs=[("draft", 0.0, 2.0), ("verify", 2.0, 4.0), ("prefill", 3.0, 3.0), ("verify", 5.0, 6.0)],
        passes=[
            (0, "draft", 0, 3, 10.0, 0, 0.0),
            (0, "draft", 0, 0, 11.0, 0, 0.0),  # over nobody
            (1, "verify", 1, 3, 10.0, 2, 0.5),
            (0, "draft", 0, 2, 12.0, 0, 0.0),
            (2, "prefill", 1, 4, 0.0, 0, 0.0),
            (3, "verify", 1, 3, 13.0, 2, 0.0),  # outside the window
            (1, "verify", 0, 1, 9.0, 3, 0.0),
        ],
    )
    groups = pass_groups(rep, 1.5, 5.0)
    assert [key for key, _ in groups] == [("draft", 0, 0), ("verify", 1, 2), ("prefill", 1, 0), ("verify", 0, 3)]
    rows = {key: [tuple(a.tolist()) for a in arrays] for key, arrays in groups}
    assert rows[("draft", 0, 0)] == [(3, 2), (10.0, 12.0), (0.0, 0.0), (0.25, 0.25)]
    assert rows[("verify", 1, 2)] == [(3,), (10.0,), (0.5,), (1.0,)]
    assert rows[("prefill", 1, 0)] == [(4,), (0.0,), (0.0,), (1.0,)]
    assert rows[("verify", 0, 3)] == [(1,), (9.0,), (0.0,), (1.0,)]
    # a job that ends where the window opens, or starts where it closes, has no share in it
    later = pass_groups(rep, 2.0, 5.0)
    assert [key for key, _ in later] == [("verify", 1, 2), ("prefill", 1, 0), ("verify", 0, 3)]
    # as many groups as passes: each pass its own
    apart = _log(
        jobs=[("draft", 0.0, 1.0)], passes=[(0, "draft", 0, 1, 1.0, 0, 0.0), (0, "prefill", 0, 2, 0.0, 0, 0.0)]
    )
    assert [(key, arrays[0].tolist()) for key, arrays in pass_groups(apart, 0.0, 1.0)] == [
        (("draft", 0, 0), [1]),
        (("prefill", 0, 0), [2]),
    ]


def test_window_of_a_hand_made_log():
    """Static: the whole run. Continuous: from the warmup-th completion (events in time order, whatever
    order they were logged in) to the N - slots + 1-th. Open loop: warmup-th arrival to the last."""
    events = [(2.0, 3.0, 1), (1.0, 2.0, 1), (3.0, 2.0, 0), (4.0, 4.0, 2), (6.0, 1.0, 1)]
    rep = _log(jobs=[("verify", 0.0, 6.5)], events=events, out=(1, 1, 1, 1, 1), slots=2)
    assert window(rep, None) == (0.0, 6.5)
    assert window(rep, Continuous(2, 0)) == (0.0, 4.0)  # 4 completions by t = 4: the queue runs dry
    assert window(rep, Continuous(2, 1)) == (1.0, 4.0)
    assert window(rep, Continuous(2, 2)) == (2.0, 4.0)
    with pytest.raises(SimError, match="empty steady-state window"):
        window(rep, Continuous(2, 4))
    with pytest.raises(SimError, match="ended before its warm-up"):
        window(rep, Continuous(2, 6))
    opened = dataclasses.replace(rep, arrival=np.array([0.0, 0.5, 1.0, 2.0, 2.5]))
    assert window(opened, Continuous(2, 1)) == (0.5, 2.5)
    assert window(opened, Continuous(2, 9)) == (2.5, 2.5)
    assert window(_log(), None) == (0.0, 0.0)


# -- union_length ------------------------------------------------------------------------------------------


_grid = st.integers(0, 40).map(lambda k: k / 4)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(_grid, _grid), max_size=8), _grid, _grid)
def test_union_is_the_covered_length_on_a_grid(intervals, lo, hi):
    """Endpoints on a quarter grid: the union clipped to [lo, hi] is the number of covered grid cells."""
    cells = sum(1 for k in range(40) if lo <= k / 4 < hi and any(s <= k / 4 and (k + 1) / 4 <= e for s, e in intervals))
    assert union(intervals, lo, hi) == cells / 4


def test_union_of_back_to_back_intervals_is_one_stretch():
    """Jobs that follow each other without a gap form one busy stretch: its length end - start exactly,
    not a sum of pieces carrying their rounding."""
    assert union([(0.2, 1.1), (0.1, 0.2)], 0.0, 2.0) == 1.1 - 0.1  # (0.2 - 0.1) + (1.1 - 0.2) is not
    assert union([(0.2, 0.9), (0.1, 0.2), (0.3, 0.4)], 0.0, 1.0) == 0.9 - 0.1


def test_concat_joins_runs_in_order_and_weights_their_shares_by_replicas(pair, hw):
    """``concat``: open-loop runs of 1, 2 and 1 replicas as one run of 4: every array in order, request
    records with each run's replicas numbered after the runs before it, every replica's timeline, and a
    share such as the placement weighted by each run's replicas. A run without requests records (closed
    loop) stays without them."""
    base = setup(hw, decoding="ad")
    runs = []
    for seed, x in enumerate((1, 2, 1)):
        rng = np.random.default_rng(seed)
        out = rng.integers(3, 9, (x, 4))
        arrivals = np.sort(rng.random((x, 4)), axis=1)
        work = Workload(np.full((x, 4), 64.0), out, arrivals=arrivals)
        runs.append(simulate_core(base, pair, work, Continuous(2, 0, prefill=False), timelines=True))
    runs = [dataclasses.replace(r, placement={"share": v}) for r, v in zip(runs, (0.0, 1.0, 0.0), strict=True)]
    one = result.concat(runs)
    np.testing.assert_array_equal(one.time_s, np.concatenate([r.time_s for r in runs]))
    np.testing.assert_array_equal(one.requests["replica"], np.repeat([0, 1, 2, 3], 4))
    np.testing.assert_array_equal(one.requests["finished"], np.concatenate([r.requests["finished"] for r in runs]))
    assert len(one.timelines) == 4 and one.timelines[3] == runs[2].timelines[0]
    assert one.placement == {"share": 0.5}  # (0 x 1 + 1 x 2 + 0 x 1) / 4 replicas
    for f, k in (("busy_s", "pim"), ("window", "end_s")):
        np.testing.assert_array_equal(getattr(one, f)[k], np.concatenate([getattr(r, f)[k] for r in runs]))
    assert result.concat(runs[:1]) is runs[0]
    closed = [simulate_core(base, pair, Workload(np.full((1, 2), 64.0), np.full((1, 2), 4))) for _ in range(2)]
    assert result.concat(closed).requests is None
