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
from adsl.figures.attribution import attribution_table, fidelity_attribution
from adsl.figures.breakdown import (
    area,
    area_table,
    fig16_latency_breakdown,
    fig16_table,
    fig17_table,
    fig17_verification_breakdown,
    fig_paper_comparison,
    paper_comparison_table,
)
from adsl.figures.common import save_all, style
from adsl.figures.evaluation import (
    fig12_table,
    fig12_throughput,
    fig13_energy,
    fig13_table,
    fig14_ablation,
    fig14_table,
    fig15a_seqlen,
    fig15a_table,
    fig15b_small_batch,
    fig15b_table,
    fig18_table,
    fig18_utilization,
    fig19_scheduler,
    fig19_table,
)
from adsl.figures.fits import (
    fig04c_accepted_per_iteration_llama,
    fit_diagnostics,
    fit_diagnostics_table,
    per_iteration_model_table,
)
from adsl.figures.motivation import fig03a_sd_vs_ad_batch, fig03a_table, fig03b_sd_vs_ad_draft_length, fig03b_table
from adsl.figures.roofline import fig06_roofline, roofline_table
from adsl.figures.serving import batching_static_vs_continuous, batching_table, layouts_table
from adsl.figures.timeline import timeline, timeline_table
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
    "fig12": fig12_table,
    "fig13": fig13_table,
    "fig14": fig14_table,
    "fig15a": fig15a_table,
    "fig15b": fig15b_table,
    "fig16": fig16_table,
    "fig17": fig17_table,
    "fig18": fig18_table,
    "fig19": fig19_table,
    "area": area_table,
    "paper_comparison": paper_comparison_table,
    "batching": batching_table,
    "timeline": timeline_table,
    "fidelity_attribution": attribution_table,
    "layouts": layouts_table,
}

# Tables computed from a simulator experiment (adsl.sim.experiment): table -> experiment name.
SIMULATION_TABLES = {
    "fig03a": "fig03a",
    "fig03b": "fig03b",
    "fig12": "main",
    "fig13": "main",
    "fig14": "ablation",
    "fig15a": "seqlen",
    "fig15b": "small_batch",
    "fig16": "ablation",
    "fig18": "main",
    "fig19": "scheduler",
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
    "fig12_throughput": ("fig12", fig12_throughput),
    "fig13_energy": ("fig13", fig13_energy),
    "fig14_ablation": ("fig14", fig14_ablation),
    "fig15a_seqlen": ("fig15a", fig15a_seqlen),
    "fig15b_small_batch": ("fig15b", fig15b_small_batch),
    "fig16_latency_breakdown": ("fig16", fig16_latency_breakdown),
    "fig17_verification_breakdown": ("fig17", fig17_verification_breakdown),
    "fig18_utilization": ("fig18", fig18_utilization),
    "fig19_scheduler": ("fig19", fig19_scheduler),
    "area": ("area", area),
    "paper_comparison": ("paper_comparison", fig_paper_comparison),
    "batching_static_vs_continuous": ("batching", batching_static_vs_continuous),
    "timeline": ("timeline", timeline),
    "fidelity_attribution": ("fidelity_attribution", fidelity_attribution),
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
