"""The cost of one forward pass of a batch (``adsl.sim.timing``), each expectation derived by hand from the
cost model's one pass (``adsl.perf.cost.pass_cost``): pipelined micro-batches, GPU/PIM sub-batch overlap,
the best split, replicated copies, and the cost tables' grid, lookups and sums."""

import dataclasses

import numpy as np
import pytest

from adsl.perf.cost import pass_cost
from adsl.settings import MicroBatching
from adsl.sim.timing import CTX_STEP, BatchCost, CostTable, batch_pass
from tests.sim.builders import GPU, PIM, PIM_DRAFT, overlapping

PAIR = "OPT-66B"
OVERLAP = MicroBatching(2, overlap=True, split="always")


def _dev(c):
    return c.time_by("device")


def _close(a, b, rel=1e-12):
    np.testing.assert_allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float), rtol=rel, atol=0.0)


# -- BatchCost ----------------------------------------------------------------------------------------------


def test_costs_add_select_and_combine_over_the_union_of_their_devices_and_classes():
    """A device or class missing on one side counts 0: add, select and combine keep every key, sorted."""
    a = BatchCost(
        np.array([1.0, 2.0]), np.array([3.0, 4.0]), {"link": np.array([5.0, 6.0]), "gpu": np.array([7.0, 8.0])}, {}
    )
    b = BatchCost(
        np.array([10.0, 20.0]),
        np.array([30.0, 40.0]),
        {"pim": np.array([50.0, 60.0]), "gpu": np.array([70.0, 80.0])},
        {"fc": np.array([1.5, 2.5])},
    )
    s = a.add(b)
    assert list(s.busy_s) == ["gpu", "link", "pim"] and list(s.by_class_s) == ["fc"]
    _close(s.time_s, [11.0, 22.0])
    _close(s.energy_j, [33.0, 44.0])
    _close(s.busy_s["gpu"], [77.0, 88.0])
    _close(s.busy_s["link"], [5.0, 6.0])
    _close(s.busy_s["pim"], [50.0, 60.0])
    _close(s.by_class_s["fc"], [1.5, 2.5])
    c = a.combine(b, 0.25, 2.0)  # 2 x (0.75 a + 0.25 b)
    _close(c.time_s, [6.5, 13.0])
    _close(c.busy_s["link"], [7.5, 9.0])
    _close(c.busy_s["pim"], [25.0, 30.0])
    _close(c.by_class_s["fc"], [0.75, 1.25])
    w = a.select(b, np.array([True, False]))
    _close(w.time_s, [10.0, 2.0])
    _close(w.busy_s["link"], [0.0, 6.0])
    _close(w.busy_s["pim"], [50.0, 0.0])


# -- batch_pass: splits -------------------------------------------------------------------------------------


@pytest.mark.parametrize("stages", [8, 2])
def test_a_pipelined_split_pass_is_its_micro_batches_through_the_stages(pair, hw, stages):
    """s stages, m micro-batches: time (m + s - 1) / s x one's, energy, busy, class m x one's; no request, no cost."""
    s = hw.system("saddle").replace(pipeline_stages=stages)
    n = np.array([0.0, 2.0, 4.0, 16.0, 6.0])
    m = np.array([1.0, 2.0, 4.0, 4.0, 4.0])
    got = batch_pass(pair.target, s, n, 3, 640.0, PIM, MicroBatching(4, split="always"))
    one = pass_cost(pair.target, s, n[1:] / m[1:], 3, 640.0, PIM)  # one request a micro-batch, then 4 and 1.5
    assert got.time_s[0] == got.energy_j[0] == 0.0
    _close(got.time_s[1:], (m[1:] + stages - 1) / stages * one.total_time_s)
    _close(got.energy_j[1:], m[1:] * one.total_energy_j)
    assert sorted(got.busy_s) == sorted(_dev(one)) and sorted(got.by_class_s) == sorted(one.time_by("cls"))
    for mine, want in ((got.busy_s, _dev(one)), (got.by_class_s, one.time_by("cls"))):
        for k, v in want.items():
            assert mine[k][0] == 0.0, k
            _close(mine[k][1:], m[1:] * v)


def test_overlapped_sub_batches_take_the_busier_device_m_times_plus_the_other_once(pair, hw):
    """m overlapped sub-batches: max(m gpu, m pim) + min(gpu, pim), the link on the GPU side; energy, busy m x one's."""
    s = hw.system("attacc-pim")  # 8-way tensor parallel: all-reduces on the link
    n = np.array([2.0, 64.0, 0.0])
    got = batch_pass(pair.target, s, n, 1, 2048.0, PIM, OVERLAP)
    one = pass_cost(pair.target, s, n[:2] / 2, 1, 2048.0, PIM)
    d = _dev(one)
    gpu, pim = d["gpu"] + d["link"], d["pim"]
    assert (d["link"] > 0).all() and (d["gpu"] > 0).all() and (pim > 0).all()
    _close(got.time_s[:2], np.maximum(2 * gpu, 2 * pim) + np.minimum(gpu, pim))
    assert (got.time_s[:2] < 2 * one.total_time_s).all() and got.time_s[2] == 0.0
    _close(got.energy_j[:2], 2 * one.total_energy_j)
    for k, v in d.items():
        _close(got.busy_s[k][:2], 2 * v)


def test_overlapped_sub_batches_with_one_device_idle(pair, hw):
    """Overlap with no PIM seconds is m x one sub-batch; with no GPU seconds the GPU side is the link alone."""
    s = hw.system("attacc-pim")
    got = batch_pass(pair.target, s, np.array([8.0, 30.0]), 1, 512.0, GPU, OVERLAP)
    one = pass_cost(pair.target, s, np.array([4.0, 15.0]), 1, 512.0, GPU)
    assert "pim" not in _dev(one)
    _close(got.time_s, 2 * one.total_time_s)
    s = overlapping(hw.system("saddle-tp"))  # weights in the stacks, dual row buffers: FC on PIM, overlapped
    got = batch_pass(pair.target, s, np.array([8.0, 30.0]), 1, 512.0, PIM_DRAFT, OVERLAP)
    one = pass_cost(pair.target, s, np.array([4.0, 15.0]), 1, 512.0, PIM_DRAFT)
    d = _dev(one)
    assert "gpu" not in d and (d["link"] > 0).all()
    _close(got.time_s, np.maximum(2 * d["link"], 2 * d["pim"]) + np.minimum(d["link"], d["pim"]))


def test_shared_stacks_serialise_the_sub_batches(pair, hw):
    """Stacks the GPU reads its weights from (exclusive access) take turns: m x one sub-batch's pass."""
    s = hw.system("saddle-tp")
    assert s.shared_stacks
    got = batch_pass(pair.target, s, np.array([8.0, 30.0]), 1, 512.0, PIM, OVERLAP)
    _close(got.time_s, 2 * pass_cost(pair.target, s, np.array([4.0, 15.0]), 1, 512.0, PIM).total_time_s)


@pytest.mark.parametrize(
    "system,mb",
    [
        ("attacc-pim", MicroBatching(1, overlap=True)),
        ("attacc-pim", MicroBatching(4, overlap=True, split="always")),
        ("saddle", MicroBatching(4, split="always")),
        ("dgx-a100", MicroBatching()),
    ],
)
def test_a_pass_not_split_is_the_cost_models_pass_to_the_bit(pair, hw, system, mb):
    """One micro-batch (one allowed, or under two requests) is the cost model's pass of the batch, to the bit."""
    s = hw.system(system)
    mapping = PIM if s.pim else GPU
    n = np.arange(1.0, 65.0) if mb.micro_batches == 1 else np.array([0.5, 1.0, 1.5, 1.99])
    got = batch_pass(pair.target, s, n, 2, 1000.0, mapping, mb)
    want = pass_cost(pair.target, s, n, 2, 1000.0, mapping)
    np.testing.assert_array_equal(got.time_s, want.total_time_s)
    np.testing.assert_array_equal(got.energy_j, want.total_energy_j)
    for mine, theirs in ((got.busy_s, _dev(want)), (got.by_class_s, want.time_by("cls"))):
        assert sorted(mine) == sorted(theirs)
        for k, v in theirs.items():
            np.testing.assert_array_equal(mine[k], v)


def test_the_best_split_is_taken_only_where_it_is_faster(pair, hw):
    """split="best" takes the M micro-batches (time, energy, busy) only where faster than one batch; both occur."""
    s = hw.system("saddle")
    n = np.array([1.0, 2.0, 3.0, 8.0, 64.0, 64.0])
    q = np.array([1.0, 1.0, 1.0, 1.0, 1.0, 32.0])
    best = batch_pass(pair.target, s, n, q, 256.0, PIM, MicroBatching(2))
    split = batch_pass(pair.target, s, n, q, 256.0, PIM, MicroBatching(2, split="always"))
    whole = batch_pass(pair.target, s, n, q, 256.0, PIM, MicroBatching(1))
    faster = split.time_s < whole.time_s
    assert faster.any() and not faster.all()
    for mine, a, b in (
        (best.time_s, split.time_s, whole.time_s),
        (best.energy_j, split.energy_j, whole.energy_j),
        (best.busy_s["pim"], split.busy_s["pim"], whole.busy_s["pim"]),
    ):
        np.testing.assert_array_equal(mine, np.where(faster, a, b))


def test_a_split_that_only_ties_one_batch_is_not_taken(pair, hw):
    """A compute-bound GPU without kernel overheads: two micro-batches tie one batch, and the tie keeps one batch."""
    s = hw.system("dgx-a100").replace(tensor_parallel=1)
    gpu = dataclasses.replace(s.gpu, peak_flops=s.gpu.peak_flops * 1e-6)
    runtime = dataclasses.replace(s.runtime, fixed_s={k: 0.0 for k in s.runtime.fixed_s})
    s = s.replace(gpu=gpu, runtime=runtime)
    best = batch_pass(pair.target, s, 2.0, 1, 128.0, GPU, MicroBatching(2))
    split = batch_pass(pair.target, s, 2.0, 1, 128.0, GPU, MicroBatching(2, split="always"))
    whole = pass_cost(pair.target, s, 2.0, 1, 128.0, GPU)
    assert float(split.time_s) == float(whole.total_time_s)  # the tie
    assert float(split.energy_j) > float(whole.total_energy_j)
    assert float(best.energy_j) == float(whole.total_energy_j)


# -- batch_pass: replicated copies --------------------------------------------------------------------------


@pytest.mark.parametrize("copies", [2, 3])
def test_replicated_copies_take_the_busiest_copys_time_and_the_mean_copys_energy(pair, hw, copies):
    """Copies: time, busy, class of ceil(n / c) requests on one device; energy min(n, c) x that of n / min(n, c)."""
    s = hw.system("saddle")  # 8 pipeline stages
    one = s.replace(tensor_parallel=1, pipeline_stages=1)
    n = np.array([0.0, 1.0, 2.0, 5.0, 7.0])
    got = batch_pass(pair.draft, s, n, 1, 300.0, GPU, MicroBatching(), copies)
    busiest = pass_cost(pair.draft, one, np.ceil(n[1:] / copies), 1, 300.0, GPU)
    used = np.minimum(n[1:], copies)
    mean = pass_cost(pair.draft, one, n[1:] / used, 1, 300.0, GPU)
    assert got.time_s[0] == got.energy_j[0] == 0.0
    _close(got.time_s[1:], busiest.total_time_s)
    _close(got.energy_j[1:], used * mean.total_energy_j)
    for mine, want in ((got.busy_s, _dev(busiest)), (got.by_class_s, busiest.time_by("cls"))):
        for k, v in want.items():
            _close(mine[k][1:], v)
    # the energy is affine in the request count: 7 requests over 3 copies are 3 + 2 + 2
    if copies == 3:
        parts = pass_cost(pair.draft, one, np.array([3.0, 2.0, 2.0]), 1, 300.0, GPU).total_energy_j
        assert got.energy_j[-1] == pytest.approx(parts.sum(), rel=1e-9)


# -- CostTable ----------------------------------------------------------------------------------------------


def test_cost_tables_of_several_q_are_batch_pass_on_the_grid(pair, hw):
    """build_each (one copy by default) gives each q build's table, batch_pass on the grid, read back by lookup."""
    s = hw.system("attacc-pim")  # 8-way tensor parallel
    tables = CostTable.build_each(pair.target, s, [1, 3], PIM, MicroBatching(), 6, 64.0)
    ctx = np.arange(0.0, 96.0, CTX_STEP)
    n = np.arange(7.0)[:, None]
    for q, t in zip((1, 3), tables, strict=True):
        direct = batch_pass(pair.target, s, n, q, ctx[None, :], PIM, MicroBatching())
        _close(t.time_s, direct.time_s)
        _close(t.energy_j, direct.energy_j)
        assert list(t.busy_s) == list(direct.busy_s) and list(t.by_class_s) == list(direct.by_class_s)
        for k, v in direct.busy_s.items():  # the link's seconds do not depend on the context
            _close(t.busy_s[k], np.broadcast_to(v, t.time_s.shape))
        alone = CostTable.build(pair.target, s, q, PIM, MicroBatching(), 6, 64.0)
        np.testing.assert_array_equal(alone.time_s, t.time_s)
        np.testing.assert_array_equal(alone.stack, t.stack)
        on = t.lookup(np.array([1, 6, 3]), np.array([0.0, 80.0, 48.0]))
        _close(on.time_s, [direct.time_s[1, 0], direct.time_s[6, 5], direct.time_s[3, 3]])
        half = t.lookup(4, 40.0)  # halfway between contexts 32 and 48
        _close(half.energy_j, (direct.energy_j[4, 2] + direct.energy_j[4, 3]) / 2)
    # a replicated model's copies: batch_pass of as many copies on the grid
    two = CostTable.build(pair.draft, s, 1, GPU, MicroBatching(), 6, 64.0, copies=2)
    _close(two.time_s, batch_pass(pair.draft, s, n, 1, ctx[None, :], GPU, MicroBatching(), 2).time_s)


def _table(seed=5, n_max=3, grid=5):
    """A cost table of random (not affine) values: energy, two devices and one class stacked."""
    rng = np.random.default_rng(seed)
    stack = rng.random((4, n_max + 1, grid))
    time = rng.random((n_max + 1, grid))
    return CostTable(time, stack[0], {"gpu": stack[1], "pim": stack[2]}, {"fc": stack[3]}, stack)


def test_lookup_interpolates_between_grid_points_and_extrapolates_past_the_last_two():
    """lookup: a grid point exactly, linear between points, the last two points' line past the end, n or ctx 1-D."""
    t = _table()
    last = 16.0 * (t.time_s.shape[1] - 1)
    got = t.lookup(np.array([0, 3, 2, 1]), np.array([0.0, last, 24.0, last + 8.0]))
    a = t.time_s
    np.testing.assert_array_equal(got.time_s[:2], [a[0, 0], a[3, -1]])
    _close(got.time_s[2:], [(a[2, 1] + a[2, 2]) / 2, a[1, -1] + (a[1, -1] - a[1, -2]) / 2])
    _close(got.busy_s["pim"][2], (t.busy_s["pim"][2, 1] + t.busy_s["pim"][2, 2]) / 2)
    many = t.lookup(np.array([1, 2, 3]), last)  # several n at one context
    np.testing.assert_array_equal(many.energy_j, t.energy_j[1:, -1])
    np.testing.assert_array_equal(many.by_class_s["fc"], t.by_class_s["fc"][1:, -1])


def test_sums_are_the_weighted_lookups_summed_for_whole_numbers_stored_as_floats():
    """sums of int or whole float counts: the lookups times the weights, summed, on, between and past the grid."""
    t = _table()
    last = 16.0 * (t.time_s.shape[1] - 1)
    n = np.array([0.0, 3.0, 2.0, 1.0, 3.0])
    ctx = np.array([0.0, last, 24.0, last + 8.0, 50.0])
    w = np.array([0.5, 1.0, 2.0, 0.25, 1.5])
    c = t.lookup(n.astype(int), ctx)
    for counts in (n, n.astype(np.int64)):
        energy, busy, by_class = t.sums(counts, ctx, w)
        assert energy == pytest.approx(float((c.energy_j * w).sum()), rel=1e-12)
        assert list(busy) == ["gpu", "pim"] and list(by_class) == ["fc"]
        assert busy["pim"] == pytest.approx(float((c.busy_s["pim"] * w).sum()), rel=1e-12)
        assert by_class["fc"] == pytest.approx(float((c.by_class_s["fc"] * w).sum()), rel=1e-12)
    energy, busy, by_class = t.sums(n, ctx)  # no weights: the lookups summed
    assert energy == pytest.approx(float(c.energy_j.sum()), rel=1e-12)
    assert busy["gpu"] == pytest.approx(float(c.busy_s["gpu"].sum()), rel=1e-12)
