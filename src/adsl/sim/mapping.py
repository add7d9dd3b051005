"""SpecPIM-style static operator mapping: search every placement of the draft's and the target's FC
and attention families over GPU and PIM, for the initial batch size and the maximum sequence length,
and keep the fastest speculative iteration; the mapping is then frozen for the run."""

from __future__ import annotations

import itertools

import numpy as np

from adsl.perf.cost import check_mapping
from adsl.perf.hardware import SystemSpec
from adsl.perf.models import Pair
from adsl.settings import MicroBatching
from adsl.sim.timing import batch_pass


def candidate_mappings(system: SystemSpec) -> list[tuple[dict, dict]]:
    """Every valid (draft mapping, target mapping) of FC and attention over the system's devices."""
    out = []
    devices = ("gpu", "pim") if system.pim else ("gpu",)
    for dfc, dat, tfc, tat in itertools.product(devices, repeat=4):
        draft, target = {"fc": dfc, "attention": dat}, {"fc": tfc, "attention": tat}
        try:
            check_mapping(system, draft)
            check_mapping(system, target)
        except ValueError:
            continue
        out.append((draft, target))
    return out


def draft_time(pair: Pair, system: SystemSpec, draft_map, batch, d, ctx, micro_batching: MicroBatching) -> float:
    """Seconds of an iteration's ``d`` draft passes: one array of contexts, added one after another as scalars."""
    steps = batch_pass(pair.draft, system, batch, 1, ctx + np.arange(d, dtype=float), draft_map, micro_batching)
    return sum(float(t) for t in np.broadcast_to(steps.time_s, (d,)))


def verify_time(pair: Pair, system: SystemSpec, target_map, batch, d, ctx, micro_batching: MicroBatching) -> float:
    """Seconds of an iteration's target pass over d + 1 tokens."""
    return float(batch_pass(pair.target, system, batch, d + 1, ctx, target_map, micro_batching).time_s)


def iteration_time(pair: Pair, system: SystemSpec, draft_map, target_map, batch, d, ctx, micro_batching: MicroBatching):
    """Seconds of one speculative iteration: ``d`` draft passes, then one target pass over d + 1 tokens."""
    draft = draft_time(pair, system, draft_map, batch, d, ctx, micro_batching)
    return draft + verify_time(pair, system, target_map, batch, d, ctx, micro_batching)


def search_static_mapping(
    pair: Pair, system: SystemSpec, batch: int, d: int, max_seq_len: int, micro_batching: MicroBatching
):
    """Exhaustive search (16 placements at most) at the maximum sequence length; returns
    (draft mapping, target mapping, table of every candidate's iteration time).

    A candidate's draft passes do not depend on its target mapping nor its target pass on its draft
    mapping, so each distinct mapping of either model is costed once (4 + 4 cost-model calls, not 16 x 2):
    each candidate's time is ``iteration_time``'s, the same sum in the same order."""
    candidates = candidate_mappings(system)
    key = lambda m: (m["fc"], m["attention"])  # noqa: E731
    drafts = {key(dm): dm for dm, _ in candidates}
    drafts = {k: draft_time(pair, system, dm, batch, d, max_seq_len, micro_batching) for k, dm in drafts.items()}
    verifies = {key(tm): tm for _, tm in candidates}
    verifies = {k: verify_time(pair, system, tm, batch, d, max_seq_len, micro_batching) for k, tm in verifies.items()}
    rows = [
        {
            "draft_fc": draft_map["fc"],
            "draft_attention": draft_map["attention"],
            "target_fc": target_map["fc"],
            "target_attention": target_map["attention"],
            "iteration_s": drafts[key(draft_map)] + verifies[key(target_map)],
        }
        for draft_map, target_map in candidates
    ]
    best = min(range(len(rows)), key=lambda i: rows[i]["iteration_s"])
    draft_map, target_map = candidates[best]
    return draft_map, target_map, rows
