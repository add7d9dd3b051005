"""What a run is set up from (``adsl.sim.tables``, and the checks ``simulate_core`` makes before its loop):
the pass tables and their dynamic-scheduler variants, the micro-batch count, the prefill passes'
costs and the input checks."""

import dataclasses
import re

import numpy as np
import pytest

from adsl.fitting.generator import running_product_lengths
from adsl.settings import Continuous, MicroBatching
from adsl.sim import loop
from adsl.sim.core import pass_tables, replica_logs, simulate_core
from adsl.sim.result import account
from adsl.sim.setup import PREFILL_MAPPING, SimError
from adsl.sim.tables import ROWS_APART, Layout, PassTable, PassTables, RowTables, flip
from adsl.sim.timing import CTX_STEP
from adsl.sim.workload import Workload
from tests.sim.builders import GPU, PIM, pooled, setup, streams
from tests.sim.builders import inputs as _inputs
from tests.sim.builders import logged as _logged

PAIR = "OPT-66B"


# -- flip -----------------------------------------------------------------------------------------------


def test_flip_moves_one_family_to_the_other_device_and_keeps_the_rest():
    base = {"fc": "gpu", "attention": "pim"}
    assert flip(base, "fc") == {"fc": "pim", "attention": "pim"}
    assert flip(base, "attention") == {"fc": "gpu", "attention": "gpu"}
    assert flip(flip(base, "fc"), "fc") == base
    assert base == {"fc": "gpu", "attention": "pim"}  # a new dict: the setup's mapping is untouched


# -- the machines ---------------------------------------------------------------------------------------


def test_a_layout_names_each_machine_by_its_device_and_numbers_them_by_stage_in_a_pipeline(hw):
    """The names label the timeline table's devices (``adsl.sim.timeline``): one GPU and one PIM machine per
    stage, numbered only where there are several stages; a system without PIM has GPU machines alone."""
    cases = {
        ("dgx-a100", 1): (("gpu",), False),
        ("saddle-tp", 1): (("gpu", "pim"), True),
        ("saddle", 2): (("gpu0", "pim0", "gpu1", "pim1"), True),
        ("dgx-a100", 2): (("gpu0", "gpu1"), False),
    }
    for (name, stages), (machines, pim) in cases.items():
        layout = Layout.of(hw.system(name).replace(pipeline_stages=stages))
        assert layout == Layout(machines, stages, pim), name
        assert layout.machines_per_stage == (2 if pim else 1)


# -- the pass tables ------------------------------------------------------------------------------------


def _same(got: PassTable, want: PassTable):
    np.testing.assert_array_equal(got.gpu, want.gpu)
    np.testing.assert_array_equal(got.pim, want.pim)
    np.testing.assert_array_equal(got.table.energy_j, want.table.energy_j)
    np.testing.assert_array_equal(got.table.time_s, want.table.time_s)


def test_pass_tables_hold_a_verification_table_per_tokens_a_request_and_the_prefill_of_both_models(pair, hw):
    """SD: the draft at one token a request (its copies), the target at q = 1 .. d + 1 tokens a request, and
    the prefill of the target and of the draft at the mean prompt on the GPUs, for 0 .. slots requests
    over the context grid; no decode table. ``flat`` stacks them as the loop reads them."""
    d, slots, ctx_max = 3, 5, 300.0
    s = setup(hw, d=d, draft_copies=2)
    tables = PassTables(s, pair, slots, ctx_max, 63.6)
    sys_ = s.system
    assert tables.draft_maps == [s.draft_mapping] and tables.target_maps == [s.target_mapping]
    assert len(tables.draft) == 1 and len(tables.verify) == 1 and len(tables.verify[0]) == d + 1
    assert tables.decode is None
    _same(tables.draft[0], PassTable.build(pair.draft, sys_, 1, s.draft_mapping, slots, ctx_max, 2))
    for q in range(1, d + 2):
        _same(tables.verify[0][q - 1], PassTable.build(pair.target, sys_, q, s.target_mapping, slots, ctx_max))
    grid = np.arange(0.0, ctx_max + 2 * CTX_STEP, CTX_STEP).size  # the context grid, one step past ctx_max
    assert [p.gpu.shape for p in tables.prefill] == [(slots + 1, 3)] * 2  # prompts prefill at context 0
    _same(tables.prefill[0], PassTable.build(pair.target, sys_, 64, PREFILL_MAPPING, slots, 1.0))
    _same(tables.prefill[1], PassTable.build(pair.draft, sys_, 64, PREFILL_MAPPING, slots, 1.0, 2))
    dg, dp, vg, vp, decg, decp, pg, pp, step, fc_on_pim, attn_on_pim = tables.flat()
    assert dg.shape == dp.shape == (1, slots + 1, grid)
    assert vg.shape == vp.shape == (1, d + 1, slots + 1, grid)
    assert pg.shape == pp.shape == (2, slots + 1, 3)
    assert decg.shape == (1, 2) and step == float(CTX_STEP)
    np.testing.assert_array_equal(vp[0, 2], tables.verify[0][2].pim)
    np.testing.assert_array_equal(pg[1], tables.prefill[1].gpu)
    assert fc_on_pim.tolist() == [0, 0] and attn_on_pim.tolist() == [1, 0]
    assert (vp[0, :, 1:] > 0).all() and (vg[0, :, 1:] > 0).all() and (vg[0, :, 0] == 0).all()


def _shares(got: list, want: list) -> bool:
    return len(got) == len(want) and all(g is w for g, w in zip(got, want, strict=True))


def test_pass_tables_take_each_table_an_earlier_set_already_costs(pair, hw):
    """``reuse``: the search's candidates and a configuration's systems share every table whose passes are
    the same, and each table is the one built alone; a candidate with other micro-batches has the same
    passes on both sides, one with another draft placement (copies, mapping) only the same target passes,
    and the systems on one hardware the same prefill."""
    d, slots, ctx_max, prompt = 3, 5, 300.0, 63.6
    first = PassTables(setup(hw, d=d, mb=1), pair, slots, ctx_max, prompt)
    split = PassTables(setup(hw, d=d, mb=2), pair, slots, ctx_max, prompt, (first,))
    assert _shares(split.draft, first.draft) and _shares(split.verify, first.verify)
    assert _shares(split.prefill, first.prefill)
    alone = PassTables(setup(hw, d=d, draft_copies=2), pair, slots, ctx_max, prompt)
    copies = PassTables(setup(hw, d=d, draft_copies=2), pair, slots, ctx_max, prompt, (first, split))
    assert _shares(copies.verify, first.verify) and copies.prefill[0] is first.prefill[0]
    assert copies.draft[0] is not first.draft[0] and copies.prefill[1] is not first.prefill[1]
    for got, want in zip((*copies.draft, copies.prefill[1]), (*alone.draft, alone.prefill[1]), strict=True):
        _same(got, want)
    moved = PassTables(setup(hw, d=d, draft_mapping=GPU), pair, slots, ctx_max, prompt, (first, copies))
    assert moved.draft[0] is not first.draft[0] and moved.draft[0] is not copies.draft[0]
    assert _shares(moved.verify, first.verify)
    _same(moved.draft[0], PassTable.build(pair.draft, first.keys["draft"][0], 1, GPU, slots, ctx_max))
    other_d = PassTables(setup(hw, d=d + 1), pair, slots, ctx_max, prompt, (first,))
    assert other_d.verify[0] is not first.verify[0] and len(other_d.verify[0]) == d + 2
    assert _shares(other_d.draft, first.draft)  # the draft's passes do not depend on d
    longer = PassTables(setup(hw, d=d), pair, slots, ctx_max + 16, prompt, (first,))
    assert longer.draft[0] is not first.draft[0] and longer.verify[0] is not first.verify[0]
    more = PassTables(setup(hw, d=d), pair, slots + 1, ctx_max, prompt, (first,))
    assert more.draft[0] is not first.draft[0] and more.prefill[0] is not first.prefill[0]
    # a dynamic set takes the variant it shares with a static one (its first mapping), builds the flipped one
    dyn = PassTables(setup(hw, d=d, dynamic=True), pair, slots, ctx_max, prompt, (first,))
    assert dyn.verify[0] is first.verify[0] and dyn.verify[1] is not first.verify[0]
    flipped = PassTables(setup(hw, d=d, target_mapping=GPU, draft_mapping=PIM), pair, slots, ctx_max, prompt)
    for got, want in zip(dyn.verify[1], flipped.verify[0], strict=True):
        _same(got, want)
    # AD on the same hardware: the target's prefill is shared, its decode table its own (and shared by the next
    # with its mapping, not by one with another)
    ad = PassTables(setup(hw, decoding="ad"), pair, slots, ctx_max, prompt, (first,))
    assert ad.prefill[0] is first.prefill[0] and len(ad.prefill) == 1 and ad.decode is not None
    assert PassTables(setup(hw, decoding="ad"), pair, slots, ctx_max, prompt, (first, ad)).decode is ad.decode
    ad_gpu = PassTables(setup(hw, decoding="ad", target_mapping=GPU), pair, slots, ctx_max, prompt, (first, ad))
    assert ad_gpu.decode is not ad.decode  # another target mapping: its own decode table
    _same(ad_gpu.decode, PassTable.build(pair.target, ad.keys["decode"][0], 1, GPU, slots, ctx_max))
    other_hw = PassTables(setup(hw, "dgx-a100", d=d), pair, slots, ctx_max, prompt, (first,))
    assert other_hw.prefill[0] is not first.prefill[0] and other_hw.draft[0] is not first.draft[0]


def test_a_set_for_fewer_requests_takes_the_first_rows_of_an_earlier_sets_tables(pair, hw):
    """A candidate with more micro-batches serves fewer requests a pass: it takes the first rows of the tables of
    one with fewer (the set with the fewest rows that are enough; the verification's tables themselves, whose
    rows are costed as runs ask for them), each equal to the one built alone, and a set for more requests than
    any earlier one builds its own."""
    d, ctx_max, prompt = 3, 300.0, 63.6
    whole = PassTables(setup(hw, d=d, dynamic=True), pair, 6, ctx_max, prompt)
    half = PassTables(setup(hw, d=d, dynamic=True, mb=2), pair, 3, ctx_max, prompt, (whole,))
    alone = PassTables(setup(hw, d=d, dynamic=True, mb=2), pair, 3, ctx_max, prompt)
    for got, want in zip(half.flat(), alone.flat(), strict=True):
        np.testing.assert_array_equal(got, want)
    assert _shares(half.verify_rows, whole.verify_rows)
    for got, want in zip(
        [*half.draft, *half.verify[1], *half.prefill], [*alone.draft, *alone.verify[1], *alone.prefill], strict=True
    ):
        _same(got.head(4), want)
        assert np.shares_memory(got.table.energy_j, got.table.stack)  # the accounting reads energy off the stack
    third = PassTables(setup(hw, d=d, dynamic=True, mb=3), pair, 2, ctx_max, prompt, (whole, half))
    assert third.draft[0].gpu.shape[0] == 3 and half.draft[0].gpu.shape[0] == 4
    again = PassTables(setup(hw, d=d, dynamic=True, mb=2), pair, 3, ctx_max, prompt, (whole, half))
    assert _shares(again.draft, half.draft) and again.verify[1] is half.verify[1]  # the fewest rows that serve
    more = PassTables(setup(hw, d=d), pair, 7, ctx_max, prompt, (whole, half))
    assert more.draft[0].gpu.shape[0] == 8 and more.verify[0][0] is not whole.verify[0][0]


@pytest.mark.parametrize("mapping", [PIM, GPU])
def test_verification_rows_costed_apart_hold_the_whole_tables_values_to_the_bit(pair, hw, mapping):
    """``RowTables``: the rows costed at once, then those asked for (again, and in any order), hold the values of
    the table built whole, every quantity to the bit; rows never costed are marked so and hold zeros."""
    system = setup(hw).system
    whole = PassTable.build_each(pair.target, system, range(1, 5), mapping, 9, 300.0, 1, 40.0)
    rows = RowTables(pair.target, system, range(1, 5), mapping, 9, 300.0, 40.0, [9])
    assert np.flatnonzero(rows.have).tolist() == [9]
    for ask in ([3], [0, 3, 7], [5, 1], [9, 2]):
        rows.fill(ask)
    done = rows.have
    assert np.flatnonzero(done).tolist() == [0, 1, 2, 3, 5, 7, 9]
    for got, want in zip(rows.tables, whole, strict=True):
        np.testing.assert_array_equal(got.gpu[done], want.gpu[done])
        np.testing.assert_array_equal(got.pim[done], want.pim[done])
        np.testing.assert_array_equal(got.table.stack[:, done], want.table.stack[:, done])
        np.testing.assert_array_equal(got.table.time_s[done], want.table.time_s[done])
        assert not got.table.stack[:, ~done].any() and not got.gpu[~done].any()


def test_a_pool_set_costs_the_full_pass_at_once_then_rows_as_asked_then_the_rest_at_once(pair, hw):
    """A Shared Pool's set whose runs ask for rows costs the full pass's verification row at once, then each row
    asked for alone, and at the row after ``ROWS_APART`` every row left; each ask returns the rows costed by then.
    A micro-batch set, and a set whose runs do not ask (an open loop's), cost every row at once."""
    s = dataclasses.replace(pooled(hw, True, pool=64), dynamic=True)
    tables = PassTables(s, pair, 12, 300.0, 63.6, asks=True)
    assert np.flatnonzero(tables.verify_known()).tolist() == [12]
    costed = [[3, 12], [3, 7, 12], [3, 7, 12], [1, 3, 7, 12], [1, 3, 7, 9, 12], [1, 3, 7, 9, 12]]
    assert ROWS_APART == 4
    for n, want in zip([3, 7, 3, 1, 9, 12], costed, strict=True):
        got = tables.fill_verify(n)
        assert np.flatnonzero(got).tolist() == want and np.flatnonzero(tables.verify_known()).tolist() == want
    assert tables.fill_verify(5).all()
    _, _, vg, vp, *_ = tables.flat()
    whole = PassTables(s, pair, 12, 300.0, 63.6)  # every row at once
    np.testing.assert_array_equal(vg, whole.flat()[2])
    np.testing.assert_array_equal(vp, whole.flat()[3])
    assert PassTables(setup(hw, mb=2), pair, 12, 300.0, 63.6, asks=True).verify_known().all()  # no pool: unasked
    assert PassTables(s, pair, 12, 300.0, 63.6).verify_known().all()  # not asked for (an open loop's)


def test_a_pool_run_costs_the_rows_it_reads_and_its_accounting_refuses_rows_never_costed(pair, hw):
    """SADDLE on a closed loop that takes whatever entries are ready verifies passes of several sizes: its tables
    start with the full pass's row and cost the rows its verifications read (past ``ROWS_APART``, all), each copied
    into what the loop reads. Accounting the same log against tables that never costed those rows is an error, not
    a sum of zeros. An open loop's tables cost every row at once."""
    s = dataclasses.replace(pooled(hw, True, "idle", pool=64), dynamic=True)
    conf, later, acc, out, lengths = _inputs(5, 1, 24)
    work = Workload(np.full((1, 24), 64.0), out, acc, lengths, conf, later)
    serving = Continuous(6, 2, True)
    tables, (rep,) = replica_logs(s, pair, work, serving)
    read = set(rep.pass_n[rep.pass_table == loop.TABLES.index("verify")].tolist())
    costed = set(np.flatnonzero(tables.verify_known()).tolist())
    assert 2 < len(read) <= ROWS_APART and costed == read | {6}
    _, _, vg, vp, *_ = tables.flat()
    for v, rows in enumerate(tables.verify_rows):
        np.testing.assert_array_equal(vg[v][:, sorted(read)], rows.gpu[:, sorted(read)])
        np.testing.assert_array_equal(vp[v][:, sorted(read)], rows.pim[:, sorted(read)])
    with pytest.raises(RuntimeError, match="rows of its tables never costed"):
        account(pass_tables(s, pair, work, serving), rep, serving)
    arrivals = np.cumsum(np.random.default_rng(5).exponential(0.05, (1, 24)), axis=1)
    assert pass_tables(s, pair, dataclasses.replace(work, arrivals=arrivals), serving).verify_known().all()


def test_a_run_costs_passes_up_to_its_largest_micro_batch_or_every_slot_on_a_shared_pool(pair, hw):
    """Each pass of the micro-batch loop serves one micro-batch (its prefills too), so its tables stop at the
    largest; a Shared Pool verifies and prefills across micro-batches. Tables for fewer requests than a run's
    passes serve are refused: the compiled loop reads them unchecked."""
    prompt, out = np.full((1, 10), 20.0), np.full((1, 10), 30)
    acc = np.ones((1, 10, 60), bool)
    conf = np.full((1, 10, 60), 0.9, np.float32)
    work = Workload(prompt, out, acc, np.full((1, 10, 60), 4), conf)
    for s, rows in ((setup(hw, d=2, mb=3), 4), (setup(hw, d=2, mb=1), 10), (pooled(hw, True, mb=3, d=2), 10)):
        assert pass_tables(s, pair, work).n_max == rows
        assert pass_tables(s, pair, work).draft[0].gpu.shape[0] == rows + 1
    small = pass_tables(setup(hw, d=2, mb=3), pair, work)
    assert pass_tables(setup(hw, d=2, mb=3), pair, work, None, (small,)).draft[0] is small.draft[0]  # reuse
    with pytest.raises(SimError, match="pass tables for 4 requests; a pass of this run serves up to 10"):
        simulate_core(setup(hw, d=2, mb=1), pair, work, tables=small)


def test_pass_tables_of_ad_hold_the_decode_pass_and_the_targets_prefill(pair, hw):
    s = setup(hw, decoding="ad", target_mapping=GPU)
    tables = PassTables(s, pair, 4, 100.0, 0.2)  # a prompt below one token prefills one
    assert tables.draft == [] and tables.verify == [] and len(tables.prefill) == 1
    _same(tables.decode, PassTable.build(pair.target, s.system, 1, GPU, 4, 100.0))
    _same(tables.prefill[0], PassTable.build(pair.target, s.system, 1, PREFILL_MAPPING, 4, 1.0))
    dg, dp, vg, vp, decg, decp, pg, pp, *_ = tables.flat()
    assert dg.shape == (0, 1, 2) and vg.shape == (0, 1, 1, 2) and pg.shape[0] == 1
    np.testing.assert_array_equal(decg, tables.decode.gpu)
    assert (decp == 0).all()  # everything on the GPUs


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("system,draft_variants", [("saddle-tp", 2), ("attacc-pim", 1)])
def test_the_dynamic_scheduler_adds_the_other_placement_of_draft_fc_and_target_attention(
    pair, hw, system, draft_variants, workers
):
    """With the dynamic scheduler the target's attention may go to either device (variant 1 flips it);
    the draft's FC too, where the weights live in PIM (not on AttAcc, whose weights stay in the GPUs'
    memory); ``flat`` flags the variants on PIM. Built on one thread or on two, each table is the one built
    alone."""
    d = 2
    s = setup(hw, system, d=d, dynamic=True, target_mapping=PIM, draft_mapping=GPU)
    tables = PassTables(s, pair, 3, 100.0, 64.0, workers=workers)
    assert tables.target_maps == [PIM, GPU] and len(tables.verify) == 2
    fc_flipped = {"fc": "pim", "attention": "gpu"}
    assert tables.draft_maps == [GPU, fc_flipped][:draft_variants] and len(tables.draft) == draft_variants
    for q in range(1, d + 2):
        _same(tables.verify[0][q - 1], PassTable.build(pair.target, s.system, q, PIM, 3, 100.0))
        _same(tables.verify[1][q - 1], PassTable.build(pair.target, s.system, q, GPU, 3, 100.0))
    if draft_variants == 2:
        _same(tables.draft[1], PassTable.build(pair.draft, s.system, 1, fc_flipped, 3, 100.0))
    *_, fc_on_pim, attn_on_pim = tables.flat()
    assert fc_on_pim.tolist() == [0, 1][:draft_variants] + [0] and attn_on_pim.tolist() == [1, 0, 0]


@pytest.mark.parametrize("ctx_min,first", [(40.0, 2), (32.0, 2), (31.9, 1), (0.0, 0), (900.0, 32)])
def test_tables_cost_the_context_grid_from_the_point_at_or_below_the_shortest_prompt(pair, hw, ctx_min, first):
    """No pass reads a context below the shortest prompt, so the grid points below the one at or below it are not
    costed (NaN: a read would show in every sum); the rest are the cells of the whole grid's table, to the bit (the
    last two points always: a context past the grid reads them). The tables a run builds (verification, draft,
    decode) start at its shortest prompt."""
    s = hw.system("saddle-tp")
    whole = PassTable.build_each(pair.target, s, range(1, 4), PIM, 5, 500.0)
    for got, want in zip(
        PassTable.build_each(pair.target, s, range(1, 4), PIM, 5, 500.0, 1, ctx_min), whole, strict=True
    ):
        for a, b in ((got.gpu, want.gpu), (got.pim, want.pim), (got.table.time_s, want.table.time_s)):
            assert np.isnan(a[:, :first]).all() and not np.isnan(a[:, first:]).any()
            np.testing.assert_array_equal(a[:, first:], b[:, first:])
        assert np.isnan(got.table.stack[..., :first]).all()
        np.testing.assert_array_equal(got.table.stack[..., first:], want.table.stack[..., first:])
    prompt = np.array([[70.0, 40.0, 90.0]])
    tables = pass_tables(setup(hw, d=2), pair, Workload(prompt, np.full((1, 3), 8), streams(2, 1, 3, 40)[1]))
    ad = pass_tables(setup(hw, decoding="ad"), pair, Workload(prompt, np.full((1, 3), 8)))
    for t in (tables.verify[0][0], tables.draft[0], ad.decode):
        assert np.isnan(t.gpu[:, :2]).all() and not np.isnan(t.gpu[:, 2:]).any()
    assert not np.isnan(tables.prefill[0].gpu).any()  # a prefill reads context 0


def test_a_pass_table_reads_gpu_plus_link_and_pim_seconds_linear_in_context(pair, hw):
    t = PassTable.build(pair.target, hw.system("saddle-tp"), 3, PIM, 6, 500.0)
    for n, ctx in ((1, 0.0), (4, 37.5), (6, 200.0), (2, 500.0)):
        c = t.table.lookup(n, ctx)
        g, p = t.at(n, ctx)
        assert g == pytest.approx(float(c.busy_s["gpu"] + c.busy_s["link"]), rel=1e-12)
        assert p == pytest.approx(float(c.busy_s["pim"]), rel=1e-12) and p > 0
    assert t.at(0, 100.0) == (0.0, 0.0)


def test_a_cost_tables_weighted_sums_are_its_lookups_summed_to_the_bit(pair, hw):
    """``CostTable.sums`` (one gather over the stacked tables: what the accounting reads) gives, for every
    quantity, exactly ``float((lookup(n, ctx).<quantity> * w1 * w2).sum())``, off the grid and on it,
    with the tables' keys in their order."""
    rng = np.random.default_rng(3)
    for system, mapping in (("saddle-tp", PIM), ("dgx-a100", GPU), ("saddle", PIM)):
        t = PassTable.build(pair.target, hw.system(system), 3, mapping, 40, 900.0).table
        for size in (1, 7, 300):
            n = rng.integers(0, 41, size)
            ctx = np.where(rng.random(size) < 0.3, 16.0 * rng.integers(0, 56, size), rng.uniform(0, 900, size))
            w1, w2 = rng.random(size), rng.random(size)
            energy, busy, by_class = t.sums(n, ctx, w1, w2)
            c = t.lookup(n, ctx)
            assert energy == float((c.energy_j * w1 * w2).sum())
            assert list(busy) == list(c.busy_s) and list(by_class) == list(c.by_class_s)
            for got, want in ((busy, c.busy_s), (by_class, c.by_class_s)):
                for k, v in want.items():
                    assert got[k] == float((v * w1 * w2).sum()), k


def test_the_dynamic_scheduler_runs_every_pass_on_its_faster_variant(pair, hw, monkeypatch):
    """Per pass, draft FC and target attention go to whichever device finishes the pass sooner (the pass
    tables at its requests, context and tokens a request); starting from either placement of the target's
    attention, both devices win some passes, and the reported shares count them."""
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


# -- micro-batches -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("m", [1, 2, 3])
def test_simulate_core_cuts_the_slots_into_the_setups_micro_batches(pair, hw, m):
    """The count is the setup's (the search, adsl.sim.search, sets it): m near-equal micro-batches whatever
    the contexts, and one micro-batch runs exactly as a setup that cannot split."""
    batch, o, d = 64, 24, 4
    s = setup(hw, d=d, mb=m, draft_mapping=GPU)
    _, acc = streams(6, 1, batch, o + d + 1, p=0.7)
    out = np.full((1, batch), o)
    for prompt in (64.0, 8000.0):
        res = simulate_core(s, pair, Workload(np.full((1, batch), prompt), out, acc))
        assert res.placement["micro_batches"] == m
        np.testing.assert_array_equal(res.tokens, [batch * o])
    if m == 1:
        plain = dataclasses.replace(s, micro_batching=MicroBatching(1, split="always"))
        ref = simulate_core(plain, pair, Workload(np.full((1, batch), 64.0), out, acc))
        res = simulate_core(s, pair, Workload(np.full((1, batch), 64.0), out, acc))
        for field in ("time_s", "energy_j", "iterations", "drafted"):
            np.testing.assert_array_equal(getattr(res, field), getattr(ref, field), err_msg=field)


# -- prefill ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("copies", [1, 2])
@pytest.mark.parametrize("p", [1.0, 64.0])
def test_prefill_passes_cost_the_prefill_tables_at_the_requests_they_admit(pair, hw, monkeypatch, copies, p):
    """Continuous batching with prefill, one micro-batch: the first wave runs without prefill; each later
    admission prefills its requests through the target, then the draft (every copy), at the mean prompt
    (a one-token prompt included), back to back, each job as long as its table says; every pass runs
    one after another, so the whole run is the sum of its jobs."""
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


def test_simulate_core_rejects_missing_or_short_acceptance_streams_naming_the_lengths(pair, hw):
    """A request drafts from positions below its output and reads at most d positions on: streams need
    out.max() + d + 1 positions, and so do the draft lengths and confidences."""
    d = 3
    s = setup(hw, d=d)
    prompt, out = np.full((2, 3), 64.0), np.array([[5, 9, 7], [4, 4, 4]])
    need = 9 + d + 1
    with pytest.raises(SimError, match=r"^SD needs acceptance streams of shape \(2, 3, T\)$"):
        simulate_core(s, pair, Workload(prompt, out, None))
    conf, acc = streams(0, 2, 3, need)
    res = simulate_core(s, pair, Workload(prompt, out, acc))  # exactly long enough
    np.testing.assert_array_equal(res.tokens, out.sum(axis=1))
    lengths = np.full(acc.shape, d)
    adaptive = setup(hw, d=d, policy="running_product")
    work = Workload(prompt, out, acc, lengths, conf, conf, light_lengths=lengths)
    for name in ("draft_lengths", "confidence", "confidence_later", "light_lengths"):
        a = getattr(work, name)
        for bad in (a[..., : need - 1], a[:1], a[:, :2]):
            text = f"{name} must be (replicas, requests, >= {need}), got {bad.shape}"
            with pytest.raises(SimError, match=f"^{re.escape(text)}$"):
                simulate_core(adaptive, pair, dataclasses.replace(work, **{name: bad}))
    res = simulate_core(adaptive, pair, work)
    np.testing.assert_array_equal(res.tokens, out.sum(axis=1))
    # AD needs no streams at all
    simulate_core(setup(hw, decoding="ad"), pair, Workload(prompt, out))


def _tiny(seed, n):
    """One replica of ``n`` requests of 8 output tokens: confidences, acceptance streams, running-product
    lengths up to 9, prompts and outputs."""
    conf, acc = streams(seed, 1, n, 60)
    lengths = np.stack([running_product_lengths(c, 0.5, 9) for c in conf])
    return conf, acc, lengths, np.full((1, n), 64.0), np.full((1, n), 8)


def test_simulate_core_rejects_a_pool_without_room_for_one_query_token_per_request(pair, hw):
    n = 4
    conf, acc, lengths, prompt, out = _tiny(2, n)
    for pool in (n - 1, n):
        s = dataclasses.replace(setup(hw, policy="running_product", pool_tokens=pool), name="tiny-pool")
        with pytest.raises(SimError, match=rf"^tiny-pool: pool of {pool} tokens cannot hold"):
            simulate_core(s, pair, Workload(prompt, out, acc, lengths, conf, conf))
    with pytest.raises(SimError, match=r"^tiny-pool: pool of 4 tokens cannot hold one query token per request$"):
        simulate_core(s, pair, Workload(prompt, out, acc, lengths, conf, conf), Continuous(4, 0))  # one a slot
    res = simulate_core(
        setup(hw, policy="running_product", pool_tokens=n + 1), pair, Workload(prompt, out, acc, lengths, conf)
    )
    np.testing.assert_array_equal(res.tokens, out.sum(axis=1))
    assert (res.pool["pool_max"] <= n + 1).all()


def test_simulate_core_rejects_an_asynchronous_pool_without_draft_lengths(pair, hw):
    conf, acc = streams(2, 1, 4, 60)
    s = dataclasses.replace(pooled(hw, True), name="eager")
    with pytest.raises(
        SimError, match=r"^eager: the asynchronous pool needs each request's draft lengths \(draft_lengths\)$"
    ):
        simulate_core(s, pair, Workload(np.full((1, 4), 64.0), np.full((1, 4), 8), acc, None, conf, conf))


@pytest.mark.parametrize("eager", [True, False])
def test_simulate_core_rejects_a_pool_without_confidences(pair, hw, eager):
    """A full pool admits the drafts of highest running product: without confidences it has no order to cut by
    (the loop would read past its placeholder), so the run is refused whether or not the pool would fill."""
    conf, acc = streams(2, 1, 4, 60)
    s = dataclasses.replace(pooled(hw, eager), name="pool")
    with pytest.raises(SimError, match=r"^pool: the Shared Pool admits drafts by their running product: it needs"):
        simulate_core(s, pair, Workload(np.full((1, 4), 64.0), np.full((1, 4), 8), acc, np.full(conf.shape, 2)))


def test_confidences_that_are_no_probabilities_and_serving_without_slots_are_refused(pair, hw):
    """A pool ranks drafts by products of their confidences: a workload with one outside [0, 1] or NaN is
    refused, naming the field; serving on no slot is refused (an open loop would wait for a free slot for ever)."""
    conf, acc = streams(2, 1, 4, 60)
    work = Workload(np.full((1, 4), 64.0), np.full((1, 4), 8), acc, np.full(conf.shape, 2), conf)
    for field, bad in (("confidence", 1.5), ("confidence", np.nan), ("confidence_later", -0.1)):
        values = conf.copy()
        values[0, 1, 3] = bad
        with pytest.raises(SimError, match=rf"^{field} must lie in \[0, 1\] \(a probability; NaN is not one\)$"):
            dataclasses.replace(work, **{field: values})
    edges = conf.copy()
    edges[0, 1, 3], edges[0, 2, 3] = 0.0, 1.0  # certain rejection and certain acceptance are probabilities
    assert dataclasses.replace(work, confidence=edges, confidence_later=edges).confidence is edges
    assert dataclasses.replace(work, confidence=conf[..., :0]).confidence.size == 0  # too short: the run says so
    for dtype in (np.float16, np.float64, np.longdouble):  # any float type is checked alike
        assert dataclasses.replace(work, confidence=edges.astype(dtype)).confidence.dtype == dtype
        with pytest.raises(SimError, match=r"^confidence must lie in \[0, 1\]"):
            dataclasses.replace(work, confidence=(edges * 2).astype(dtype))
    with pytest.raises(SimError, match=r"^serving needs at least one slot, got 0$"):
        simulate_core(pooled(hw, True), pair, work, Continuous(0, 0))


def test_simulate_core_rejects_open_loops_it_cannot_run(pair, hw):
    n = 4
    conf, acc, lengths, prompt, out = _tiny(3, n)
    serving = Continuous(2, 1, False)
    s = setup(hw, mb=2)
    good = np.array([[0.0, 0.1, 0.2, 0.3]])
    for arrivals, sv in ((good, None), (good[:, :3], serving), (good[:, ::-1], serving)):
        with pytest.raises(SimError, match="^open loop needs serving slots and sorted arrival times"):
            simulate_core(s, pair, Workload(prompt, out, acc, arrivals=arrivals), serving=sv)


def test_the_pool_without_eager_drafting_serves_open_loops_too(pair, hw, monkeypatch):
    """SADDLE-p (the pool with eager drafting off) on an open loop: every request is admitted once it has
    arrived and emits its whole output."""
    conf, acc, lengths, prompt, out = _tiny(3, 4)
    arrivals = np.array([[0.0, 0.1, 0.2, 0.3]])
    s = dataclasses.replace(setup(hw, policy="running_product", pool_tokens=20), name="saddle-p")
    work = Workload(prompt, out, acc, lengths, conf, conf, arrivals=arrivals)
    _, _, (rep,) = _logged(monkeypatch, s, pair, work, Continuous(2, 1, False))
    assert (rep.t_admit >= arrivals[0]).all() and np.isfinite(rep.t_done).all()
    assert rep.event_emitted.sum() == out.sum()
