"""Where the paper's gains come from: the main experiment re-run as documented modelling choices change
one at a time, cumulatively (``simulation.attribution`` in the config), from the previous release's
settings to today's defaults and on to assumptions that lean toward the paper. Every step is a set of
configuration overrides (simulation settings and hardware catalogue entries); nothing is fitted."""

from __future__ import annotations

import pandas as pd

from adsl.config import merged
from adsl.settings import AttributionStep, SimulationSettings, plain
from adsl.sim.experiment import run_experiment


def cumulative(steps: tuple[AttributionStep, ...], i: int) -> tuple[dict, dict]:
    """(simulation, hardware) overrides of step ``i``: steps 0..i laid over each other in order."""
    sim: dict = {}
    hw: dict = {}
    for step in steps[: i + 1]:
        sim = merged(sim, plain(step.simulation))
        hw = merged(hw, plain(step.hardware))
    return sim, hw


def is_default(sim: SimulationSettings, i: int) -> bool:
    """Whether step ``i`` runs today's configuration (its overrides change nothing)."""
    over, hw = cumulative(sim.attribution, i)
    return not hw and merged(plain(sim.raw), over) == plain(sim.raw)


def run_step(ws, i: int, model_paths: dict, taus: dict, experiment: str = "main") -> pd.DataFrame:
    """The ``experiment`` under step ``i``'s overrides."""
    sim, hw = cumulative(ws.settings.simulation.attribution, i)
    return run_experiment(ws.with_overrides(sim, hw), experiment, model_paths, taus).assign(step=i)
