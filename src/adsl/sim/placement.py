"""Where the draft model runs. A draft pass of a 1-7B model at decode batch sizes is latency-bound: split
tensor-parallel over 8 GPUs it pays two all-reduces per layer, so one copy per device (requests spread
over the copies) or one copy in each device's PIM can be faster. Which one a system runs is a knob of
the fair-referee search (``adsl.sim.search``): each is simulated at the point and the fastest kept."""

from __future__ import annotations

from adsl.perf.hardware import SystemSpec

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


def place_draft(system: SystemSpec, mapping: dict, placement: str) -> tuple[str, int, dict]:
    """(placement, copies, draft mapping) of the named placement (``adsl.sim.search`` picks among them by
    simulating each)."""
    cands = draft_candidates(system, mapping)
    if placement not in cands:
        raise ValueError(f"draft placement {placement!r} is not possible on {system.name!r}; possible: {sorted(cands)}")
    return (placement, *cands[placement])
