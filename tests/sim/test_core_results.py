"""The event core's bookkeeping after a run (``_result``, ``_window``, ``_union``): every number of a RunResult
recomputed by hand from the passes the replicas booked, the requests' finish times and the cost tables."""

import dataclasses
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import adsl.sim.core as core
from adsl.fitting.generator import running_product_lengths
from adsl.sim.batching import Continuous
from adsl.sim.core import _union, simulate_core
from adsl.sim.engine import SimError
from adsl.sim.timing import Schedule
from tests.sim.test_core import _pooled as _core_pooled
from tests.sim.test_core import _setup

PIM = {"fc": "gpu", "attention": "pim"}


def _pooled(hw, eager=True, trigger="idle", **kw):
    return _core_pooled(hw, eager, trigger, **kw)


PIM_DRAFT = {"fc": "pim", "attention": "pim"}
GPU = {"fc": "gpu", "attention": "gpu"}


def _split(setup, mb=2):
    return dataclasses.replace(setup, schedule=Schedule(mb, split="always"))


def _inputs(seed, x, n, out_lo=5, out_hi=40):
    rng = np.random.default_rng(seed)
    conf = rng.beta(5, 1, (x, n, 140)).astype(np.float32)
    acc = rng.random(conf.shape) < conf
    lengths = np.stack([running_product_lengths(c, 0.4, 9) for c in conf])
    out = rng.integers(out_lo, out_hi, (x, n))
    prompt = rng.integers(30, 90, (x, n)).astype(float)
    return prompt, out, acc, lengths, conf


def _run(monkeypatch, setup, pair, seed, n, serving=None, x=1, timelines=True, out=None, **kw):
    """Run the core and keep what it booked: (result, pass tables, replicas)."""
    seen = {}
    inner = core._result

    def spy(setup_, tables, replicas, serving_, timelines_):
        seen.update(tables=tables, replicas=replicas)
        return inner(setup_, tables, replicas, serving_, timelines_)

    monkeypatch.setattr(core, "_result", spy)
    prompt, out_, acc, lengths, conf = _inputs(seed, x, n)
    out = out_ if out is None else out
    sd = setup.decoding == "sd"
    res = simulate_core(
        setup,
        pair,
        prompt,
        out,
        acc if sd else None,
        lengths if sd else None,
        conf,
        conf,
        serving,
        timelines=timelines,
        force_events=True,
        **kw,
    )
    monkeypatch.undo()
    return res, seen["tables"], seen["replicas"]


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


def _steps(passes):
    """A job's passes one by one: a draft chain's block of arrays (variant, n, ctx per step) as its steps."""
    for table, v, n, ctx, q0, f in passes:
        if isinstance(n, np.ndarray):
            yield from ((table, int(a), int(b), float(c), q0, f) for a, b, c in zip(v, n, ctx, strict=True))
        else:
            yield table, v, n, ctx, q0, f


def _by_hand(tables, rep, lo, hi):
    """Energy, device and class times of a replica's passes, each job counted by its share in [lo, hi]."""
    energy, busy, cls = 0.0, {"gpu": 0.0, "pim": 0.0, "link": 0.0}, {}
    for _kind, s, e, passes in rep.jobs:
        assert e > s  # every booked pass takes time
        share = max(0.0, min(e, hi) - max(s, lo)) / (e - s)
        for p in _steps(passes):
            assert p[2] > 0  # no pass over zero requests is ever booked
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
    ("AD, 2 micro-batches, static", lambda hw: _split(_setup(hw, decoding="ad")), None),
    ("PIM-SD, 2 micro-batches, continuous", lambda hw: _split(_setup(hw)), Continuous(4, 3, True)),
    ("SADDLE-s, idle, continuous", lambda hw: _pooled(hw), Continuous(4, 2, True)),
    ("SADDLE-p, static, GPU-only", lambda hw: _pooled(hw, eager=False, system="dgx-a100"), None),
]


@pytest.mark.parametrize("name,make,serving", RUNS)
def test_energy_device_and_class_times_are_the_windowed_sum_of_the_pass_costs(
    models, hw, monkeypatch, name, make, serving
):
    """Energy, busy time per device and time per operator class are the passes' table costs, each job
    counted by the share of it inside the measured window (a fractional verification blended between
    its integer-q tables); every device key is there, also on a system without PIM."""
    setup = make(hw)
    res, tables, reps = _run(monkeypatch, setup, models.pair("OPT-66B"), 21, 6 if serving is None else 16, serving)
    assert set(res.busy_s) == {"gpu", "pim", "link"}, name
    fractional = partial = False
    for r, rep in enumerate(reps):
        lo, hi = res.window["start_s"][r], res.window["end_s"][r]
        energy, busy, cls = _by_hand(tables, rep, lo, hi)
        assert res.energy_j[r] == pytest.approx(energy, rel=1e-12), name
        for k, v in busy.items():
            assert res.busy_s[k][r] == pytest.approx(v, rel=1e-12, abs=1e-15), (name, k)
        assert set(res.class_s) == set(cls) and len(cls) > 1
        for k, v in cls.items():
            assert res.class_s[k][r] == pytest.approx(v, rel=1e-12, abs=1e-15), (name, k)
        fractional |= any(p[5] > 0 for j in rep.jobs for p in j[3])
        partial |= any(s < lo < e or s < hi < e for _, s, e, _ in rep.jobs)
    if not setup.system.pim:
        assert (res.busy_s["pim"] == 0).all()
    if setup.pool_tokens:
        assert fractional, name  # some verification ran a fractional q
    if serving is not None:
        assert partial, name  # some job straddles an edge of the window


def test_static_power_adds_power_times_the_measured_time(models, hw, monkeypatch):
    """With static power on, the energy is the passes' energy plus the system's static power times the
    measured time, for a static batch and a steady-state window alike."""
    pair = models.pair("OPT-66B")
    for serving in (None, Continuous(4, 3, True)):
        n = 6 if serving is None else 16
        base = _split(_setup(hw, decoding="ad"))
        dyn = _run(monkeypatch, base, pair, 5, n, serving)[0]
        res = _run(monkeypatch, dataclasses.replace(base, static_power=True), pair, 5, n, serving)[0]
        np.testing.assert_array_equal(res.time_s, dyn.time_s)
        assert (res.time_s != 1.0).all()
        np.testing.assert_allclose(res.energy_j, dyn.energy_j + base.system.static_power_w * dyn.time_s, rtol=1e-12)


@pytest.mark.parametrize("name,make,serving", RUNS)
def test_pass_counters_and_stage_times_follow_the_booked_jobs(models, hw, monkeypatch, name, make, serving):
    """Iterations count the verification (decode) passes ending inside the window, request rounds the
    requests they verify, drafted the draft tokens; completed counts the requests finishing inside it;
    total time is the last job's end; each stage's time is the union of its jobs in the window and the
    overlap is what the stages share."""
    setup = make(hw)
    n = 6 if serving is None else 16
    res, _, reps = _run(monkeypatch, setup, models.pair("OPT-66B"), 22, n, serving)
    stages = {"draft": ("draft", "eager"), "verify": ("verify", "decode"), "prefill": ("prefill",)}
    for r, rep in enumerate(reps):
        lo, hi = res.window["start_s"][r], res.window["end_s"][r]
        jobs = res.timelines[r]["jobs"]
        assert jobs == [j[:3] for j in rep.jobs]
        assert res.window["total_s"][r] == max(e for _, _, e in jobs)
        ver = [j for j in rep.jobs if j[0] in ("verify", "decode") and (serving is None or lo < j[2] <= hi)]
        assert res.iterations[r] == len(ver) > 0
        assert res.request_rounds[r] == sum(p[2] for j in ver for p in j[3])
        done = rep.t_done if serving is None else rep.t_done[(rep.t_done > lo) & (rep.t_done <= hi)]
        assert res.window["completed"][r] == done.size > 0
        if serving is None:
            drafted = sum(p[2] for j in rep.jobs if j[0] in ("draft", "eager") for p in _steps(j[3]))
            assert res.drafted[r] == drafted
            assert res.iterations[r] > 0 and min(j[3][0][2] for j in ver) == 1  # a pass over one request
            if setup.decoding == "ad":
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
        if setup.decoding == "sd":
            assert res.stage_s["draft"][r] > 0


def test_timelines_only_when_asked(models, hw, monkeypatch):
    res = _run(monkeypatch, _pooled(hw), models.pair("OPT-66B"), 3, 6, timelines=False)[0]
    assert res.timelines is None


@pytest.mark.parametrize(
    "slots,warmup,mb",
    [(4, 0, 2), (4, 1, 2), (4, 5, 2), (1, 2, 1), (3, 1, 1)],
)
def test_steady_state_window_runs_from_the_warmup_th_to_the_queue_running_dry(
    models, hw, monkeypatch, slots, warmup, mb
):
    """Continuous batching: the window opens at the warmup-th completion (at 0 without warm-up) and
    closes at the N - slots + 1-th completion, when a slot first finds the queue empty, recomputed
    from the requests' finish times."""
    n = 4 * slots
    res, _, reps = _run(monkeypatch, _pooled(hw, mb=mb), models.pair("OPT-66B"), 7, n, Continuous(slots, warmup, True))
    for r, rep in enumerate(reps):
        done = np.sort(rep.t_done)
        assert np.isfinite(done).all()
        start = done[warmup - 1] if warmup else 0.0
        assert res.window["start_s"][r] == start
        assert res.window["end_s"][r] == done[n - slots]
        assert res.time_s[r] == done[n - slots] - start


def test_one_pass_run_measures_from_zero_to_its_end(models, hw, monkeypatch):
    """Every slot's one request done in one verification: a single completion event, still a valid
    window from 0 to that pass's end."""
    res, _, reps = _run(
        monkeypatch,
        _pooled(hw, mb=1),
        models.pair("OPT-66B"),
        8,
        4,
        Continuous(4, 0, False),
        out=np.ones((1, 4), np.int64),
    )
    assert len(reps[0].events) == 1
    (verify,) = [j for j in reps[0].jobs if j[0] == "verify"]
    assert res.window["start_s"][0] == 0.0 and res.window["end_s"][0] == verify[2] > 0
    assert res.window["completed"][0] == 4


def test_windows_that_cannot_be_measured_say_why(models, hw):
    """A warm-up longer than the run, or one that ends with the window's closing completion, raises a
    SimError that names the problem."""
    pair = models.pair("OPT-66B")
    prompt, out, acc, lengths, conf = _inputs(9, 1, 4)
    setup = _pooled(hw, mb=1)
    early = "continuous batching: the run ended before its warm-up; raise requests_per_slot"
    with pytest.raises(SimError, match=f"^{re.escape(early)}$"):
        simulate_core(setup, pair, prompt, out, acc, lengths, conf, conf, Continuous(2, 5, True))
    # one slot: the window closes at the 4th completion, where a warm-up of 4 ends too
    empty = "continuous batching: empty steady-state window; raise simulation.batching.requests_per_slot"
    with pytest.raises(SimError, match=f"^{re.escape(empty)}$"):
        simulate_core(setup, pair, prompt, out, acc, lengths, conf, conf, Continuous(1, 4, True))


@pytest.mark.parametrize("warmup", [0, 2, 4, 5, 9])
def test_open_loop_window_runs_from_the_warmup_th_arrival_to_the_last(models, hw, warmup):
    """Open loop: the window opens at the warmup-th arrival (the last one where the warm-up covers every
    request) and closes at the last arrival."""
    pair = models.pair("OPT-66B")
    prompt, out, acc, lengths, conf = _inputs(10, 1, 5)
    arrivals = np.array([[0.0, 0.3, 0.7, 1.1, 1.6]])
    res = simulate_core(
        _pooled(hw), pair, prompt, out, acc, lengths, conf, conf, Continuous(2, warmup, True), arrivals=arrivals
    )
    assert res.window["start_s"][0] == arrivals[0, min(warmup, 4)]
    assert res.window["end_s"][0] == 1.6


_grid = st.integers(0, 40).map(lambda k: k / 4)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(_grid, _grid), max_size=8), _grid, _grid)
def test_union_is_the_covered_length_on_a_grid(intervals, lo, hi):
    """Endpoints on a quarter grid: the union clipped to [lo, hi] is the number of covered grid cells."""
    cells = sum(1 for k in range(40) if lo <= k / 4 < hi and any(s <= k / 4 and (k + 1) / 4 <= e for s, e in intervals))
    assert _union(intervals, lo, hi) == cells / 4


def test_union_of_back_to_back_intervals_is_one_stretch():
    """Jobs that follow each other without a gap form one busy stretch: its length end - start exactly,
    not a sum of pieces carrying their rounding."""
    assert _union([(0.2, 1.1), (0.1, 0.2)], 0.0, 2.0) == 1.1 - 0.1  # (0.2 - 0.1) + (1.1 - 0.2) is not
    assert _union([(0.2, 0.9), (0.1, 0.2), (0.3, 0.4)], 0.0, 1.0) == 0.9 - 0.1
