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


def iteration_time(pair: Pair, system: SystemSpec, draft_map, target_map, batch, d, ctx, micro_batching: MicroBatching):
    """Seconds of one speculative iteration: ``d`` draft passes, then one target pass over d + 1 tokens."""
    # the d draft passes as one array of contexts, added one after another as scalars
    steps = batch_pass(pair.draft, system, batch, 1, ctx + np.arange(d, dtype=float), draft_map, micro_batching)
    draft = sum(float(t) for t in np.broadcast_to(steps.time_s, (d,)))
    verify = float(batch_pass(pair.target, system, batch, d + 1, ctx, target_map, micro_batching).time_s)
    return draft + verify


def search_static_mapping(
    pair: Pair, system: SystemSpec, batch: int, d: int, max_seq_len: int, micro_batching: MicroBatching
):
    """Exhaustive search (16 placements at most) at the maximum sequence length; returns
    (draft mapping, target mapping, table of every candidate's iteration time)."""
    rows = []
    for draft_map, target_map in candidate_mappings(system):
        t = iteration_time(pair, system, draft_map, target_map, batch, d, max_seq_len, micro_batching)
        rows.append(
            {
                "draft_fc": draft_map["fc"],
                "draft_attention": draft_map["attention"],
                "target_fc": target_map["fc"],
                "target_attention": target_map["attention"],
                "iteration_s": t,
            }
        )
    best = min(range(len(rows)), key=lambda i: rows[i]["iteration_s"])
    draft_map, target_map = candidate_mappings(system)[best]
    return draft_map, target_map, rows
