import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adsl.sim.engine import Setup, SimError, check_memory, simulate
from adsl.sim.mapping import candidate_mappings, search_static_mapping
from adsl.sim.reference import simulate_one
from adsl.sim.systems import Context, build
from adsl.sim.timing import Schedule

PIM_MAP = {"fc": "gpu", "attention": "pim"}
FIVE = Schedule(micro_batches=5)


def setup(hw, system="motivation-4gpu", decoding="sd", d=4, schedule=FIVE):
    s = hw.system(system)
    m = PIM_MAP if s.pim else {"fc": "gpu", "attention": "gpu"}
    return Setup("test", s, decoding, d if decoding == "sd" else 0, m, m, schedule)


def run(models, hw, st_, out, accept, prompt=64.0):
    out = np.asarray(out)[None, :]
    return simulate(st_, models.pair("OPT-66B"), np.full(out.shape, prompt), out, accept)


@settings(max_examples=25, deadline=None)
@given(
    st.integers(1, 5),
    st.integers(1, 6),
    st.floats(0.0, 1.0),
    st.sampled_from(["motivation-4gpu", "dgx-a100", "attacc-pim"]),
    st.integers(0, 2**31 - 1),
    st.booleans(),
)
def test_vectorized_engine_equals_scalar_reference(models, hw, batch, d, p, system, seed, flagged):
    """Three replicas with their own output lengths and streams, each equal to the scalar reference
    (tokens, time, energy and iterations per replica)."""
    rng = np.random.default_rng(seed)
    x = 3
    out = rng.integers(1, 30, (x, batch))
    acc = rng.random((x, batch, 40)) < p
    if flagged:  # first-token and continuation outcomes (a within-draft term)
        acc = acc.astype(np.uint8) | (rng.random((x, batch, 40)) < p).astype(np.uint8) << 1
    sched = Schedule(micro_batches=2, overlap=system == "attacc-pim")
    pair = models.pair("OPT-66B")
    for decoding in ("ad", "sd"):
        s = setup(hw, system, decoding, d, sched)
        vec = simulate(s, pair, np.full(out.shape, 64.0), out, acc if decoding == "sd" else None)
        for r in range(x):
            ref = simulate_one(s, pair, [64.0] * batch, list(out[r]), acc[r])
            assert vec["tokens"][r] == ref["tokens"] == out[r].sum()
            assert vec["iterations"][r] == ref["iterations"]
            assert vec["time_s"][r] == pytest.approx(ref["time_s"], rel=1e-9)
            assert vec["energy_j"][r] == pytest.approx(ref["energy_j"], rel=1e-9)


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 8), st.integers(1, 60))
def test_all_accepted_emits_d_plus_one(models, hw, d, out_len):
    acc = np.ones((1, 3, out_len + d + 1), dtype=bool)
    res = run(models, hw, setup(hw, d=d), [out_len] * 3, acc)
    assert res["iterations"][0] == -(-out_len // (d + 1))
    assert res["tokens"][0] == 3 * out_len


def test_none_accepted_one_token_per_verification_and_slower_than_ad(models, hw):
    acc = np.zeros((1, 4, 80), dtype=bool)
    sd = run(models, hw, setup(hw, d=4), [50] * 4, acc)
    ad = run(models, hw, setup(hw, decoding="ad"), [50] * 4, None)
    assert sd["iterations"][0] == 50 and sd["tokens"][0] == 200
    assert sd["time_s"][0] > ad["time_s"][0]


@settings(max_examples=15, deadline=None)
@given(st.floats(1.05, 3.0), st.integers(0, 2**31 - 1))
def test_more_bandwidth_never_slower(models, hw, factor, seed):
    base = setup(hw)
    s = base.system
    faster = dataclasses.replace(
        s,
        gpu=dataclasses.replace(s.gpu, mem_bw_bytes_s=s.gpu.mem_bw_bytes_s * factor),
        pim=dataclasses.replace(s.pim, external_bw_bytes_s=s.pim.external_bw_bytes_s * factor),
    )
    acc = np.random.default_rng(seed).random((1, 4, 80)) < 0.6
    slow = run(models, hw, base, [40] * 4, acc)
    fast = run(models, hw, dataclasses.replace(base, system=faster), [40] * 4, acc)
    assert fast["time_s"][0] <= slow["time_s"][0] * (1 + 1e-12)


def test_every_request_emits_its_output_length(models, hw):
    rng = np.random.default_rng(3)
    out = rng.integers(5, 90, 7)
    res = run(models, hw, setup(hw, d=6), out, rng.random((1, 7, 100)) < 0.8)
    assert res["tokens"][0] == out.sum()


def test_invalid_settings(models, hw):
    with pytest.raises(SimError, match="draft length d must be >= 1"):
        setup(hw, d=0)
    with pytest.raises(KeyError, match="unknown system"):
        build("TPU-SD", Context(hw, models.pair("OPT-66B"), 8, 1024, 8, {}))
    from adsl.sim.engine import memory_need

    need, have = memory_need(setup(hw), models.pair("OPT-66B"), 512, 1024)
    words = f"needs {need / 1e9:.0f} GB for weights \\+ KV, the system has {have / 1e9:.0f} GB"
    with pytest.raises(SimError, match=words):
        check_memory(setup(hw), models.pair("OPT-66B"), 512, 1024)
    with pytest.raises(SimError, match="acceptance streams of 10 positions"):
        run(models, hw, setup(hw, d=4), [20], np.ones((1, 1, 10), dtype=bool))


def test_static_mapping_search_is_the_fastest_candidate(models, hw):
    s = hw.system("motivation-4gpu")
    pair = models.pair("OPT-66B")
    draft, target, rows = search_static_mapping(pair, s, 64, 8, 1024, Schedule(5))
    assert len(rows) == len(candidate_mappings(s)) == 16
    best = min(rows, key=lambda r: r["iteration_s"])
    assert (best["target_fc"], best["draft_fc"]) == (target["fc"], draft["fc"])
    # FC on PIM is not a candidate where the weights live in GPU memory
    assert all(m[1]["fc"] == "gpu" for m in candidate_mappings(hw.system("dgx-a100")))


def test_cost_table_matches_the_cost_model(models, hw):
    from adsl.sim.timing import CostTable, batch_pass

    s = hw.system("motivation-4gpu")
    pair = models.pair("OPT-66B")
    table = CostTable.build(pair.target, s, 9, PIM_MAP, FIVE, 64, 1100)
    n = np.array([1, 7, 33, 64])
    ctx = np.array([128.0, 333.3, 700.5, 1023.0])
    direct = batch_pass(pair.target, s, n, 9, ctx, PIM_MAP, FIVE)
    looked = table.lookup(n, ctx)
    np.testing.assert_allclose(looked.time_s, direct.time_s, rtol=0.01)
    np.testing.assert_allclose(looked.energy_j, direct.energy_j, rtol=0.01)
    on_grid = table.lookup(n, np.array([128.0, 336.0, 704.0, 1024.0]))
    exact = batch_pass(pair.target, s, n, 9, np.array([128.0, 336.0, 704.0, 1024.0]), PIM_MAP, FIVE)
    np.testing.assert_allclose(on_grid.time_s, exact.time_s, rtol=1e-12)


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 5), st.integers(2, 8), st.floats(0.0, 0.9), st.integers(0, 2**31 - 1))
def test_adaptive_lengths_engine_equals_reference(models, hw, batch, d_max, tau, seed):
    from adsl.fitting.generator import running_product_lengths

    rng = np.random.default_rng(seed)
    out = rng.integers(1, 30, batch)
    conf = rng.beta(5, 1, (1, batch, 50))
    acc = rng.random((1, batch, 50)) < conf
    lengths = running_product_lengths(conf[0], tau, d_max)[None]
    s = setup(hw, d=d_max)
    vec = simulate(s, models.pair("OPT-66B"), np.full((1, batch), 64.0), out[None], acc, lengths)
    ref = simulate_one(s, models.pair("OPT-66B"), [64.0] * batch, list(out), acc[0], lengths[0])
    assert vec["tokens"][0] == ref["tokens"] == out.sum()
    assert vec["time_s"][0] == pytest.approx(ref["time_s"], rel=1e-9)
    assert vec["energy_j"][0] == pytest.approx(ref["energy_j"], rel=1e-9)


def test_tau_zero_is_fixed_length_sd(models, hw):
    """With tau = 0 the running-product rule never stops early: SADDLE-d = fixed-length SD."""
    from adsl.fitting.generator import running_product_lengths

    rng = np.random.default_rng(0)
    conf = rng.beta(5, 1, (2, 6, 120))
    acc = rng.random(conf.shape) < conf
    lengths = np.stack([running_product_lengths(c, 0.0, 5) for c in conf])
    # tau = 0 itself, not a floor: every position a 60-token request reaches drafts the full 5
    assert (lengths[..., : 60 + 5] == 5).all()
    s = setup(hw, d=5)
    a = simulate(s, models.pair("OPT-66B"), np.full((2, 6), 64.0), np.full((2, 6), 60), acc, lengths)
    b = simulate(s, models.pair("OPT-66B"), np.full((2, 6), 64.0), np.full((2, 6), 60), acc)
    np.testing.assert_allclose(a["time_s"], b["time_s"], rtol=1e-12)
    assert (a["tokens"] == b["tokens"]).all()
