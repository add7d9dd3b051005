"""The event-driven core: conservation, resources, and the cases where it must equal simpler engines."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adsl.fitting.generator import running_product_lengths
from adsl.sim.batching import Continuous
from adsl.sim.core import PassTables, simulate_core
from adsl.sim.engine import Setup, SimError, simulate
from adsl.sim.pools import simulate_pooled
from adsl.sim.timing import Schedule

PIM = {"fc": "gpu", "attention": "pim"}
PIM_DRAFT = {"fc": "pim", "attention": "pim"}


def _setup(hw, system="saddle-tp", decoding="sd", d=4, mb=1, **kw):
    """A Setup on ``system``: target attention in PIM where it has PIM, the draft placed like the target
    unless ``draft_mapping`` says otherwise (shared by the tests/sim/test_core_*.py files)."""
    s = hw.system(system)
    m = kw.pop("target_mapping", PIM if s.pim else {"fc": "gpu", "attention": "gpu"})
    return Setup("t", s, decoding, d if decoding == "sd" else 0, m, kw.pop("draft_mapping", m), Schedule(mb), **kw)


def _streams(seed, x, n, t, p=None):
    rng = np.random.default_rng(seed)
    conf = rng.beta(5, 1, (x, n, t)).astype(np.float32)
    acc = rng.random((x, n, t)) < (conf if p is None else p)
    return conf, acc


@settings(max_examples=12, deadline=None)
@given(
    st.integers(1, 6), st.integers(1, 5), st.sampled_from(["dgx-a100", "saddle-tp", "saddle"]), st.integers(0, 2**31)
)
def test_one_micro_batch_event_loop_equals_the_vectorized_engine(models, hw, n, d, system, seed):
    pair = models.pair("OPT-66B")
    conf, acc = _streams(seed, 2, n, 90)
    out = np.random.default_rng(seed).integers(1, 40, (2, n))
    prompt = np.full((2, n), 64.0)
    lengths = np.stack([running_product_lengths(c, 0.5, d) for c in conf])
    for decoding, lens in (("ad", None), ("sd", None), ("sd", lengths)):
        s = _setup(hw, system, decoding, d, policy="running_product" if lens is not None else "fixed")
        a = acc if decoding == "sd" else None
        vec = simulate(s, pair, prompt, out, a, lens)
        ev = simulate_core(s, pair, prompt, out, a, lens, force_events=True)
        np.testing.assert_allclose(ev.time_s, vec["time_s"], rtol=1e-9)
        np.testing.assert_allclose(ev.energy_j, vec["energy_j"], rtol=1e-9)
        np.testing.assert_array_equal(ev.tokens, vec["tokens"])


def _pooled(hw, eager, trigger="complete", mb=2, d=4, pool=64, system="saddle-tp"):
    return _setup(
        hw,
        system,
        "sd",
        d,
        mb,
        policy="running_product",
        pool_tokens=pool,
        eager=eager,
        pool_trigger=trigger,
        draft_mapping=PIM_DRAFT if hw.system(system).pim is not None else {"fc": "gpu", "attention": "gpu"},
    )


CASES = [
    ("AD, 2 micro-batches", lambda hw: _setup(hw, decoding="ad", mb=2, static_power=True)),
    ("PIM-SD, 2 micro-batches", lambda hw: dataclasses.replace(_setup(hw, mb=2), schedule=Schedule(2, split="always"))),
    ("SADDLE-p", lambda hw: _pooled(hw, eager=False)),
    ("SADDLE-s, complete", lambda hw: _pooled(hw, eager=True)),
    ("SADDLE-s, idle", lambda hw: _pooled(hw, eager=True, trigger="idle", mb=3)),
    ("SADDLE, pipeline", lambda hw: dataclasses.replace(_pooled(hw, True, "idle", 4, system="saddle"), dynamic=True)),
]


@pytest.mark.parametrize("name,make", CASES)
@pytest.mark.parametrize("serving", [None, Continuous(6, 3, prefill=True)])
def test_conservation_and_resources(models, hw, name, make, serving):
    """Every request emits exactly its output; no machine runs two segments at once; the pool never
    holds more than C tokens."""
    setup = make(hw)
    rng = np.random.default_rng(3)
    n = 6 if serving is None else 18
    out = rng.integers(5, 60, (2, n))
    conf, acc = _streams(4, 2, n, 60 + 4 * 4 + 4 + 40)
    lengths = np.stack([running_product_lengths(c, 0.4, 9) for c in conf])
    sd = setup.decoding == "sd"
    res = simulate_core(
        setup,
        models.pair("OPT-66B"),
        np.full((2, n), 64.0),
        out,
        acc if sd else None,
        lengths if sd else None,
        conf,
        conf,
        serving,
        timelines=True,
        force_events=True,
    )
    np.testing.assert_array_equal(res.window["total_tokens"], out.sum(axis=1))
    if serving is None:
        np.testing.assert_array_equal(res.tokens, out.sum(axis=1))
    for timeline in res.timelines:
        by_machine = {}
        for m, s, e, _ in timeline["segments"]:
            by_machine.setdefault(m, []).append((s, e))
        for spans in by_machine.values():
            spans.sort()
            assert all(a[1] <= b[0] + 1e-12 for a, b in zip(spans, spans[1:], strict=False)), name
    if setup.pool_tokens:
        assert (res.pool["pool_max"] <= setup.pool_tokens).all()
    assert (res.time_s > 0).all() and np.isfinite(res.energy_j).all()


def test_tau_zero_one_micro_batch_pool_equals_fixed_length_sd(models, hw):
    """SADDLE with tau = 0 (every draft d long), one micro-batch and a pool that holds every draft
    verifies the same windows as fixed-length SD, at the same times."""
    pair = models.pair("OPT-66B")
    conf, acc = _streams(7, 2, 5, 120)
    out = np.full((2, 5), 50)
    prompt = np.full((2, 5), 64.0)
    d = 4
    lengths = np.full(acc.shape, 2 * d + 1)
    sd = simulate_core(_setup(hw, d=d), pair, prompt, out, acc, force_events=True)
    pooled = simulate_core(_pooled(hw, False, mb=1, d=d), pair, prompt, out, acc, lengths, conf, conf)
    pooled_pim_draft = dataclasses.replace(_setup(hw, d=d), draft_mapping=PIM_DRAFT)
    sd_pim = simulate_core(pooled_pim_draft, pair, prompt, out, acc, force_events=True)
    np.testing.assert_array_equal(pooled.tokens, sd.tokens)
    np.testing.assert_allclose(pooled.time_s, sd_pim.time_s, rtol=1e-9)


def test_one_micro_batch_without_eager_equals_the_round_based_pools(models, hw):
    pair = models.pair("OPT-66B")
    conf, acc = _streams(9, 2, 6, 120)
    out = np.random.default_rng(9).integers(10, 60, (2, 6))
    prompt = np.full((2, 6), 64.0)
    lengths = np.stack([running_product_lengths(c, 0.5, 9) for c in conf])
    setup = _pooled(hw, False, mb=1, pool=20)
    rounds = simulate_pooled(setup, pair, prompt, out, acc, conf, lengths)
    ev = simulate_core(setup, pair, prompt, out, acc, lengths, conf, conf)
    np.testing.assert_array_equal(ev.tokens, rounds["tokens"])
    np.testing.assert_allclose(ev.time_s, rounds["time_s"], rtol=1e-9)
    np.testing.assert_allclose(ev.energy_j, rounds["energy_j"], rtol=1e-9)


def test_one_micro_batch_without_eager_equals_the_round_based_pools_under_continuous_batching(models, hw):
    """The same with slots refilled from a queue and a steady-state window (the round engine's measured
    window path, which the previous release's settings in the attribution figure run): without prefill
    every number equals; with it the two place the prefill of the requests admitted at the window's
    edges on different sides of it, so only the round engine's own bookkeeping is exact."""
    pair = models.pair("OPT-66B")
    setup = _pooled(hw, False, mb=1, pool=20)
    for seed in (9, 10):
        conf, acc = _streams(seed, 2, 16, 140)
        out = np.random.default_rng(seed).integers(10, 60, (2, 16))
        prompt = np.random.default_rng(seed + 1).integers(30, 90, (2, 16)).astype(float)
        lengths = np.stack([running_product_lengths(c, 0.5, 9) for c in conf])
        runs = {}
        for prefill in (False, True):
            serving = Continuous(4, 3, prefill)
            rounds = simulate_pooled(setup, pair, prompt, out, acc, conf, lengths, serving)
            ev = simulate_core(setup, pair, prompt, out, acc, lengths, conf, conf, serving)
            np.testing.assert_array_equal(ev.tokens, rounds["tokens"])
            np.testing.assert_array_equal(ev.iterations, rounds["iterations"])
            np.testing.assert_array_equal(ev.drafted, rounds["drafted"])
            runs[prefill] = rounds
            if prefill:
                np.testing.assert_allclose(ev.time_s, rounds["time_s"], rtol=0.05)
                continue
            np.testing.assert_allclose(ev.time_s, rounds["time_s"], rtol=1e-9)
            np.testing.assert_allclose(ev.energy_j, rounds["energy_j"], rtol=1e-9)
            for k in ("gpu", "pim"):
                np.testing.assert_allclose(ev.busy_s[k], rounds["busy_s"][k], rtol=1e-9)
            np.testing.assert_allclose(ev.stage_s["verify"], rounds["stage_s"]["verify"], rtol=1e-9)
            np.testing.assert_allclose(ev.stage_s["draft"], rounds["stage_s"]["draft"], rtol=1e-9)
            np.testing.assert_array_equal(ev.pool["pool_max"], rounds["pool"]["pool_max"])
        # prefill runs the same rounds, each longer by its admitted requests' prompts
        plain, filled = runs[False], runs[True]
        np.testing.assert_array_equal(filled["tokens"], plain["tokens"])
        assert (filled["stage_s"]["prefill"] > 0).all()
        np.testing.assert_allclose(filled["time_s"], plain["time_s"] + filled["stage_s"]["prefill"], rtol=1e-9)
        assert (filled["energy_j"] > plain["energy_j"]).all()


def test_the_dynamic_scheduler_places_passes_alike_in_both_cores(models, hw):
    """With the dynamic scheduler (draft FC and target attention each on the faster device, pass by
    pass), one micro-batch and no Eager Pool, the event core and the round engine pick the same devices:
    equal time and energy, and the same share of passes placed on PIM (one replica: both are a ratio of
    pass counts)."""
    pair = models.pair("OPT-66B")
    setup = dataclasses.replace(_pooled(hw, False, mb=1, pool=20), dynamic=True)
    shares = []
    for seed, serving in ((9, None), (10, None), (9, Continuous(4, 3, False))):
        conf, acc = _streams(seed, 1, 16, 140)
        out = np.random.default_rng(seed).integers(10, 60, (1, 16))
        prompt = np.random.default_rng(seed + 1).integers(30, 900, (1, 16)).astype(float)
        lengths = np.stack([running_product_lengths(c, 0.5, 9) for c in conf])
        rounds = simulate_pooled(setup, pair, prompt, out, acc, conf, lengths, serving)
        ev = simulate_core(setup, pair, prompt, out, acc, lengths, conf, conf, serving)
        np.testing.assert_allclose(ev.time_s, rounds["time_s"], rtol=1e-9)
        np.testing.assert_allclose(ev.energy_j, rounds["energy_j"], rtol=1e-9)
        for k in ("draft_fc_on_pim", "target_attention_on_pim"):
            assert ev.placement[k] == pytest.approx(rounds["placement"][k], abs=1e-12), (seed, k)
        shares.append(rounds["placement"])
    # both devices win some passes: a share stuck at 0 or 1 could not tell a wrong choice apart
    assert all(0 < s["draft_fc_on_pim"] < 1 for s in shares)
    assert any(0 < s["target_attention_on_pim"] < 1 for s in shares)


def test_sequential_pool_micro_batches_change_only_when_drafts_end(models, hw):
    """SADDLE-p admits and verifies every request in one pooled pass whatever the number of Draft
    Generators: more micro-batches move when drafting ends, never which tokens are verified."""
    pair = models.pair("OPT-66B")
    conf, acc = _streams(12, 2, 9, 140)
    out = np.random.default_rng(12).integers(10, 60, (2, 9))
    prompt = np.full((2, 9), 64.0)
    lengths = np.stack([running_product_lengths(c, 0.5, 9) for c in conf])
    setups = [_pooled(hw, False, mb=m, pool=20) for m in (1, 2, 3)]
    runs = [simulate_core(s, pair, prompt, out, acc, lengths, conf, conf) for s in setups]
    for res in runs[1:]:
        assert res.placement["micro_batches"] > 1
        for field in ("tokens", "iterations", "request_rounds", "drafted"):
            np.testing.assert_array_equal(getattr(res, field), getattr(runs[0], field), err_msg=field)
        np.testing.assert_array_equal(res.pool["pool_max"], runs[0].pool["pool_max"])


def test_stage_times_are_the_union_of_the_jobs_of_each_kind(models, hw):
    """Fig. 16's draft / verify / overlap shares come from the jobs' kinds: every job carries one of
    KINDS, and each stage's time is the union of its jobs' intervals."""
    from adsl.sim.core import KINDS, _union

    pair = models.pair("OPT-66B")
    conf, acc = _streams(13, 1, 8, 140)
    out = np.random.default_rng(13).integers(10, 60, (1, 8))
    lengths = np.stack([running_product_lengths(c, 0.5, 9) for c in conf])
    pim_sd = dataclasses.replace(_setup(hw, mb=2), schedule=Schedule(2, split="always"))
    for setup in (pim_sd, _pooled(hw, False), _pooled(hw, True, "idle")):
        lens = lengths if setup.pool_tokens else None
        res = simulate_core(setup, pair, np.full((1, 8), 64.0), out, acc, lens, conf, conf, timelines=True)
        jobs = res.timelines[0]["jobs"]
        assert {k for k, _, _ in jobs} <= set(KINDS) and {"draft", "verify"} <= {k for k, _, _ in jobs}
        end = res.time_s[0]
        draft = _union([(a, b) for k, a, b in jobs if k in ("draft", "eager")], 0.0, end)
        verify = _union([(a, b) for k, a, b in jobs if k == "verify"], 0.0, end)
        assert res.stage_s["draft"][0] == pytest.approx(draft) and draft > 0
        assert res.stage_s["verify"][0] == pytest.approx(verify) and verify > 0


def test_open_loop_with_every_request_waiting_at_zero_is_the_closed_loop(models, hw):
    """Arrivals all at time 0 and no prefill: the open loop fills its empty slots at once and then runs
    the closed loop's schedule, pass for pass (the event core's open-loop refill path against the
    closed loop); with one output token a request, every request still finishes."""
    pair = models.pair("OPT-66B")
    n = 18
    conf, acc = _streams(4, 2, n, 140)
    lengths = np.stack([running_product_lengths(c, 0.4, 9) for c in conf])
    prompt = np.full((2, n), 64.0)
    serving = Continuous(6, 3, False)
    pim_sd = dataclasses.replace(_setup(hw, mb=2), schedule=Schedule(2, split="always"))
    for setup in (_pooled(hw, True, "idle"), pim_sd):
        lens = lengths if setup.pool_tokens else None
        for out in (np.random.default_rng(3).integers(5, 60, (2, n)), np.ones((2, n), np.int64)):
            closed = simulate_core(setup, pair, prompt, out, acc, lens, conf, conf, serving, force_events=True)
            opened = simulate_core(
                setup, pair, prompt, out, acc, lens, conf, conf, serving, arrivals=np.zeros((2, n)), force_events=True
            )
            np.testing.assert_array_equal(opened.window["total_tokens"], out.sum(axis=1))
            np.testing.assert_allclose(opened.window["total_s"], closed.window["total_s"], rtol=1e-12)
            for k, v in closed.pool.items():
                np.testing.assert_array_equal(opened.pool[k], v, err_msg=k)
            assert np.isfinite(opened.requests["finished"]).all()


def test_from_engine_carries_every_field_of_the_round_engines(models, hw):
    """The round-based engines' dicts become RunResults field for field (the attribution figure's
    previous-release steps read pools, placement and iterations from them)."""
    from adsl.sim.core import from_engine

    pair = models.pair("OPT-66B")
    conf, acc = _streams(14, 2, 6, 140)
    out = np.random.default_rng(14).integers(10, 60, (2, 6))
    lengths = np.stack([running_product_lengths(c, 0.5, 9) for c in conf])
    setup = dataclasses.replace(_pooled(hw, True, mb=1, pool=20), dynamic=True)
    raw = simulate_pooled(setup, pair, np.full((2, 6), 64.0), out, acc, conf, lengths)
    res = from_engine(raw)
    np.testing.assert_array_equal(res.tokens, raw["tokens"])
    np.testing.assert_array_equal(res.iterations, raw["iterations"])
    assert res.tokens.dtype == float and res.iterations.dtype == float
    np.testing.assert_array_equal(res.drafted, raw["drafted"])
    assert set(res.pool) == set(raw["pool"]) - {"capacity"}
    for k in res.pool:
        np.testing.assert_array_equal(res.pool[k], raw["pool"][k])
    assert res.pool["wasted"].sum() > 0
    assert res.placement == raw["placement"] and set(res.placement) == {"draft_fc_on_pim", "target_attention_on_pim"}
    np.testing.assert_array_equal(res.window["start_s"], raw["window"]["start_s"])


@pytest.mark.parametrize("decoding", ["ad", "sd"])
def test_a_request_goes_to_the_micro_batch_that_is_free_first(models, hw, decoding):
    """Events in time order: a request arriving while one micro-batch is busy and the other idle enters
    the idle one at its arrival, not the busy one at the end of the round it was running (the loop once
    settled a round's end, and its admissions, when the round started)."""
    setup = dataclasses.replace(_setup(hw, decoding=decoding), schedule=Schedule(2, split="always"))
    conf, acc = _streams(15, 1, 2, 140)
    out = np.array([[40, 40]])

    def run(arrivals):
        a = acc if decoding == "sd" else None
        pair, prompt = models.pair("OPT-66B"), np.full((1, 2), 64.0)
        return simulate_core(setup, pair, prompt, out, a, serving=Continuous(4, 0, False), arrivals=arrivals)

    busy_until = run(np.array([[0.0, 0.0]])).requests["finished"][0]  # both start at 0
    arrival = 0.3 * busy_until  # the first micro-batch is mid-round, the second idle
    res = run(np.array([[0.0, arrival]]))
    assert res.requests["admitted"].tolist() == [0.0, arrival]


def test_the_event_core_rejects_what_the_engine_rejects(models, hw):
    """A request without output, or prompts and outputs of different shapes, fail on both paths alike."""
    setup = dataclasses.replace(_setup(hw, decoding="ad"), schedule=Schedule(2, split="always"))
    pair = models.pair("OPT-66B")
    with pytest.raises(SimError, match=r"^every request needs an output length >= 1$"):
        simulate_core(setup, pair, np.full((1, 3), 64.0), np.array([[0, 3, 2]]), force_events=True)
    with pytest.raises(SimError, match=r"must both be \(replicas, requests\), got \(1, 2\), \(1, 3\)"):
        simulate_core(setup, pair, np.full((1, 2), 64.0), np.array([[1, 3, 2]]), force_events=True)


def test_free_drafting_reaches_the_verification_only_bound(models, hw, monkeypatch):
    """Hiding more work can only help: with drafting free, the run takes exactly its verification passes."""
    monkeypatch.setattr(
        PassTables, "draft_costs", lambda self, n, ctx: (np.zeros(n.shape, int),) + (np.zeros(n.shape),) * 2
    )
    pair = models.pair("OPT-66B")
    conf, acc = _streams(11, 1, 8, 160)
    out = np.full((1, 8), 80)
    lengths = np.stack([running_product_lengths(c, 0.4, 9) for c in conf])
    for eager in (False, True):
        res = simulate_core(_pooled(hw, eager, mb=2), pair, np.full((1, 8), 64.0), out, acc, lengths, conf, conf)
        assert res.time_s[0] == pytest.approx(res.stage_s["verify"][0], rel=1e-9)
        assert res.stage_s["draft"][0] == 0.0


@settings(max_examples=15, deadline=None)
@given(st.integers(2, 8), st.integers(1, 3), st.integers(1, 5), st.booleans(), st.integers(0, 2**31))
def test_micro_batched_core_equals_its_scalar_reference(models, hw, n, groups, d, decoding_ad, seed):
    """Every micro-batch on its own loop, the same machines: the vectorized event loop and a plain
    request-by-request reference issue the same passes at the same times."""
    from adsl.sim.reference import simulate_micro_batches

    pair = models.pair("OPT-66B")
    conf, acc = _streams(seed, 1, n, 120)
    out = np.random.default_rng(seed).integers(1, 40, (1, n))
    prompt = np.full((1, n), 64.0)
    setup = dataclasses.replace(
        _setup(hw, decoding="ad" if decoding_ad else "sd", d=d), schedule=Schedule(groups, split="always")
    )
    lengths = running_product_lengths(conf[0], 0.5, d)[None]
    a, lens = (None, None) if decoding_ad else (acc, lengths)
    ev = simulate_core(setup, pair, prompt, out, a, lens, force_events=True)
    ref = simulate_micro_batches(
        setup,
        pair,
        list(prompt[0]),
        list(out[0]),
        None if a is None else acc[0],
        None if lens is None else lengths[0],
        groups=min(groups, n),
    )
    assert ev.tokens[0] == ref["tokens"] == out.sum()
    assert ev.time_s[0] == pytest.approx(ref["end_s"], rel=1e-9)
