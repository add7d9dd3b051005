"""Registries of the workflow's tables and figures.

TABLES: name -> function(workspace) -> tidy DataFrame (computed from the configuration).
FIGURES: name -> (table name, function(workspace, table) -> (matplotlib figure, tidy DataFrame plotted)).
Adding a figure is one function plus one line here; the Snakemake rules pick it up.
"""

from __future__ import annotations

import pandas as pd

from adsl.figures.common import save_all, style
from adsl.figures.roofline import fig06_roofline, roofline_table
from adsl.figures.validation import anchors_table, validation_gpu

TABLES = {
    "roofline_points": roofline_table,
    "validation": anchors_table,
}

FIGURES = {
    "fig06_roofline": ("roofline_points", fig06_roofline),
    "validation_gpu": ("validation", validation_gpu),
}


def compute_table(name: str, ws) -> pd.DataFrame:
    if name not in TABLES:
        raise KeyError(f"unknown table {name!r}; known: {sorted(TABLES)}")
    return TABLES[name](ws)


def render(name: str, ws, table: pd.DataFrame | None = None, pdf=None, png=None, csv=None) -> pd.DataFrame:
    """Draw figure ``name`` (computing its table when not given); save what paths are given."""
    if name not in FIGURES:
        raise KeyError(f"unknown figure {name!r}; known: {sorted(FIGURES)}")
    table_name, plot = FIGURES[name]
    if table is None:
        table = compute_table(table_name, ws)
    style()
    fig, plotted = plot(ws, table)
    if pdf is not None:
        save_all(fig, plotted, pdf, png, csv)
    else:
        import matplotlib.pyplot as plt

        plt.close(fig)
    return plotted
