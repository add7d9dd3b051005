"""The event-driven core: conservation, resources, and the cases where it must equal simpler engines."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adsl.fitting.generator import running_product_lengths
from adsl.sim.batching import Continuous
from adsl.sim.core import PassTables, simulate_core
from adsl.sim.engine import Setup, simulate
from adsl.sim.pools import simulate_pooled
from adsl.sim.timing import Schedule

PIM = {"fc": "gpu", "attention": "pim"}
PIM_DRAFT = {"fc": "pim", "attention": "pim"}


def _setup(hw, system="saddle-tp", decoding="sd", d=4, mb=1, **kw):
    s = hw.system(system)
    m = PIM if s.pim else {"fc": "gpu", "attention": "gpu"}
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
        draft_mapping=PIM_DRAFT,
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
        # prefill runs the same rounds, each longer by its admitted requests' prompts
        plain, filled = runs[False], runs[True]
        np.testing.assert_array_equal(filled["tokens"], plain["tokens"])
        assert (filled["stage_s"]["prefill"] > 0).all()
        np.testing.assert_allclose(filled["time_s"], plain["time_s"] + filled["stage_s"]["prefill"], rtol=1e-9)
        assert (filled["energy_j"] > plain["energy_j"]).all()


def test_free_drafting_reaches_the_verification_only_bound(models, hw, monkeypatch):
    """Hiding more work can only help: with drafting free, the run takes exactly its verification passes."""
    monkeypatch.setattr(PassTables, "draft_pass", lambda self, n, ctx: (0, 0.0, 0.0))
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
