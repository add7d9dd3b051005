"""Figures and the tidy tables behind them (the registry: ``adsl.figures.registry``)."""

from __future__ import annotations

import pandas as pd

from adsl.figures.registry import Registry, registry


def compute_table(name: str, ws, reg: Registry | None = None, **inputs) -> pd.DataFrame:
    """Table ``name`` of the registry (default: the package's) from its named ``inputs``."""
    reg = reg or registry()
    if name not in reg.tables:
        raise KeyError(f"unknown table {name!r}; known: {sorted(reg.tables)}")
    spec = reg.tables[name]
    return spec.function(ws, **inputs, **spec.options)


def render(
    name: str,
    ws,
    table: pd.DataFrame | None = None,
    pdf=None,
    png=None,
    csv=None,
    reg: Registry | None = None,
    **inputs,
) -> pd.DataFrame:
    """Draw figure ``name`` (computing its table from ``inputs`` when not given); save what paths are given."""
    reg = reg or registry()
    if name not in reg.figures:
        raise KeyError(f"unknown figure {name!r}; known: {sorted(reg.figures)}")
    spec = reg.figures[name]
    from adsl.figures.common import save_all, style  # the plotting libraries: only where a job draws

    if table is None:
        table = compute_table(spec.table, ws, reg, **inputs)
    style()
    fig, plotted = spec.plot(ws, table)
    if pdf is not None:
        save_all(fig, plotted, pdf, png, csv)
    else:
        import matplotlib.pyplot as plt

        plt.close(fig)
    return plotted
