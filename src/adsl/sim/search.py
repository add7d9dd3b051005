"""The fair referee: every system's operating configuration is chosen by the same search. Each legal
candidate is simulated at the configuration point (the point's own requests and acceptance streams:
common random numbers, so candidates differ only by their configuration) and the fastest is kept, as
SpecPIM's design-space exploration keeps the fastest mapping. No choice is made from the isolated cost
of one pass: a draft placed on the GPU blocks the other micro-batch's verification, and splitting a
batch pays the weight reads again, which only the simulation of the whole run weighs.

The knobs (``simulation.search.knobs``; a knob left out takes the configured value) and what each system
may set, with its source:

- ``draft_placement``: where a speculative system runs its draft model (``adsl.sim.placement``: sharded
  like the target, one copy per GPU, or one copy in each device's PIM where the stacks hold weights).
  SpecPIM maps the draft's operators by search; every speculative system searches alike.
- ``micro_batches``: one batch or the hardware system's count (``simulation.systems.<system>``): for
  PIM-AD and the SpecPIM-style systems, whether each micro-batch is passed on its own (SpecPIM's search
  would not split where splitting loses); for SADDLE's family, one Draft Generator or one per
  micro-batch. Pipelines keep their count (a pipeline of S stages needs S micro-batches in flight).
- ``pool_trigger``: when the asynchronous Shared Pool is verified (SADDLE-s, SADDLE): when the verifier
  is idle (the paper's rule) or once every Draft Generator's drafts are in it.

What stays fixed: the static SpecPIM mapping of PIM-SD / SD / SADDLE-d / SADDLE-p (searched at the
initial batch and the maximum sequence length, as SpecPIM does, ``adsl.sim.mapping``), SADDLE's static
FC -> GPU, attention -> PIM roles with the operator scheduler's per-pass choices (the paper's static and
dynamic parts), and each ablation's one change.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

from adsl.sim.placement import PLACEMENTS, draft_candidates
from adsl.sim.setup import Setup

KNOBS = ("draft_placement", "micro_batches", "pool_trigger")
TRIGGERS = ("complete", "idle")


@dataclass(frozen=True)
class Configuration:
    """The values of the search's knobs a system runs with (None: not a knob of this system)."""

    draft_placement: str | None = None
    micro_batches: int | None = None
    pool_trigger: str | None = None

    @property
    def label(self) -> str:
        """How tables name it, e.g. ``draft pim, 1 micro-batch, trigger idle``."""
        parts = []
        if self.draft_placement is not None:
            parts.append(f"draft {self.draft_placement}")
        if self.micro_batches is not None:
            parts.append(f"{self.micro_batches} micro-batch{'es' if self.micro_batches > 1 else ''}")
        if self.pool_trigger is not None:
            parts.append(f"trigger {self.pool_trigger}")
        return ", ".join(parts)

    def deploy(self, dep):
        """``dep`` (``adsl.sim.systems.Deployment``) with these values where they are set."""
        values = {k: v for k, v in dataclasses.asdict(self).items() if v is not None}
        return dataclasses.replace(dep, **values)


def configuration_of(setup: Setup) -> Configuration:
    """The configuration a built setup runs."""
    sd = setup.decoding == "sd"
    return Configuration(
        setup.draft_placement if sd else None,
        setup.micro_batching.micro_batches,
        setup.pool_trigger if setup.eager else None,
    )


def legal_set(setup: Setup, knobs) -> list[Configuration]:
    """Every configuration the system built as ``setup`` may run, its own first (ties keep it): the
    product over ``knobs`` of the values the module's docstring lists."""
    own = configuration_of(setup)
    unknown = set(knobs) - set(KNOBS)
    if unknown:
        raise ValueError(f"unknown search knobs {sorted(unknown)}; known: {list(KNOBS)}")
    places, mbs, triggers = [own.draft_placement], [own.micro_batches], [own.pool_trigger]
    if "draft_placement" in knobs and own.draft_placement is not None:
        possible = draft_candidates(setup.system, setup.draft_mapping)
        places += [p for p in PLACEMENTS if p in possible and p != own.draft_placement]
    if "micro_batches" in knobs and own.micro_batches > 1 and setup.system.pipeline_stages == 1:
        mbs.append(1)
    if "pool_trigger" in knobs and own.pool_trigger is not None:
        triggers += [t for t in TRIGGERS if t != own.pool_trigger]
    return [Configuration(*c) for c in itertools.product(places, mbs, triggers)]


def fastest(throughputs) -> int:
    """Index of the highest throughput; a tie keeps the first (the system's own configuration)."""
    best = 0
    for i, t in enumerate(throughputs):
        if t > throughputs[best]:
            best = i
    return best
