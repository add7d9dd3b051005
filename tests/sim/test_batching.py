"""Continuous batching: slots stay full while requests wait, every request emits its output, and the
vectorized engines agree with the scalar reference."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adsl.fitting.generator import running_product_lengths
from adsl.sim.batching import Batching, Continuous, SlotLoop, steady_window
from adsl.sim.engine import Setup, simulate
from adsl.sim.pools import simulate_pooled
from adsl.sim.reference import simulate_one
from adsl.sim.timing import Schedule

PIM_MAP = {"fc": "gpu", "attention": "pim"}


def _setup(hw, decoding="sd", d=4, system="saddle-tp", **kw):
    s = hw.system(system)
    m = PIM_MAP if s.pim else {"fc": "gpu", "attention": "gpu"}
    return Setup("t", s, decoding, d if decoding == "sd" else 0, m, m, Schedule(2, overlap=bool(s.pim)), **kw)


def _check_occupancy(log, slots, n_req, out):
    """No slot idle while a request waits; every request emits exactly its output length."""
    admitted_before = np.cumsum(log["admitted"], axis=0) - log["admitted"]
    waiting = slots + admitted_before < n_req  # requests queued at the start of each iteration
    assert (log["n"][waiting] == slots).all()
    np.testing.assert_array_equal(log["emitted"].sum(axis=0), out.sum(axis=1))
    np.testing.assert_array_equal(log["done"].sum(axis=0), n_req)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.integers(0, 2**31 - 1))
def test_slots_refill_in_order_and_conserve_tokens(slots, per_slot, seed):
    rng = np.random.default_rng(seed)
    n = slots * per_slot
    out = rng.integers(1, 12, (2, n))
    loop = SlotLoop(np.full((2, n), 5.0), out, slots)
    served = [set(loop.cur[i].tolist()) for i in range(2)]
    while loop.active.any():
        emitted = np.where(loop.active, np.minimum(rng.integers(1, 4, loop.cur.shape), loop.out - loop.gen), 0)
        loop.step(emitted, emitted, loop.active)
        for i in range(2):
            served[i] |= set(loop.cur[i][loop.cur[i] < n].tolist())
    _check_occupancy(loop.arrays(), slots, n, out)
    assert all(s == set(range(n)) for s in served)


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 4), st.integers(2, 4), st.integers(1, 5), st.floats(0.0, 1.0), st.integers(0, 2**31 - 1))
def test_continuous_engine_equals_scalar_reference(models, hw, slots, per_slot, d, p, seed):
    rng = np.random.default_rng(seed)
    n = slots * per_slot
    out = rng.integers(1, 25, (1, n))
    acc = rng.random((1, n, 40)) < p
    serving = Continuous(slots, 0, prefill=bool(seed % 2))  # a warm-up may outlast a short random queue
    pair = models.pair("OPT-66B")
    for decoding in ("ad", "sd"):
        s = _setup(hw, decoding, d, static_power=bool(seed % 3))
        vec = simulate(s, pair, np.full((1, n), 64.0), out, acc if decoding == "sd" else None, serving=serving)
        ref = simulate_one(s, pair, [64.0] * n, list(out[0]), acc[0], serving=serving)
        _check_occupancy(vec["log"], slots, n, out)
        assert vec["tokens"][0] == ref["tokens"]
        assert vec["time_s"][0] == pytest.approx(ref["time_s"], rel=1e-9)
        assert vec["energy_j"][0] == pytest.approx(ref["energy_j"], rel=1e-9)


def test_adaptive_continuous_engine_equals_reference(models, hw):
    rng = np.random.default_rng(5)
    n, slots = 12, 4
    out = rng.integers(5, 40, (1, n))
    conf = rng.beta(5, 1, (1, n, 60))
    acc = rng.random(conf.shape) < conf
    lengths = running_product_lengths(conf[0], 0.4, 5)[None]
    s = _setup(hw, "sd", 5, policy="running_product")
    serving = Continuous(slots, 4, prefill=True)
    vec = simulate(s, models.pair("OPT-66B"), np.full((1, n), 64.0), out, acc, lengths, serving=serving)
    ref = simulate_one(s, models.pair("OPT-66B"), [64.0] * n, list(out[0]), acc[0], lengths[0], serving=serving)
    assert vec["tokens"][0] == ref["tokens"]
    assert vec["time_s"][0] == pytest.approx(ref["time_s"], rel=1e-9)
    assert vec["energy_j"][0] == pytest.approx(ref["energy_j"], rel=1e-9)


@pytest.mark.parametrize("eager", [False, True])
def test_pooled_engine_keeps_slots_full_and_emits_every_output(models, hw, eager):
    rng = np.random.default_rng(11)
    n, slots, d = 15, 5, 4
    out = rng.integers(10, 60, (2, n))
    conf = rng.beta(5, 1, (2, n, 120)).astype(np.float32)
    acc = rng.random(conf.shape) < conf
    lengths = np.stack([running_product_lengths(c, 0.4, 2 * d) for c in conf])
    s = _setup(hw, "sd", d, policy="running_product", pool_tokens=64, eager=eager)
    res = simulate_pooled(
        s, models.pair("OPT-66B"), np.full((2, n), 64.0), out, acc, conf, lengths, Continuous(slots, slots)
    )
    _check_occupancy(res["log"], slots, n, out)
    assert (res["tokens"] < out.sum(axis=1)).all() and (res["time_s"] < res["window"]["total_s"]).all()


def test_window_excludes_warmup_and_drain(models, hw):
    """AD with equal outputs: generations finish together; the window is generations 2..K of K."""
    n, slots, k = 12, 4, 3
    out = np.full((1, n), 10)
    res = simulate(_setup(hw, "ad"), models.pair("OPT-66B"), np.full((1, n), 64.0), out, serving=Continuous(4, 4))
    assert res["iterations"][0] == 20 and res["tokens"][0] == 2 * slots * 10
    assert res["window"]["completed"][0] == (k - 1) * slots  # generations 2 and 3; then the batch drains
    static = simulate(_setup(hw, "ad"), models.pair("OPT-66B"), np.full((1, 4), 64.0), np.full((1, 4), 10))
    assert res["time_s"][0] > 2 * static["time_s"][0]  # prefill of the admitted requests is charged


def test_batching_settings_are_checked():
    with pytest.raises(ValueError, match="window would be empty"):
        Batching("continuous", requests_per_slot=2, warmup=1.5)
    with pytest.raises(ValueError, match="batching mode"):
        Batching("dynamic")
    assert Batching("static").serving(8) is None and Batching("continuous").requests(8) == 32
    log = {"n": np.array([[2], [2], [1]]), "done": np.array([[0], [2], [1]])}
    with pytest.raises(ValueError, match="raise simulation.batching.requests_per_slot"):
        steady_window(log, Continuous(2, 3))
