"""Shared stacks (``PIMSpec.access``): where the GPU reads its weights from the PIM stacks, all-bank PIM
compute excludes its accesses, so a stage's GPU and PIM machines take turns; NeuPIMs' dual row buffers
(``dual_row_buffer``) bring the overlap back."""

import dataclasses

import numpy as np
import pytest
from builders import inputs, pim_sd, pooled

from adsl.settings import Continuous
from adsl.sim.core import simulate_core
from adsl.sim.timing import batch_pass
from adsl.sim.workload import Workload


def _with_access(setup, access):
    s = setup.system
    return dataclasses.replace(setup, system=dataclasses.replace(s, pim=dataclasses.replace(s.pim, access=access)))


def _overlap(segments, a, b):
    """Seconds during which machines ``a`` and ``b`` are both busy."""
    ia = sorted((s, e) for m, s, e, _ in segments if m == a)
    ib = sorted((s, e) for m, s, e, _ in segments if m == b)
    return sum(max(0.0, min(e1, e2) - max(s1, s2)) for s1, e1 in ia for s2, e2 in ib)


@pytest.mark.parametrize("build", [lambda hw: pim_sd(hw, mb=2), lambda hw: pooled(hw, eager=True, mb=2)])
def test_exclusive_stacks_never_serve_the_gpu_and_pim_compute_at_once(models, hw, build):
    """PIM-SD's two micro-batches and SADDLE-s's eager drafting overlap GPU and PIM work with dual row
    buffers; with exclusive stacks the timeline has no instant with both busy, every busy second is still
    there (the same work, later), and the run takes longer."""
    pair = models.pair("OPT-66B")
    conf, later, acc, out, lengths = inputs(3, 1, 16)
    w = Workload(np.full(out.shape, 64.0), out, acc, lengths, conf, later)
    runs = {
        a: simulate_core(_with_access(build(hw), a), pair, w, timelines=True) for a in ("exclusive", "dual_row_buffer")
    }
    shared, dual = runs["exclusive"], runs["dual_row_buffer"]
    assert _overlap(shared.timelines[0]["segments"], 0, 1) == 0.0
    assert _overlap(dual.timelines[0]["segments"], 0, 1) > 0.0
    assert shared.time_s[0] > dual.time_s[0]
    np.testing.assert_array_equal(shared.tokens, dual.tokens)


def test_sub_batch_overlap_inside_a_pass_needs_dual_row_buffers(models, hw):
    """AttAcc-style overlap of two sub-batches' GPU and PIM work inside a pass: the longer of the two
    plus the shorter once with dual row buffers; with exclusive stacks the sum of both."""
    pair, s = models.pair("OPT-66B"), pim_sd(hw, mb=2).system
    mb = dataclasses.replace(pim_sd(hw).micro_batching, overlap=True, split="always")
    mapping = {"fc": "gpu", "attention": "pim"}
    t = {
        a: float(batch_pass(pair.target, _with_access(pim_sd(hw), a).system, 64, 1, 2048.0, mapping, mb).time_s)
        for a in ("exclusive", "dual_row_buffer")
    }
    one = batch_pass(pair.target, s, 32, 1, 2048.0, mapping, dataclasses.replace(mb, micro_batches=1))
    assert t["exclusive"] == pytest.approx(2 * float(one.time_s), rel=1e-12)
    assert t["dual_row_buffer"] < t["exclusive"]


def _drafting_during_prefill(timeline) -> float:
    """Seconds of draft jobs inside prefill jobs."""
    pre = [(s, e) for k, s, e in timeline["jobs"] if k == "prefill"]
    return sum(max(0.0, min(e1, e2) - max(s1, s2)) for k, s1, e1 in timeline["jobs"] if k == "draft" for s2, e2 in pre)


def test_a_prefill_holds_back_only_its_own_requests_drafting_where_the_drafter_is_free(models, hw):
    """SADDLE-s drafting in PIM (one copy of the draft per device), continuous batching: with dual row
    buffers the PIM is free while the GPU prefills admitted requests, so the requests already running
    draft during the prefill (the admitted ones after it); with exclusive stacks the PIM waits for the
    GPU's prefill, so no draft runs during one. Every request emits its output either way."""
    pair = models.pair("OPT-66B")
    conf, later, acc, out, lengths = inputs(5, 1, 24)
    w = Workload(np.full(out.shape, 64.0), out, acc, lengths, conf, later)
    s = pooled(hw, eager=True, mb=1, pool=64)
    s = dataclasses.replace(s, draft_copies=s.system.gpus, draft_placement="replicated")  # no all-reduce: PIM only
    runs = {
        a: simulate_core(_with_access(s, a), pair, w, Continuous(6, 3, prefill=True), timelines=True)
        for a in ("exclusive", "dual_row_buffer")
    }
    assert _drafting_during_prefill(runs["dual_row_buffer"].timelines[0]) > 0.0
    assert _drafting_during_prefill(runs["exclusive"].timelines[0]) == 0.0
    for r in runs.values():
        assert r.window["total_tokens"][0] == out.sum()
