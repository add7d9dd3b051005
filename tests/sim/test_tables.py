"""What a run is set up from (``adsl.sim.tables``, and the checks ``simulate_core`` makes before its loop):
the pass tables and their dynamic-scheduler variants, the micro-batch decision, the prefill passes'
costs and the input checks."""

import dataclasses
import math
import re

import numpy as np
import pytest

from adsl.fitting.generator import running_product_lengths
from adsl.settings import Continuous, MicroBatching
from adsl.sim import loop
from adsl.sim.core import simulate_core
from adsl.sim.setup import PREFILL_MAPPING, SimError
from adsl.sim.tables import Layout, PassTable, PassTables, flip, micro_batches
from adsl.sim.timing import CTX_STEP
from adsl.sim.workload import Workload
from tests.sim.builders import GPU, PIM, pooled, setup, streams
from tests.sim.builders import logged as _logged

PAIR = "OPT-66B"


# -- flip -----------------------------------------------------------------------------------------------


def test_flip_moves_one_family_to_the_other_device_and_keeps_the_rest():
    base = {"fc": "gpu", "attention": "pim"}
    assert flip(base, "fc") == {"fc": "pim", "attention": "pim"}
    assert flip(base, "attention") == {"fc": "gpu", "attention": "gpu"}
    assert flip(flip(base, "fc"), "fc") == base
    assert base == {"fc": "gpu", "attention": "pim"}  # a new dict: the setup's mapping is untouched


# -- the pass tables ------------------------------------------------------------------------------------


def _same(got: PassTable, want: PassTable):
    np.testing.assert_array_equal(got.gpu, want.gpu)
    np.testing.assert_array_equal(got.pim, want.pim)
    np.testing.assert_array_equal(got.table.energy_j, want.table.energy_j)


def test_pass_tables_hold_a_verification_table_per_tokens_a_request_and_the_prefill_of_both_models(models, hw):
    """SD: the draft at one token a request (its copies), the target at q = 1 .. d + 2 tokens a request, and
    the prefill of the target and of the draft at the mean prompt on the GPUs, for 0 .. slots requests
    over the context grid; no decode table. ``flat`` stacks them as the loop reads them."""
    pair, d, slots, ctx_max = models.pair(PAIR), 3, 5, 300.0
    s = setup(hw, d=d, draft_copies=2)
    tables = PassTables(s, pair, slots, ctx_max, 63.6)
    sys_ = s.system
    assert tables.draft_maps == [s.draft_mapping] and tables.target_maps == [s.target_mapping]
    assert len(tables.draft) == 1 and len(tables.verify) == 1 and len(tables.verify[0]) == d + 2
    assert tables.decode is None
    _same(tables.draft[0], PassTable.build(pair.draft, sys_, 1, s.draft_mapping, slots, ctx_max, 2))
    for q in range(1, d + 3):
        _same(tables.verify[0][q - 1], PassTable.build(pair.target, sys_, q, s.target_mapping, slots, ctx_max))
    grid = np.arange(0.0, ctx_max + 2 * CTX_STEP, CTX_STEP).size  # the context grid, one step past ctx_max
    assert [p.gpu.shape for p in tables.prefill] == [(slots + 1, 3)] * 2  # prompts prefill at context 0
    _same(tables.prefill[0], PassTable.build(pair.target, sys_, 64, PREFILL_MAPPING, slots, 1.0))
    _same(tables.prefill[1], PassTable.build(pair.draft, sys_, 64, PREFILL_MAPPING, slots, 1.0, 2))
    dg, dp, vg, vp, decg, decp, pg, pp, step, fc_on_pim, attn_on_pim = tables.flat()
    assert dg.shape == dp.shape == (1, slots + 1, grid)
    assert vg.shape == vp.shape == (1, d + 2, slots + 1, grid)
    assert pg.shape == pp.shape == (2, slots + 1, 3)
    assert decg.shape == (1, 2) and step == float(CTX_STEP)
    np.testing.assert_array_equal(vp[0, 2], tables.verify[0][2].pim)
    np.testing.assert_array_equal(pg[1], tables.prefill[1].gpu)
    assert fc_on_pim.tolist() == [0, 0] and attn_on_pim.tolist() == [1, 0]
    assert (vp[0, :, 1:] > 0).all() and (vg[0, :, 1:] > 0).all() and (vg[0, :, 0] == 0).all()


def test_pass_tables_of_ad_hold_the_decode_pass_and_the_targets_prefill(models, hw):
    pair = models.pair(PAIR)
    s = setup(hw, decoding="ad", target_mapping=GPU)
    tables = PassTables(s, pair, 4, 100.0, 0.2)  # a prompt below one token prefills one
    assert tables.draft == [] and tables.verify == [] and len(tables.prefill) == 1
    _same(tables.decode, PassTable.build(pair.target, s.system, 1, GPU, 4, 100.0))
    _same(tables.prefill[0], PassTable.build(pair.target, s.system, 1, PREFILL_MAPPING, 4, 1.0))
    dg, dp, vg, vp, decg, decp, pg, pp, *_ = tables.flat()
    assert dg.shape == (0, 1, 2) and vg.shape == (0, 1, 1, 2) and pg.shape[0] == 1
    np.testing.assert_array_equal(decg, tables.decode.gpu)
    assert (decp == 0).all()  # everything on the GPUs


@pytest.mark.parametrize("system,draft_variants", [("saddle-tp", 2), ("attacc-pim", 1)])
def test_the_dynamic_scheduler_adds_the_other_placement_of_draft_fc_and_target_attention(
    models, hw, system, draft_variants
):
    """With the dynamic scheduler the target's attention may go to either device (variant 1 flips it);
    the draft's FC too, where the weights live in PIM (not on AttAcc, whose weights stay in the GPUs'
    memory); ``flat`` flags the variants on PIM."""
    pair, d = models.pair(PAIR), 2
    s = setup(hw, system, d=d, dynamic=True, target_mapping=PIM, draft_mapping=GPU)
    tables = PassTables(s, pair, 3, 100.0, 64.0)
    assert tables.target_maps == [PIM, GPU] and len(tables.verify) == 2
    fc_flipped = {"fc": "pim", "attention": "gpu"}
    assert tables.draft_maps == [GPU, fc_flipped][:draft_variants] and len(tables.draft) == draft_variants
    for q in range(1, d + 3):
        _same(tables.verify[1][q - 1], PassTable.build(pair.target, s.system, q, GPU, 3, 100.0))
    if draft_variants == 2:
        _same(tables.draft[1], PassTable.build(pair.draft, s.system, 1, fc_flipped, 3, 100.0))
    *_, fc_on_pim, attn_on_pim = tables.flat()
    assert fc_on_pim.tolist() == [0, 1][:draft_variants] + [0] and attn_on_pim.tolist() == [1, 0, 0]


def test_a_pass_table_reads_gpu_plus_link_and_pim_seconds_linear_in_context(models, hw):
    pair = models.pair(PAIR)
    t = PassTable.build(pair.target, hw.system("saddle-tp"), 3, PIM, 6, 500.0)
    for n, ctx in ((1, 0.0), (4, 37.5), (6, 200.0), (2, 500.0)):
        c = t.table.lookup(n, ctx)
        g, p = t.at(n, ctx)
        assert g == pytest.approx(float(c.busy_s["gpu"] + c.busy_s["link"]), rel=1e-12)
        assert p == pytest.approx(float(c.busy_s["pim"]), rel=1e-12) and p > 0
    assert t.at(0, 100.0) == (0.0, 0.0)


def test_the_dynamic_scheduler_runs_every_pass_on_its_faster_variant(models, hw, monkeypatch):
    """Per pass, draft FC and target attention go to whichever device finishes the pass sooner (the pass
    tables at its requests, context and tokens a request); starting from either placement of the target's
    attention, both devices win some passes, and the reported shares count them."""
    pair = models.pair(PAIR)
    n, d = 32, 4
    _, acc = streams(8, 1, n, 200, p=0.8)
    out = np.random.default_rng(8).integers(20, 120, (1, n))
    prompt = np.random.default_rng(9).integers(30, 4000, (1, n)).astype(float)
    for target in (GPU, PIM):
        s = setup(hw, d=d, dynamic=True, target_mapping=target, draft_mapping=GPU)
        res, tables, (rep,) = _logged(monkeypatch, s, pair, Workload(prompt, out, acc))
        for k in ("draft_fc_on_pim", "target_attention_on_pim"):
            assert 0 < res.placement[k] < 1, (target, k)
        on_pim = {"draft": [], "verify": []}
        for i in range(rep.pass_table.size):
            table, v, m, ctx = loop.TABLES[rep.pass_table[i]], rep.pass_variant[i], rep.pass_n[i], rep.pass_ctx[i]
            if table == "draft":
                costs = [sum(t.at(m, ctx)) for t in tables.draft]
                on_pim[table].append(tables.draft_maps[v]["fc"] == "pim")
            elif table == "verify":
                q0, f = rep.pass_q0[i], rep.pass_f[i]
                blend = [
                    (sum(row[q0 - 1].at(m, ctx)), sum(row[min(q0, len(row) - 1)].at(m, ctx))) for row in tables.verify
                ]
                costs = [a * (1 - f) + b * f for a, b in blend]
                on_pim[table].append(tables.target_maps[v]["attention"] == "pim")
            else:
                continue
            assert costs[v] == pytest.approx(min(costs), rel=1e-12), (target, table, m, ctx)
        assert res.placement["draft_fc_on_pim"] == pytest.approx(np.mean(on_pim["draft"]), abs=1e-12)
        assert res.placement["target_attention_on_pim"] == pytest.approx(np.mean(on_pim["verify"]), abs=1e-12)


# -- the micro-batch decision ----------------------------------------------------------------------------


class _Round:
    """A reference for one round of the whole batch in k micro-batches on fresh machines: per micro-batch
    (ceil(batch / k) requests), d draft passes, each one token further on, then a verification of d + 1
    tokens a request; or one decode pass. Costs straight from the pass tables of the setup's mappings,
    segments booked on the machines with ``loop.segments`` / ``loop.run_pass``."""

    def __init__(self, setup_, pair, batch, ctx_max):
        s, self.setup, self.batch = setup_.system, setup_, batch
        self.layout = Layout.of(s)
        if setup_.decoding == "ad":
            self.decode = PassTable.build(pair.target, s, 1, setup_.target_mapping, batch, ctx_max)
        else:
            self.draft = PassTable.build(pair.draft, s, 1, setup_.draft_mapping, batch, ctx_max, setup_.draft_copies)
            self.verify = PassTable.build(
                pair.target, s, setup_.draft_length + 1, setup_.target_mapping, batch, ctx_max
            )

    def time(self, k, ctx):
        lay, n, end = self.layout, math.ceil(self.batch / k), 0.0
        mach = loop.machines(len(lay.machines), lay.stages)
        log = loop.new_logs((0, 0, 0, 0, 0))
        seg_m, seg_d = mach[6], mach[7]

        def run(release, cost):
            c = loop.segments(*cost, lay.stages, lay.pim, -1, seg_m, seg_d)
            return loop.run_pass(mach, release, seg_m, seg_d, c, lay.machines_per_stage, 0, log)[1]

        for _ in range(k):
            if self.setup.decoding == "ad":
                end = max(end, run(0.0, self.decode.at(n, ctx)))
                continue
            t = 0.0
            for j in range(self.setup.draft_length):
                t = run(t, self.draft.at(n, ctx + j))
            end = max(end, run(t, self.verify.at(n, ctx)))
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
    pair = models.pair(PAIR)
    s = setup(hw, d=4, mb=m, draft_mapping=GPU)
    ctx_max = 16400.0
    ref = _Round(s, pair, batch, ctx_max)
    tables, layout = PassTables(s, pair, batch, ctx_max, 64.0), Layout.of(s.system)
    lo, hi = _crossover(ref, m, [float(c) for c in range(512, 16384, 512)])
    assert micro_batches(s, tables, layout, batch, lo) == 1
    assert micro_batches(s, tables, layout, batch, hi) == m


def test_micro_batches_keeps_one_batch_where_splitting_only_pays_the_weights_again(models, hw):
    """Decode passes alone, or everything on the GPUs: every micro-batch reads the weights again and
    nothing overlaps, so one batch wins (as the reference says) however the batch is cut."""
    pair = models.pair(PAIR)
    for s in (setup(hw, decoding="ad", mb=2), setup(hw, "dgx-a100", d=3, mb=3)):
        m = s.micro_batching.micro_batches
        tables, layout = PassTables(s, pair, 64, 4200.0, 64.0), Layout.of(s.system)
        ref = _Round(s, pair, 64, 4200.0)
        for batch, ctx in ((1, 64.0), (7, 64.0), (64, 4000.0)):
            assert not ref.faster(m, ctx)
            assert micro_batches(s, tables, layout, batch, ctx) == 1, (s.system.name, batch, ctx)


def test_micro_batches_takes_the_systems_count_where_the_modelled_system_requires_it(models, hw):
    """Pipeline stages (eight, or two), a split the baseline always makes, and a Shared Pool take the
    set count even where one batch would finish a round sooner; one micro-batch stays one."""
    pair = models.pair(PAIR)
    saddle = hw.system("saddle")
    two_stages = dataclasses.replace(saddle, name="saddle-pp2", tensor_parallel=saddle.gpus // 2, pipeline_stages=2)
    split = dataclasses.replace(setup(hw, mb=3), micro_batching=MicroBatching(3, split="always"))
    cases = [
        (setup(hw, "saddle", mb=4), 4),
        (dataclasses.replace(setup(hw, "saddle", mb=2), system=two_stages), 2),
        (split, 3),
        (setup(hw, mb=2, policy="running_product", pool_tokens=16), 2),
        (setup(hw, mb=3), 1),
        (setup(hw, mb=1), 1),
    ]
    batch, ctx = 4, 64.0
    for s, want in cases:
        tables, layout = PassTables(s, pair, batch, 200.0, 64.0), Layout.of(s.system)
        m = s.micro_batching.micro_batches
        assert not _Round(s, pair, batch, 200.0).faster(m, ctx)  # only the requirement splits
        assert micro_batches(s, tables, layout, batch, ctx) == want, s.system.name


def test_simulate_core_decides_the_micro_batches_at_the_mean_context_halfway_through_the_outputs(models, hw):
    """simulate_core cuts its slots by the context a request has on average half-way through its output
    (mean prompt + mean output / 2): just past the switch it splits, just before it does not, and then
    runs exactly as a setup of one micro-batch."""
    pair = models.pair(PAIR)
    batch, o, d = 128, 24, 4
    s = setup(hw, d=d, mb=2, draft_mapping=GPU)
    one = dataclasses.replace(s, micro_batching=MicroBatching(1))
    lo, hi = _crossover(_Round(s, pair, batch, 16400.0), 2, [float(c) for c in range(512, 16384, 512)])
    _, acc = streams(6, 1, batch, o + d + 1, p=0.7)
    out = np.full((1, batch), o)
    for halfway, want in ((hi + 2, 2.0), (lo - 2, 1.0)):
        prompt = np.full((1, batch), float(round(halfway - o / 2)))
        res = simulate_core(s, pair, Workload(prompt, out, acc))
        assert res.placement["micro_batches"] == want, (halfway, lo, hi)
        np.testing.assert_array_equal(res.tokens, [batch * o])
        single = simulate_core(one, pair, Workload(prompt, out, acc))
        assert single.placement["micro_batches"] == 1.0
        if want == 1.0:
            for field in ("time_s", "energy_j", "iterations", "drafted"):
                np.testing.assert_array_equal(getattr(res, field), getattr(single, field), err_msg=field)
        else:
            assert res.time_s[0] != single.time_s[0]


# -- prefill ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("copies", [1, 2])
@pytest.mark.parametrize("p", [1.0, 64.0])
def test_prefill_passes_cost_the_prefill_tables_at_the_requests_they_admit(models, hw, monkeypatch, copies, p):
    """Continuous batching with prefill, one micro-batch: the first wave runs without prefill; each later
    admission prefills its requests through the target, then the draft (every copy), at the mean prompt
    (a one-token prompt included), back to back, each job as long as its table says; every pass runs
    one after another, so the whole run is the sum of its jobs."""
    pair = models.pair(PAIR)
    n = 9
    _, acc = streams(1, 2, n, 120, p=0.7)
    out = np.random.default_rng(1).integers(5, 40, (2, n))
    s = setup(hw, draft_copies=copies)
    serving = Continuous(3, 1, prefill=True)
    res, tables, reps = _logged(
        monkeypatch, s, pair, Workload(np.full((2, n), p), out, acc), serving=serving, timelines=True
    )
    _same(tables.prefill[1], PassTable.build(pair.draft, s.system, int(p), PREFILL_MAPPING, 3, 1.0, copies))
    np.testing.assert_array_equal(res.window["total_tokens"], out.sum(axis=1))
    assert (res.stage_s["prefill"] > 0).all()
    for r, rep in enumerate(reps):
        jobs = res.timelines[r]["jobs"]
        pre = np.flatnonzero(rep.pass_table == loop.TABLES.index("prefill"))
        assert rep.pass_variant[pre].tolist() == [0, 1] * (pre.size // 2)  # target, then draft
        assert rep.pass_n[pre].sum() == 2 * (n - 3)  # every request but the first wave's, through both
        for i in pre:
            _, start, end = jobs[rep.pass_job[i]]
            g, pim = tables.prefill[rep.pass_variant[i]].at(rep.pass_n[i], 0.0)
            assert end - start == pytest.approx(g + pim, rel=1e-12) and pim == 0.0
            if rep.pass_variant[i] == 1:
                assert start == jobs[rep.pass_job[i - 1]][2]
        assert res.window["total_s"][r] == pytest.approx(sum(e - s for _, s, e in jobs), rel=1e-12)


# -- input checks ------------------------------------------------------------------------------------------


def test_simulate_core_rejects_missing_or_short_acceptance_streams_naming_the_lengths(models, hw):
    """A request drafts from positions below its output and reads at most d positions on: streams need
    out.max() + d + 1 positions, and so do the draft lengths and confidences."""
    pair = models.pair(PAIR)
    d = 3
    s = setup(hw, d=d)
    prompt, out = np.full((2, 3), 64.0), np.array([[5, 9, 7], [4, 4, 4]])
    need = 9 + d + 1
    with pytest.raises(SimError, match=r"^SD needs acceptance streams of shape \(2, 3, T\)$"):
        simulate_core(s, pair, Workload(prompt, out, None))
    conf, acc = streams(0, 2, 3, need)
    with pytest.raises(SimError, match=r"shape \(2, 3, T\)"):
        simulate_core(s, pair, Workload(prompt, out, acc[:, :2]))
    with pytest.raises(SimError, match=rf"^acceptance streams of {need - 1} positions; need >= {need}$"):
        simulate_core(s, pair, Workload(prompt, out, acc[..., : need - 1]))
    res = simulate_core(s, pair, Workload(prompt, out, acc))  # exactly long enough
    np.testing.assert_array_equal(res.tokens, out.sum(axis=1))
    lengths = np.full(acc.shape, d)
    adaptive = setup(hw, d=d, policy="running_product")
    for i, name in enumerate(("draft_lengths", "confidence", "confidence_later")):
        arrays = [lengths, conf, conf]
        for bad in (arrays[i][..., : need - 1], arrays[i][:1]):
            arrays[i] = bad
            with pytest.raises(
                SimError, match=re.escape(f"{name} must be (replicas, requests, >= {need}), got {bad.shape}")
            ):
                simulate_core(adaptive, pair, Workload(prompt, out, acc, *arrays))
    res = simulate_core(adaptive, pair, Workload(prompt, out, acc, lengths, conf, conf))
    np.testing.assert_array_equal(res.tokens, out.sum(axis=1))
    # AD needs no streams at all
    simulate_core(setup(hw, decoding="ad"), pair, Workload(prompt, out))


def _tiny(seed, n):
    """One replica of ``n`` requests of 8 output tokens: confidences, acceptance streams, running-product
    lengths up to 9, prompts and outputs."""
    conf, acc = streams(seed, 1, n, 60)
    lengths = np.stack([running_product_lengths(c, 0.5, 9) for c in conf])
    return conf, acc, lengths, np.full((1, n), 64.0), np.full((1, n), 8)


def test_simulate_core_rejects_a_pool_without_room_for_one_query_token_per_request(models, hw):
    pair = models.pair(PAIR)
    n = 4
    conf, acc, lengths, prompt, out = _tiny(2, n)
    for pool in (n - 1, n):
        s = dataclasses.replace(setup(hw, policy="running_product", pool_tokens=pool), name="tiny-pool")
        with pytest.raises(SimError, match=rf"^tiny-pool: pool of {pool} tokens cannot hold"):
            simulate_core(s, pair, Workload(prompt, out, acc, lengths, conf, conf))
    res = simulate_core(
        setup(hw, policy="running_product", pool_tokens=n + 1), pair, Workload(prompt, out, acc, lengths, conf)
    )
    np.testing.assert_array_equal(res.tokens, out.sum(axis=1))
    assert (res.pool["pool_max"] <= n + 1).all()


def test_simulate_core_rejects_an_asynchronous_pool_without_draft_lengths(models, hw):
    pair = models.pair(PAIR)
    conf, acc = streams(2, 1, 4, 60)
    s = dataclasses.replace(pooled(hw, True), name="eager")
    with pytest.raises(SimError, match=r"^eager: the asynchronous pool needs each request's draft lengths"):
        simulate_core(s, pair, Workload(np.full((1, 4), 64.0), np.full((1, 4), 8), acc, None, conf, conf))


def test_simulate_core_rejects_open_loops_it_cannot_run(models, hw):
    pair = models.pair(PAIR)
    n = 4
    conf, acc, lengths, prompt, out = _tiny(3, n)
    serving = Continuous(2, 1, False)
    s = setup(hw, mb=2)
    good = np.array([[0.0, 0.1, 0.2, 0.3]])
    for arrivals, sv in ((good, None), (good[:, :3], serving), (good[:, ::-1], serving)):
        with pytest.raises(SimError, match="^open loop needs serving slots and sorted arrival times"):
            simulate_core(s, pair, Workload(prompt, out, acc, arrivals=arrivals), serving=sv)
    sequential = dataclasses.replace(setup(hw, policy="running_product", pool_tokens=20), name="saddle-p")
    with pytest.raises(SimError, match="^saddle-p: open-loop serving runs on the asynchronous pool only"):
        simulate_core(sequential, pair, Workload(prompt, out, acc, lengths, conf, conf, arrivals=good), serving)
