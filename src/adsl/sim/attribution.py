"""Where the paper's gains come from: the main experiment re-run as documented modelling choices change
one at a time, cumulatively (``simulation.attribution`` in the config), from the previous release's
settings to today's defaults and on to assumptions that lean toward the paper. Every step is a set of
configuration overrides (simulation settings and hardware catalogue entries); nothing is fitted."""

from __future__ import annotations

import pandas as pd

from adsl.config import merged
from adsl.sim.experiment import run_experiment


def cumulative(steps: list[dict], i: int) -> tuple[dict, dict]:
    """(simulation, hardware) overrides of step ``i``: steps 0..i laid over each other in order."""
    sim: dict = {}
    hw: dict = {}
    for step in steps[: i + 1]:
        sim = merged(sim, step.get("simulation", {}))
        hw = merged(hw, step.get("hardware", {}))
    return sim, hw


def is_default(ws, steps: list[dict], i: int) -> bool:
    """Whether step ``i`` runs today's configuration (its overrides change nothing)."""
    sim, hw = cumulative(steps, i)
    return not hw and merged(ws.config["simulation"], sim) == ws.config["simulation"]


def run_step(ws, i: int, model_paths: dict, taus: dict, experiment: str = "main") -> pd.DataFrame:
    """The ``experiment`` under step ``i``'s overrides."""
    sim, hw = cumulative(ws.config["simulation"]["attribution"], i)
    return run_experiment(ws.with_overrides(sim, hw), experiment, model_paths, taus).assign(step=i)
