"""The event core's set-up around the loop: input checks, the dispatch to the vectorized engine, the
micro-batch decision, the pass tables and the conversion of the round engines' results."""

import dataclasses
import math

import numpy as np
import pytest

from adsl.fitting.generator import CONTINUED, FIRST, running_product_lengths
from adsl.sim.batching import Continuous
from adsl.sim.core import PassTables, _flip, from_engine, micro_batches, simulate_core
from adsl.sim.engine import SimError, simulate
from adsl.sim.pools import simulate_pooled
from adsl.sim.resources import Layout, Machines, PassTable
from adsl.sim.timing import Schedule
from tests.sim.test_core import _setup, _streams

PIM = {"fc": "gpu", "attention": "pim"}
GPU = {"fc": "gpu", "attention": "gpu"}
PIM_DRAFT = {"fc": "pim", "attention": "pim"}
RESULT_ARRAYS = ("time_s", "energy_j", "tokens", "iterations", "drafted", "request_rounds")
WINDOW_KEYS = {"start_s", "end_s", "completed", "total_s", "total_tokens"}


# -- _flip ----------------------------------------------------------------------------------------


def test_flip_moves_one_family_to_the_other_device_and_keeps_the_rest():
    base = {"fc": "gpu", "attention": "pim"}
    assert _flip(base, "fc") == {"fc": "pim", "attention": "pim"}
    assert _flip(base, "attention") == {"fc": "gpu", "attention": "gpu"}
    assert _flip(_flip(base, "fc"), "fc") == base
    assert base == {"fc": "gpu", "attention": "pim"}  # a new dict: the setup's mapping is untouched


# -- the dispatch to the vectorized engine ------------------------------------------------------------


def _assert_is_the_engines_result(res, raw, x):
    """``res`` (a RunResult) carries the round engine's dict ``raw`` field for field, as float arrays."""
    for f in ("time_s", "energy_j"):
        np.testing.assert_array_equal(getattr(res, f), raw[f], err_msg=f)
    for f, key in (("tokens", "tokens"), ("iterations", "iterations"), ("drafted", "drafted")):
        np.testing.assert_array_equal(getattr(res, f), raw[key], err_msg=f)
    np.testing.assert_array_equal(res.request_rounds, raw["window"]["request_rounds"])
    for f in RESULT_ARRAYS:
        assert getattr(res, f).dtype == float and getattr(res, f).shape == (x,), f
    for f in ("busy_s", "class_s", "stage_s"):
        got, want = getattr(res, f), raw[f]
        assert set(got) == set(want), f
        for k in want:
            np.testing.assert_array_equal(got[k], want[k], err_msg=f"{f}[{k}]")
    for k, v in res.stage_s.items():
        assert v.dtype == float and v.shape == (x,), k
    assert set(res.window) == set(raw["window"]) - {"request_rounds"} == WINDOW_KEYS
    for k, v in res.window.items():
        np.testing.assert_array_equal(v, raw["window"][k], err_msg=k)
        assert v.dtype == float, k
    assert res.pool == {}
    assert res.timelines is None and res.requests is None


def test_one_micro_batch_without_a_pool_returns_the_vectorized_engines_result(models, hw):
    """Where one micro-batch never overlaps two passes (and no pool), simulate_core hands the run to the
    vectorized engine with a one-micro-batch schedule and returns its result unchanged, plus the
    micro-batch count in ``placement``: AD and SD (fixed and adaptive lengths, the dynamic scheduler),
    static and continuous batching with prefill, and a pipeline (where a schedule of two micro-batches
    would change the engine's time)."""
    pair = models.pair("OPT-66B")
    n, x, d = 5, 2, 4
    conf, acc = _streams(21, x, n, 90)
    out = np.random.default_rng(21).integers(3, 40, (x, n))
    prompt = np.random.default_rng(22).integers(30, 200, (x, n)).astype(float)
    lengths = np.stack([running_product_lengths(c, 0.5, d) for c in conf])
    serving = Continuous(3, 1, prefill=True)
    cases = [
        (_setup(hw, decoding="ad"), None, None, None),
        (_setup(hw, d=d), acc, None, serving),
        (_setup(hw, d=d, policy="running_product", dynamic=True, draft_mapping=GPU), acc, lengths, None),
        (_setup(hw, d=d, policy="running_product"), acc, lengths, serving),
        (_setup(hw, "saddle", d=d), acc, None, None),
        (_setup(hw, "saddle", decoding="ad"), None, None, serving),
    ]
    for setup, a, lens, sv in cases:
        raw = simulate(setup, pair, prompt, out, a, lens, sv)
        res = simulate_core(setup, pair, prompt, out, a, lens, serving=sv)
        _assert_is_the_engines_result(res, raw, x)
        assert res.placement == {**raw["placement"], "micro_batches": 1.0}
        if setup.dynamic:
            assert set(res.placement) == {"draft_fc_on_pim", "target_attention_on_pim", "micro_batches"}


def test_from_engine_gives_float_arrays_of_every_field_for_both_round_engines(models, hw):
    """The pool engine's dict too: every count becomes a float array (as the event core's), the pool's
    capacity (a setting, not a result) is dropped, and the window's request rounds move to their field."""
    pair = models.pair("OPT-66B")
    conf, acc = _streams(14, 2, 6, 140)
    out = np.random.default_rng(14).integers(10, 60, (2, 6))
    lengths = np.stack([running_product_lengths(c, 0.5, 9) for c in conf])
    setup = _setup(hw, policy="running_product", pool_tokens=20, eager=True, draft_mapping=PIM_DRAFT)
    raw = simulate_pooled(setup, pair, np.full((2, 6), 64.0), out, acc, conf, lengths, Continuous(3, 1, True))
    res = from_engine(raw)
    _assert_is_the_engines_result(dataclasses.replace(res, pool={}), raw, 2)
    assert set(res.pool) == {"pool_max", "drafted", "wasted"}
    for k, v in res.pool.items():
        np.testing.assert_array_equal(v, raw["pool"][k], err_msg=k)
        assert v.dtype == float, k
    assert res.placement == raw["placement"] and res.placement is not raw["placement"]


# -- the event loop against the vectorized engine, off the beaten track -------------------------------


def test_event_loop_equals_the_vectorized_engine_for_other_placements_copies_and_lengths(models, hw):
    """The pass tables follow the setup: the target's mapping for AD, the draft's copies, contexts far
    past the prompt (long outputs after a short prompt), more requests than context positions and a
    long draft; the event loop (forced) gives the vectorized engine's numbers."""
    pair = models.pair("OPT-66B")
    fc_on_pim = {"fc": "pim", "attention": "pim"}
    cases = [  # (setup, requests, prompt, output)
        (_setup(hw, decoding="ad", target_mapping=GPU), 4, 64, 30),
        (_setup(hw, decoding="ad", target_mapping=fc_on_pim), 4, 64, 30),
        (_setup(hw, d=3, draft_copies=2), 5, 64, 30),
        (_setup(hw, "dgx-a100", d=3, draft_copies=2), 5, 64, 30),
        (_setup(hw, d=1), 3, 4, 60),  # outputs far longer than the prompts
        (_setup(hw, d=8), 48, 4, 3),  # a batch larger than any context, drafts longer than the outputs
    ]
    for setup, n, p, o in cases:
        d = setup.draft_length
        _, acc = _streams(5, 2, n, o + 4 * d + 4, p=0.7)
        prompt, out = np.full((2, n), float(p)), np.full((2, n), o)
        a = acc if setup.decoding == "sd" else None
        vec = simulate(setup, pair, prompt, out, a)
        ev = simulate_core(setup, pair, prompt, out, a, force_events=True)
        np.testing.assert_allclose(ev.time_s, vec["time_s"], rtol=1e-9, err_msg=str((setup.system.name, n, p, o)))
        np.testing.assert_allclose(ev.energy_j, vec["energy_j"], rtol=1e-9)
        np.testing.assert_array_equal(ev.tokens, vec["tokens"])


def test_dynamic_scheduler_in_the_event_loop_places_passes_as_the_vectorized_engine(models, hw):
    """Per pass, draft FC and target attention go to whichever device is faster; starting from either
    placement of the target's attention, the event loop picks what the vectorized engine picks (same
    time, energy and shares of passes on PIM), and both devices win some passes."""
    pair = models.pair("OPT-66B")
    n, d = 32, 4
    _, acc = _streams(8, 1, n, 200, p=0.8)
    out = np.random.default_rng(8).integers(20, 120, (1, n))
    prompt = np.random.default_rng(9).integers(30, 4000, (1, n)).astype(float)
    for target in (GPU, PIM):
        setup = _setup(hw, d=d, dynamic=True, target_mapping=target, draft_mapping=GPU)
        vec = simulate(setup, pair, prompt, out, acc)
        ev = simulate_core(setup, pair, prompt, out, acc, force_events=True)
        np.testing.assert_allclose(ev.time_s, vec["time_s"], rtol=1e-9)
        np.testing.assert_allclose(ev.energy_j, vec["energy_j"], rtol=1e-9)
        for k in ("draft_fc_on_pim", "target_attention_on_pim"):
            assert ev.placement[k] == pytest.approx(vec["placement"][k], abs=1e-12), (target, k)
            assert 0 < ev.placement[k] < 1, (target, k)


def test_prefill_passes_cost_what_the_vectorized_engine_charges(models, hw):
    """Continuous batching with prefill, one micro-batch: every pass runs one after another, so the whole
    run's serial time (prefill of the target and of every draft copy at the mean prompt, a one-token
    prompt included) equals the vectorized engine's."""
    pair = models.pair("OPT-66B")
    n = 9
    _, acc = _streams(1, 2, n, 120, p=0.7)
    out = np.random.default_rng(1).integers(5, 40, (2, n))
    serving = Continuous(3, 1, prefill=True)
    for copies in (1, 2):
        for p in (1.0, 64.0):
            setup = _setup(hw, draft_copies=copies)
            prompt = np.full((2, n), p)
            vec = simulate(setup, pair, prompt, out, acc, serving=serving)
            ev = simulate_core(setup, pair, prompt, out, acc, serving=serving, force_events=True)
            np.testing.assert_allclose(ev.window["total_s"], vec["window"]["total_s"], rtol=1e-12)
            np.testing.assert_array_equal(ev.window["total_tokens"], out.sum(axis=1))
            assert (ev.stage_s["prefill"] > 0).all()


# -- input checks ---------------------------------------------------------------------------------------


def test_simulate_core_rejects_missing_or_short_acceptance_streams_naming_the_lengths(models, hw):
    pair = models.pair("OPT-66B")
    d = 3
    setup = _setup(hw, d=d)
    prompt, out = np.full((2, 3), 64.0), np.array([[5, 9, 7], [4, 4, 4]])
    need = 9 + 4 * d + 4
    with pytest.raises(SimError, match=r"shape \(2, 3, T\)"):
        simulate_core(setup, pair, prompt, out, None)
    _, acc = _streams(0, 2, 3, need)
    with pytest.raises(SimError, match=r"shape \(2, 3, T\)"):
        simulate_core(setup, pair, prompt, out, acc[:, :2])
    with pytest.raises(SimError, match=rf"streams of {need - 1} positions; need >= {need}$"):
        simulate_core(setup, pair, prompt, out, acc[..., : need - 1])
    res = simulate_core(setup, pair, prompt, out, acc)  # exactly long enough
    np.testing.assert_array_equal(res.tokens, out.sum(axis=1))
    # AD needs no streams at all
    simulate_core(_setup(hw, decoding="ad"), pair, prompt, out)


def test_simulate_core_rejects_a_pool_without_room_for_one_query_token_per_request(models, hw):
    pair = models.pair("OPT-66B")
    n = 4
    conf, acc = _streams(2, 1, n, 60)
    lengths = np.stack([running_product_lengths(c, 0.5, 9) for c in conf])
    prompt, out = np.full((1, n), 64.0), np.full((1, n), 8)
    for pool in (n - 1, n):
        setup = dataclasses.replace(_setup(hw, policy="running_product", pool_tokens=pool), name="tiny-pool")
        with pytest.raises(SimError, match=rf"^tiny-pool: pool of {pool} tokens cannot hold"):
            simulate_core(setup, pair, prompt, out, acc, lengths, conf, conf)
    res = simulate_core(_setup(hw, policy="running_product", pool_tokens=n + 1), pair, prompt, out, acc, lengths, conf)
    np.testing.assert_array_equal(res.tokens, out.sum(axis=1))
    assert (res.pool["pool_max"] <= n + 1).all()


def test_simulate_core_rejects_open_loops_it_cannot_run(models, hw):
    pair = models.pair("OPT-66B")
    n = 4
    conf, acc = _streams(3, 1, n, 60)
    lengths = np.stack([running_product_lengths(c, 0.5, 9) for c in conf])
    prompt, out = np.full((1, n), 64.0), np.full((1, n), 8)
    serving = Continuous(2, 1, False)
    setup = _setup(hw, mb=2)
    good = np.array([[0.0, 0.1, 0.2, 0.3]])
    for arrivals, sv in ((good, None), (good[:, :3], serving), (good[:, ::-1], serving)):
        with pytest.raises(SimError, match="^open loop needs serving slots and sorted arrival times"):
            simulate_core(setup, pair, prompt, out, acc, serving=sv, arrivals=arrivals)
    sequential = dataclasses.replace(_setup(hw, policy="running_product", pool_tokens=20), name="saddle-p")
    with pytest.raises(SimError, match="^saddle-p: open-loop serving runs on the asynchronous pool only"):
        simulate_core(sequential, pair, prompt, out, acc, lengths, conf, conf, serving, arrivals=good)


def test_open_loop_without_a_pool_runs_the_event_loop_even_with_one_micro_batch(models, hw):
    """A single micro-batch would go to the vectorized engine, which has no arrivals: an open loop stays
    in the event loop and reports every request (times as float arrays, integer arrival times included); a
    closed loop reports none and keeps no timelines unless asked."""
    pair = models.pair("OPT-66B")
    n = 6
    _, acc = _streams(4, 1, n, 80, p=0.7)
    prompt, out = np.full((1, n), 64.0), np.full((1, n), 10)
    setup = _setup(hw)
    serving = Continuous(2, 1, False)
    arrivals = np.array([[0, 0, 1, 1, 2, 3]])
    res = simulate_core(setup, pair, prompt, out, acc, serving=serving, arrivals=arrivals)
    assert res.placement["micro_batches"] == 1.0
    np.testing.assert_array_equal(res.requests["arrival"], arrivals[0])
    for k in ("arrival", "admitted", "first_token", "finished", "out"):
        assert res.requests[k].dtype == float and res.requests[k].shape == (n,), k
    assert np.isfinite(res.requests["finished"]).all()
    assert (res.requests["admitted"] >= res.requests["arrival"]).all()
    closed = simulate_core(setup, pair, prompt, out, acc, serving=serving, force_events=True)
    assert closed.requests is None and closed.timelines is None


# -- the micro-batch decision ----------------------------------------------------------------------------


class _Round:
    """A reference for one round of the whole batch in k micro-batches on fresh machines: per micro-batch
    (ceil(batch / k) requests), d draft passes, each one token further on, then a verification of d + 1
    tokens a request; or one decode pass. Costs straight from the pass tables of the setup's mappings."""

    def __init__(self, setup, pair, batch, ctx_max):
        s, self.setup, self.batch = setup.system, setup, batch
        self.layout = Layout.of(s)
        if setup.decoding == "ad":
            self.decode = PassTable.build(pair.target, s, 1, setup.target_mapping, batch, ctx_max)
        else:
            self.draft = PassTable.build(pair.draft, s, 1, setup.draft_mapping, batch, ctx_max, setup.draft_copies)
            self.verify = PassTable.build(pair.target, s, setup.draft_length + 1, setup.target_mapping, batch, ctx_max)

    def time(self, k, ctx):
        lay, m, n, end = self.layout, Machines(self.layout), math.ceil(self.batch / k), 0.0
        for _ in range(k):
            if self.setup.decoding == "ad":
                end = max(end, m.run(0.0, lay.segments(*self.decode.at(n, ctx)), "decode")[1])
                continue
            t = 0.0
            for j in range(self.setup.draft_length):
                t = m.run(t, lay.segments(*self.draft.at(n, ctx + j)), "draft")[1]
            end = max(end, m.run(t, lay.segments(*self.verify.at(n, ctx)), "verify")[1])
        return end

    def faster(self, m, ctx):
        return self.time(m, ctx) < self.time(1, ctx)


def _crossover(ref, m, grid):
    """(lo, hi), hi - lo < 1e-3: one micro-batch is faster at lo, m at hi (the first such switch on grid)."""
    lo, hi = next((a, b) for a, b in zip(grid, grid[1:], strict=False) if not ref.faster(m, a) and ref.faster(m, b))
    while hi - lo > 1e-3:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if ref.faster(m, mid) else (mid, hi)
    return lo, hi


@pytest.mark.parametrize("batch,m", [(128, 2), (127, 3)])
def test_micro_batches_switches_to_m_exactly_where_a_round_of_m_micro_batches_gets_faster(models, hw, batch, m):
    """Large batches and long contexts: drafting of one micro-batch on the GPUs hides the verification
    attention of another on PIM, and m micro-batches win from some context on. The choice flips from 1
    to m where the reference round times cross, to a thousandth of a token."""
    pair = models.pair("OPT-66B")
    setup = _setup(hw, d=4, mb=m, draft_mapping=GPU)
    ctx_max = 16400.0
    ref = _Round(setup, pair, batch, ctx_max)
    tables, layout = PassTables(setup, pair, batch, ctx_max, 64.0), Layout.of(setup.system)
    lo, hi = _crossover(ref, m, [float(c) for c in range(512, 16384, 512)])
    assert micro_batches(setup, tables, layout, batch, lo) == 1
    assert micro_batches(setup, tables, layout, batch, hi) == m


def test_micro_batches_keeps_one_batch_where_splitting_only_pays_the_weights_again(models, hw):
    """Decode passes alone, or everything on the GPUs: every micro-batch reads the weights again and
    nothing overlaps, so one batch wins (as the reference says) however the batch is cut."""
    pair = models.pair("OPT-66B")
    for setup in (_setup(hw, decoding="ad", mb=2), _setup(hw, "dgx-a100", d=3, mb=3)):
        m = setup.schedule.micro_batches
        tables, layout = PassTables(setup, pair, 64, 4200.0, 64.0), Layout.of(setup.system)
        ref = _Round(setup, pair, 64, 4200.0)
        for batch, ctx in ((1, 64.0), (7, 64.0), (64, 4000.0)):
            assert not ref.faster(m, ctx)
            assert micro_batches(setup, tables, layout, batch, ctx) == 1, (setup.system.name, batch, ctx)


def test_micro_batches_takes_the_systems_count_where_the_modelled_system_requires_it(models, hw):
    """Pipeline stages (eight, or two), a split the baseline always makes, and a Shared Pool take the
    set count even where one batch would finish a round sooner; one micro-batch stays one."""
    pair = models.pair("OPT-66B")
    saddle = hw.system("saddle")
    two_stages = dataclasses.replace(saddle, name="saddle-pp2", tensor_parallel=saddle.gpus // 2, pipeline_stages=2)
    split = dataclasses.replace(_setup(hw, mb=3), schedule=Schedule(3, split="always"))
    cases = [
        (_setup(hw, "saddle", mb=4), 4),
        (dataclasses.replace(_setup(hw, "saddle", mb=2), system=two_stages), 2),
        (split, 3),
        (_setup(hw, mb=2, policy="running_product", pool_tokens=16), 2),
        (_setup(hw, mb=3), 1),
        (_setup(hw, mb=1), 1),
    ]
    batch, ctx = 4, 64.0
    for setup, want in cases:
        tables, layout = PassTables(setup, pair, batch, 200.0, 64.0), Layout.of(setup.system)
        m = setup.schedule.micro_batches
        assert not _Round(setup, pair, batch, 200.0).faster(m, ctx)  # only the requirement splits
        assert micro_batches(setup, tables, layout, batch, ctx) == want, setup.system.name


def test_simulate_core_decides_the_micro_batches_at_the_mean_context_halfway_through_the_outputs(models, hw):
    """simulate_core cuts its slots by the context a request has on average half-way through its output
    (mean prompt + mean output / 2): just past the switch it splits, just before it does not. Where it
    keeps one batch, the vectorized engine runs with a schedule of one micro-batch, though its per-pass
    overlap of two sub-batches (``overlap: true``) would be faster there; so does a setup of one."""
    pair = models.pair("OPT-66B")
    batch, o, d = 128, 24, 4
    setup = dataclasses.replace(_setup(hw, d=d, draft_mapping=GPU), schedule=Schedule(2, overlap=True))
    one = dataclasses.replace(setup, schedule=Schedule(1, overlap=True))
    lo, hi = _crossover(_Round(setup, pair, batch, 16400.0), 2, [float(c) for c in range(512, 16384, 512)])
    _, acc = _streams(6, 1, batch, o + 4 * d + 4, p=0.7)
    out = np.full((1, batch), o)
    for halfway, want in ((hi + 2, 2.0), (lo - 2, 1.0)):
        prompt = np.full((1, batch), float(round(halfway - o / 2)))
        res = simulate_core(setup, pair, prompt, out, acc)
        assert res.placement["micro_batches"] == want, (halfway, lo, hi)
        np.testing.assert_array_equal(res.tokens, [batch * o])
        single = simulate_core(one, pair, prompt, out, acc)
        assert single.placement["micro_batches"] == 1.0
        one_batch = simulate(one, pair, prompt, out, acc)["time_s"]
        np.testing.assert_array_equal(single.time_s, one_batch)
        assert simulate(setup, pair, prompt, out, acc)["time_s"][0] < one_batch[0]  # overlap would win
        if want == 1.0:
            np.testing.assert_array_equal(res.time_s, one_batch)


# -- the pool's streams and confidences --------------------------------------------------------------------


def test_asynchronous_pool_verifies_what_the_round_engine_verifies_with_flagged_streams(models, hw):
    """One micro-batch, the Eager Pool, every request's entry awaited: the event core admits and accepts
    the same tokens as the round engine, for bool streams and for two-outcome (FIRST / CONTINUED)
    streams where kept eager tokens are judged as continuations, with later tokens' confidences apart
    from the first's."""
    pair = models.pair("OPT-66B")
    rng = np.random.default_rng(5)
    x, n, t = 2, 6, 140
    conf = rng.beta(5, 1, (x, n, t)).astype(np.float32)
    later = rng.beta(2, 2, (x, n, t)).astype(np.float32)
    first = rng.random((x, n, t)) < conf
    flags = first.astype(np.uint8) * FIRST | (rng.random((x, n, t)) < 0.5).astype(np.uint8) * CONTINUED
    out = rng.integers(10, 60, (x, n))
    prompt = np.full((x, n), 64.0)
    lengths = np.stack([running_product_lengths(c, 0.5, 9) for c in conf])
    setup = _setup(hw, policy="running_product", pool_tokens=20, eager=True, draft_mapping=PIM_DRAFT)
    for acc in (first, flags):
        for cl in (None, later):
            rounds = simulate_pooled(setup, pair, prompt, out, acc, conf, lengths, confidence_later=cl)
            ev = simulate_core(setup, pair, prompt, out, acc, lengths, conf, cl)
            np.testing.assert_array_equal(ev.tokens, rounds["tokens"])
            np.testing.assert_array_equal(ev.iterations, rounds["iterations"])
            np.testing.assert_array_equal(ev.pool["wasted"], rounds["pool"]["wasted"])
            np.testing.assert_array_equal(ev.pool["pool_max"], rounds["pool"]["pool_max"])
