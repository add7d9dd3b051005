"""Where the draft model runs. A draft pass of a 1-7B model at decode batch sizes is latency-bound: split
tensor-parallel over 8 GPUs it pays two all-reduces per layer, so one copy per device (requests spread
over the copies) or one copy in each device's PIM can be faster. SpecPIM searched its operator mapping
for the run's batch; ``best`` searches the draft's placement the same way, once per run."""

from __future__ import annotations

from adsl.perf.hardware import SystemSpec
from adsl.perf.models import Pair
from adsl.settings import MicroBatching
from adsl.sim.timing import batch_pass

PLACEMENTS = ("tensor_parallel", "replicated", "pim")
PIM_ONLY = {"fc": "pim", "attention": "pim"}


def draft_candidates(system: SystemSpec, mapping: dict) -> dict[str, tuple[int, dict]]:
    """Placement name -> (copies, draft mapping) the system can run.

    tensor_parallel: sharded like the target (tensor parallel, or layers over pipeline stages), with the
    system's draft mapping; replicated: one copy per device on its GPU (and attention where the mapping
    puts it), weights charged once per copy; pim: one copy per device, FC and attention in its PIM stacks
    (needs weights in the stacks)."""
    out = {"tensor_parallel": (1, dict(mapping))}
    if system.gpus > 1:
        out["replicated"] = (system.gpus, dict(mapping))
    if system.pim is not None and system.weights_in == "pim":
        out["pim"] = (system.gpus, dict(PIM_ONLY))
    return out


def place_draft(
    pair: Pair, system: SystemSpec, batch: int, ctx: float, mapping: dict, micro_batching: MicroBatching, placement: str
) -> tuple[str, int, dict]:
    """(placement, copies, draft mapping): the one asked for, or with ``best`` the fastest draft pass of
    ``batch`` requests over ``ctx`` cached tokens (the run's batch and maximum sequence length, as the
    static mapping search)."""
    cands = draft_candidates(system, mapping)
    if placement != "best":
        if placement not in cands:
            raise ValueError(
                f"draft placement {placement!r} is not possible on {system.name!r}; possible: {sorted(cands)}"
            )
        return (placement, *cands[placement])
    times = {
        name: float(batch_pass(pair.draft, system, batch, 1, ctx, m, micro_batching, copies).time_s)
        for name, (copies, m) in cands.items()
    }
    best = min(times, key=times.get)  # ties: the first in PLACEMENTS order
    return (best, *cands[best])
