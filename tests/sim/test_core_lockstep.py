"""The event core's vectorized parts against plain loops: draft-cost look-ups of many passes, draft chains
of many (replica, micro-batch) pairs, and the asynchronous pool run for all replicas in lockstep against
each replica run alone."""

import dataclasses

import numpy as np
import pytest

from adsl.sim.batching import Continuous
from adsl.sim.core import SCALAR_STEPS, PassTables, draft_chains, simulate_core
from tests.sim.test_core import _pooled
from tests.sim.test_core_events import _inputs

PAIR = "OPT-66B"


def _tables(models, hw, slots=16):
    """Pass tables of SADDLE's pipeline with the dynamic scheduler: two draft variants (FC on GPU / PIM)."""
    setup = dataclasses.replace(_pooled(hw, True, "idle", 4, system="saddle"), dynamic=True)
    tables = PassTables(setup, models.pair(PAIR), slots, 3000.0, 64.0)
    assert len(tables.draft) == 2
    return tables


@pytest.mark.parametrize("size", [SCALAR_STEPS, SCALAR_STEPS + 1, 90])
def test_draft_costs_equal_draft_pass_element_by_element(models, hw, size):
    """Both paths of draft_costs (scalar look-ups for a short chain, arrays for many) give draft_pass's
    variant and times exactly, no request giving no time; both variants win somewhere."""
    tables = _tables(models, hw)
    rng = np.random.default_rng(size)
    n = rng.integers(0, 17, size)
    ctx = rng.uniform(0.0, 2900.0, size)
    v, g, p = tables.draft_costs(n, ctx)
    ref = [tables.draft_pass(int(a), float(b)) for a, b in zip(n, ctx, strict=True)]
    assert v.tolist() == [r[0] for r in ref]
    assert g.tolist() == [r[1] for r in ref] and p.tolist() == [r[2] for r in ref]
    assert (g[n == 0] == 0).all() and (p[n == 0] == 0).all()
    if size == 90:
        assert set(v[n > 0].tolist()) == {0, 1}


def test_draft_chains_equal_a_chain_by_chain_loop(models, hw):
    """draft_chains over (replicas, slots) with micro-batches of unequal sizes: per chain its steps,
    serial GPU / PIM time (passes added in step order), the steps' request counts and mean contexts,
    and the steps placing draft FC on PIM, each exactly as a plain loop over the chain's steps."""
    tables = _tables(models, hw)
    rng = np.random.default_rng(3)
    starts = np.array([0, 3, 4, 9])
    lengths = rng.integers(0, 10, (3, 12)) * (rng.random((3, 12)) < 0.7)
    lengths[1, 3] = 0  # a micro-batch of one slot that drafts nothing
    ctx = rng.integers(64, 2500, (3, 12)).astype(float)
    chains = draft_chains(tables, lengths, ctx, starts, [False, True])
    bounds = list(zip(starts, [*starts[1:], 12], strict=True))
    for r in range(3):
        for g, (a, b) in enumerate(bounds):
            ln, cx = lengths[r, a:b], ctx[r, a:b]
            k = int(ln.max())
            assert chains.steps[r, g] == k
            gpu = pim = 0.0
            hits = 0
            for j in range(k):
                m = ln > j
                n, c = int(m.sum()), float(cx[m].sum()) / int(m.sum()) + j
                v, gs, ps = tables.draft_pass(n, c)
                gpu, pim, hits = gpu + gs, pim + ps, hits + v
                assert (chains.n[r, g, j], chains.ctx[r, g, j], chains.variant[r, g, j]) == (n, c, v)
            assert (chains.gpu_s[r, g], chains.pim_s[r, g], chains.fc_on_pim[r, g]) == (gpu, pim, hits)
            assert (chains.n[r, g, k:] == 0).all()


def _replica(arr, r):
    return None if arr is None else arr[r : r + 1]


@pytest.mark.parametrize("trigger", ["complete", "idle"])
@pytest.mark.parametrize("serving", ["static", "continuous", "open"])
@pytest.mark.parametrize("flagged", [False, True])
def test_lockstep_pool_equals_each_replica_run_alone(models, hw, trigger, serving, flagged):
    """The asynchronous pool decides every replica's k-th pass together; each replica's result (time,
    energy, tokens, device, class and stage times, pool counters, window, per-request times in the open
    loop) is exactly what it gives when run alone. Replicas share outputs and prompts (the cost tables
    depend on them) and differ in acceptance streams, running-product lengths and arrivals."""
    pair = models.pair(PAIR)
    x, n, d, t = 3, 18, 4, 160
    rng = np.random.default_rng(11)
    conf, later, acc, out, lengths = _inputs(11, x, n, t, flagged)
    out = np.broadcast_to(out[0], (x, n)).copy()
    prompt = np.full((x, n), 64.0)
    setup = _pooled(hw, True, trigger, mb=2, d=d, pool=40)
    slots = 6
    srv = None if serving == "static" else Continuous(slots, 2, True)
    arrivals = np.cumsum(rng.exponential(0.02, (x, n)), axis=1) if serving == "open" else None
    if serving == "static":
        prompt, out = prompt[:, :slots], out[:, :slots].copy()
        acc, conf, later, lengths = acc[:, :slots], conf[:, :slots], later[:, :slots], lengths[:, :slots]
    run = lambda r=None: simulate_core(  # noqa: E731
        setup,
        pair,
        *(a if r is None else _replica(a, r) for a in (prompt, out, acc, lengths, conf, later)),
        serving=srv,
        arrivals=arrivals if r is None else _replica(arrivals, r),
    )
    together = run()
    assert together.pool["eager"].min() > 0 and len(set(together.time_s)) == x  # replicas differ
    for r in range(x):
        alone = run(r)
        for name in ("time_s", "energy_j", "tokens", "iterations", "drafted", "request_rounds"):
            assert getattr(together, name)[r] == getattr(alone, name)[0], name
        for name in ("busy_s", "class_s", "stage_s", "window", "pool"):
            for k, v in getattr(alone, name).items():
                assert getattr(together, name)[k][r] == v[0], (name, k)
        if serving == "open":
            mine = together.requests["replica"] == r
            for k, v in alone.requests.items():
                if k != "replica":
                    np.testing.assert_array_equal(together.requests[k][mine], v, err_msg=k)
