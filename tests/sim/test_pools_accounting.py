"""Bookkeeping of the round-based pooled engine (adsl.sim.pools) against independent computations: a
slot-by-slot scalar reference of every trigger (tokens, passes, drafted, wasted, pool size and the draft
steps the costs are read for), the event core where the two must agree (continuous batching, its
measured window and operator classes), and what prefill adds to a measured window."""

import signal
from contextlib import contextmanager

import numpy as np
import pytest

import adsl.sim.pools as pools
from adsl.fitting.generator import match_runs
from adsl.sim.batching import Continuous
from adsl.sim.core import simulate_core
from adsl.sim.engine import SimError, prefill_cost
from adsl.sim.pools import simulate_pooled
from tests.sim.test_core import _pooled, _streams
from tests.sim.test_pools import pooled_setup

PAIR = "OPT-66B"


@contextmanager
def _deadline(seconds):
    """Fail instead of hanging when a request never gets verified."""

    def boom(*_):
        raise TimeoutError("the round engine did not finish")

    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _slot_reference(runs, cont_runs, lengths, prompt, out, d, slots, eager, trigger):
    """One replica, scalar, round by round, with a pool that never overflows (each request's entry is
    all of it): ``slots`` slots served from the queue of requests in order. Returns per round: requests
    busy at its start, completions, verified requests and their summed context, pool tokens, drafted,
    wasted and emitted tokens, and the draft steps (count, summed context) before and during the pass."""
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
    rounds = []
    while any(s is not None for s in slot):
        rd = dict(n=sum(s is not None for s in slot), nv=0, cv=0.0, pool=0, drafted=0, wasted=0, emitted=0)
        rd["pre"] = np.zeros((d + 1, 2))  # per draft step: requests, summed context
        rd["over"] = np.zeros((d + 1, 2))
        done = []

        def steps(table, n, ctx):
            for j in range(n):
                table[j] += (1, ctx + j)

        for i, s in enumerate(slot):
            if s is None:
                continue
            full = min(int(lengths[s["req"], s["pos"]]), 2 * d + 1)
            fresh = min(full, d) if eager and not s["ready"] else 0
            if not eager:
                verifying, offered = True, min(full, d)
                steps(rd["pre"], offered, s["ctx"])
                rd["drafted"] += offered
            elif trigger == "complete":
                verifying, offered = True, (s["held"] if s["ready"] else fresh)
                steps(rd["pre"], fresh, s["ctx"])
                rd["drafted"] += fresh
            else:
                verifying = s["ready"] or fresh == 0
                offered = s["held"] if verifying else 0
                steps(rd["over"], fresh, s["ctx"])
                rd["drafted"] += fresh
            if not verifying:  # idle: drafting from a correction, catches the next pass
                s["held"], s["ready"], s["cont"] = fresh, True, False
                continue
            extra = max(0, min(full, offered + d + 1) - offered) if eager else 0
            steps(rd["over"], extra, s["ctx"] + offered)
            rd["drafted"] += extra
            lv = min(offered, d)
            run = int(cont_runs[s["req"], s["pos"]] if s["cont"] else runs[s["req"], s["pos"]])
            acc = min(run, lv)
            rd["nv"] += 1
            rd["cv"] += s["ctx"]
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
    return rounds


def _spy_draft_steps(monkeypatch):
    """Record the draft steps the round engine reads draft costs for: (rounds, X, 2 (d + 1)) counts and
    mean contexts, before the pass then during it."""
    seen = []
    real = pools.cost_tables

    class Spy:
        def __init__(self, table):
            self.table = table

        def lookup(self, n, c):
            seen.append((np.array(n), np.array(c)))
            return self.table.lookup(n, c)

    def spy(*args, **kw):
        tables = dict(real(*args, **kw))
        tables["draft"] = Spy(tables["draft"])
        return tables

    monkeypatch.setattr(pools, "cost_tables", spy)
    return seen


@pytest.mark.parametrize("eager,trigger", [(False, "complete"), (True, "complete"), (True, "idle")])
@pytest.mark.parametrize("serving", [None, Continuous(2, 0, prefill=False), Continuous(3, 2, prefill=False)])
def test_counts_and_draft_steps_follow_a_slot_by_slot_reference(models, hw, monkeypatch, eager, trigger, serving):
    """With a pool that never overflows each slot runs on its own, so the scalar reference fixes every
    round: tokens, passes (rounds that verify anybody), drafted and wasted tokens and the largest pool
    (static batch, or over the measured window with slots refilled from a queue), and the draft steps
    whose costs the round pays: requests drafting their j-th token and their mean context, before the
    pass and during it (the ``idle`` trigger overlaps eager drafting with drafting from a correction in
    one pass). Lengths include zeros (nothing above tau: an ``idle`` request joins the pass at once) and
    lengths beyond the 2 d + 1 cap."""
    d, n, x = 3, 6, 2
    pair = models.pair(PAIR)
    rng = np.random.default_rng(5)
    t = 60 + 4 * d + 4
    out = rng.integers(5, 40, (x, n))
    prompt = rng.integers(20, 70, (x, n)).astype(float)
    acc = rng.random((x, n, t)) < 0.7
    conf = np.ones((x, n, t), dtype=np.float32)
    lengths = np.where(rng.random((x, n, t)) < 0.3, 0, rng.integers(1, 2 * d + 4, (x, n, t)))
    slots = n if serving is None else serving.slots
    setup = pooled_setup(hw, d, pool=slots * (d + 1), eager=eager, trigger=trigger)
    seen = _spy_draft_steps(monkeypatch)
    with _deadline(60):
        res = simulate_pooled(setup, pair, prompt, out, acc, conf, lengths, serving)
    n_d, c_d = seen[0]
    for r in range(x):
        runs = match_runs(acc[r])
        ref = _slot_reference(runs, runs, lengths[r], prompt[r], out[r], d, slots, eager, trigger)
        assert len(ref) <= n_d.shape[0]  # the other replica may take more rounds: this one then idles
        empty = dict(n=0, nv=0, pool=0, drafted=0, wasted=0, emitted=0, done=0, pre=np.zeros((d + 1, 2)))
        ref += [{**empty, "over": np.zeros((d + 1, 2))} for _ in range(n_d.shape[0] - len(ref))]
        if serving is None:
            win = np.ones(len(ref), dtype=bool)
        else:
            before = np.cumsum([0] + [rd["done"] for rd in ref])[:-1]
            win = np.array([b >= serving.warmup and rd["n"] == slots for b, rd in zip(before, ref, strict=True)])
        inw = [rd for rd, w in zip(ref, win, strict=True) if w]
        assert res["tokens"][r] == sum(rd["emitted"] for rd in inw)
        assert res["iterations"][r] == (sum(rd["nv"] > 0 for rd in ref) if serving is None else win.sum())
        assert res["drafted"][r] == sum(rd["drafted"] for rd in inw)
        assert res["pool"]["wasted"][r] == sum(rd["wasted"] for rd in inw)
        assert res["pool"]["pool_max"][r] == max(rd["pool"] for rd in ref)
        assert res["drafted"].dtype.kind == res["pool"]["wasted"].dtype.kind == "i"  # token counts
        steps = np.array([np.concatenate([rd["pre"], rd["over"]]) for rd in ref])  # (rounds, 2 (d + 1), 2)
        np.testing.assert_array_equal(n_d[:, r], steps[..., 0])
        np.testing.assert_allclose(n_d[:, r] * c_d[:, r], steps[..., 1], rtol=1e-12)


def test_eager_rounds_take_no_longer_than_their_drafting_and_pass_in_sequence(models, hw):
    """A round of the Eager Pool overlaps the pass with drafting: it lasts at least its longer part and
    at most the two one after the other (the drafting runs on PIM, the pass's GPU work on its own device),
    so the reported overlap lies between 0 and the shorter stage."""
    pair = models.pair(PAIR)
    conf, acc = _streams(4, 1, 6, 120)
    out = np.random.default_rng(4).integers(10, 50, (1, 6))
    lengths = np.random.default_rng(5).integers(0, 10, conf.shape)
    for trigger in ("complete", "idle"):
        res = simulate_pooled(
            _pooled(hw, True, trigger, mb=1, pool=20), pair, np.full((1, 6), 64.0), out, acc, conf, lengths
        )
        st = res["stage_s"]
        assert 0 <= st["overlap"][0] <= min(st["draft"][0], st["verify"][0]) + 1e-12
        assert res["time_s"][0] == pytest.approx(st["draft"][0] + st["verify"][0] - st["overlap"][0], rel=1e-12)


def test_continuous_window_classes_and_prefill_follow_the_event_core_and_the_prefill_costs(models, hw):
    """One micro-batch without the Eager Pool under continuous batching: without prefill the measured
    window (where it starts, what completed in it) and the operator classes equal the event core's; with
    prefill the same rounds run, and energy, device and class times grow by exactly the prefill of the
    requests admitted in the window while the draft / verify overlap is unchanged; an all-rejecting Eager
    Pool wastes every token it drafts in the window."""
    pair = models.pair(PAIR)
    setup = _pooled(hw, False, mb=1, pool=20)
    conf, acc = _streams(10, 1, 16, 140)
    out = np.random.default_rng(10).integers(10, 60, (1, 16))
    prompt = np.random.default_rng(11).integers(30, 90, (1, 16)).astype(float)
    lengths = np.random.default_rng(12).integers(0, 9, conf.shape)
    plain = simulate_pooled(setup, pair, prompt, out, acc, conf, lengths, Continuous(4, 3, False))
    ev = simulate_core(setup, pair, prompt, out, acc, lengths, conf, conf, Continuous(4, 3, False))
    for k in ("start_s", "end_s", "completed", "total_s", "total_tokens"):
        np.testing.assert_allclose(ev.window[k], plain["window"][k], rtol=1e-9, err_msg=k)
    assert plain["window"]["start_s"][0] > 0 and plain["window"]["completed"][0] < 16
    assert set(ev.class_s) == set(plain["class_s"])
    for k in ev.class_s:
        np.testing.assert_allclose(ev.class_s[k], plain["class_s"][k], rtol=1e-9, err_msg=k)

    filled = simulate_pooled(setup, pair, prompt, out, acc, conf, lengths, Continuous(4, 3, True))
    window = np.cumsum(filled["log"]["done"], 0) - filled["log"]["done"] >= 3
    window &= filled["log"]["n"] == 4
    fill = prefill_cost(setup, pair, filled["log"]["admitted"], float(prompt.mean()))
    assert (fill.energy_j[~window] > 0).any()  # prefill outside the window must not count
    np.testing.assert_allclose(filled["energy_j"] - plain["energy_j"], (fill.energy_j * window).sum(0), rtol=1e-9)
    for got, base, add in (
        (filled["busy_s"], plain["busy_s"], fill.busy_s),
        (filled["class_s"], plain["class_s"], fill.by_class_s),
    ):
        assert set(got) == set(base) | set(add)
        for k in got:
            want = base.get(k, 0.0) + (add[k] * window).sum(0) if k in add else base[k]
            np.testing.assert_allclose(got[k], want, rtol=1e-9, err_msg=k)
    np.testing.assert_allclose(filled["stage_s"]["overlap"], plain["stage_s"]["overlap"], rtol=1e-9, atol=1e-12)

    rejects = np.zeros_like(acc)
    eager = simulate_pooled(
        _pooled(hw, True, mb=1, pool=20), pair, prompt, out, rejects, conf, lengths, Continuous(4, 3)
    )
    assert eager["pool"]["wasted"][0] == eager["drafted"][0] > 0


def test_too_short_acceptance_streams_are_rejected_with_the_length_needed(models, hw):
    """The engine reads up to 4 d + 4 positions past the longest output: one position fewer is refused
    with a message that names both lengths."""
    pair = models.pair(PAIR)
    d = 3
    out = np.array([[20, 30]])
    need = 30 + 4 * d + 4
    setup = pooled_setup(hw, d, pool=16)
    for t, ok in ((need - 1, False), (need, True)):
        conf, acc = _streams(1, 1, 2, t)
        lengths = np.full(conf.shape, 2)
        if ok:
            assert simulate_pooled(setup, pair, np.full((1, 2), 64.0), out, acc, conf, lengths)["tokens"][0] == 50
            continue
        with pytest.raises(SimError, match=rf"^acceptance streams of {t} positions; need >= {need}$"):
            simulate_pooled(setup, pair, np.full((1, 2), 64.0), out, acc, conf, lengths)
