"""Registries of the workflow's tables and figures.

TABLES: name -> function(workspace, **inputs) -> tidy DataFrame; ``inputs`` are the named input paths
of its Snakemake rule (for example ``profile=`` a profile folder).
FIGURES: name -> (table name, function(workspace, table) -> (matplotlib figure, tidy DataFrame plotted)).
Adding a figure is one function plus one line here; the Snakemake rules pick it up.
"""

from __future__ import annotations

import pandas as pd

from adsl.figures.acceptance import (
    acceptance_table,
    fig04a_acceptance_rate,
    fig04b_accepted_per_iteration,
    per_iteration_table,
)
from adsl.figures.common import save_all, style
from adsl.figures.fits import (
    fig04c_accepted_per_iteration_llama,
    fit_diagnostics,
    fit_diagnostics_table,
    per_iteration_model_table,
)
from adsl.figures.motivation import fig03a_sd_vs_ad_batch, fig03a_table, fig03b_sd_vs_ad_draft_length, fig03b_table
from adsl.figures.roofline import fig06_roofline, roofline_table
from adsl.figures.validation import anchors_table, validation_gpu

TABLES = {
    "fig03a": fig03a_table,
    "fig03b": fig03b_table,
    "acceptance_vs_length": acceptance_table,
    "accepted_per_iteration": per_iteration_table,
    "fit_diagnostics": fit_diagnostics_table,
    "accepted_per_iteration_model": per_iteration_model_table,
    "roofline_points": roofline_table,
    "validation": anchors_table,
}

FIGURES = {
    "fig03a_sd_vs_ad_batch": ("fig03a", fig03a_sd_vs_ad_batch),
    "fig03b_sd_vs_ad_draft_length": ("fig03b", fig03b_sd_vs_ad_draft_length),
    "fig04a_acceptance_rate": ("acceptance_vs_length", fig04a_acceptance_rate),
    "fig04b_accepted_per_iteration": ("accepted_per_iteration", fig04b_accepted_per_iteration),
    "fig04c_accepted_per_iteration_llama": ("accepted_per_iteration_model", fig04c_accepted_per_iteration_llama),
    "fit_diagnostics": ("fit_diagnostics", fit_diagnostics),
    "fig06_roofline": ("roofline_points", fig06_roofline),
    "validation_gpu": ("validation", validation_gpu),
}


def compute_table(name: str, ws, **inputs) -> pd.DataFrame:
    if name not in TABLES:
        raise KeyError(f"unknown table {name!r}; known: {sorted(TABLES)}")
    return TABLES[name](ws, **inputs)


def render(name: str, ws, table: pd.DataFrame | None = None, pdf=None, png=None, csv=None, **inputs) -> pd.DataFrame:
    """Draw figure ``name`` (computing its table from ``inputs`` when not given); save what paths are given."""
    if name not in FIGURES:
        raise KeyError(f"unknown figure {name!r}; known: {sorted(FIGURES)}")
    table_name, plot = FIGURES[name]
    if table is None:
        table = compute_table(table_name, ws, **inputs)
    style()
    fig, plotted = plot(ws, table)
    if pdf is not None:
        save_all(fig, plotted, pdf, png, csv)
    else:
        import matplotlib.pyplot as plt

        plt.close(fig)
    return plotted
