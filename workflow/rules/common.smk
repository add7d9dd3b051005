import os

import sys
from pathlib import Path
from types import SimpleNamespace

from adsl.config import resolve
from adsl.figures import FIGURES, SIMULATION_TABLES

BASEDIR = workflow.basedir
# Figures drawn from a measured acceptance profile (stage 1).
PROFILE_FIGURES = {
    "fig04a_acceptance_rate",
    "fig04b_accepted_per_iteration",
    "fig04c_accepted_per_iteration_llama",
    "fit_diagnostics",
    "fig03a_sd_vs_ad_batch",
    "fig03b_sd_vs_ad_draft_length",
    "fig12_throughput",
    "fig13_energy",
    "fig14_ablation",
    "fig15a_seqlen",
    "fig15b_small_batch",
    "fig16_latency_breakdown",
    "fig18_utilization",
    "fig19_scheduler",
    "paper_comparison",
    "batching_static_vs_continuous",
    "validation_gpu",
    "timeline",
    "fidelity_attribution",
}
FIGURE_NAMES = sorted(FIGURES)


def resolve_input(path):
    """Committed inputs: the working directory's copy when there is one (or when the working
    directory is the workflow's own folder), else the workflow's."""
    if os.path.samefile(os.getcwd(), BASEDIR):
        return Path(path)
    return resolve(path, BASEDIR)


def default_figures():
    """Every figure; those needing the acceptance profile only once it exists (profiling needs the
    `profile` extra and hours of CPU time, so `snakemake --cores N` never starts it by itself).
    """
    profile = resolve_input(f"data/profiles/{config['profiling']['name']}")
    if profile.is_dir():
        return FIGURE_NAMES
    print(
        f"adsl: acceptance profile {profile} not found: skipping {sorted(PROFILE_FIGURES)}; "
        "create it with `snakemake profile_acceptance --cores 2`",
        file=sys.stderr,
    )
    return [n for n in FIGURE_NAMES if n not in PROFILE_FIGURES]


def catalogue_inputs():
    return [
        str(resolve(config["catalogues"]["models"], BASEDIR)),
        str(resolve(config["catalogues"]["hardware"], BASEDIR)),
    ]


def anchor_inputs():
    folder = resolve(config["anchors_dir"], BASEDIR)
    return sorted(str(p) for p in folder.glob("*.csv"))


# Where each registered table is written (by rules in costmodel.smk).
TABLE_PATHS = {
    "roofline_points": "results/costmodel/roofline_points.csv",
    "validation": "results/costmodel/validation.csv",
    "acceptance_vs_length": "results/acceptance/acceptance_vs_length.csv",
    "accepted_per_iteration": "results/acceptance/accepted_per_iteration.csv",
    "fit_diagnostics": "results/acceptance/fit_diagnostics.csv",
    **{t: f"results/simulation/{t}.csv" for t in SIMULATION_TABLES},
    "fig17": "results/costmodel/fig17.csv",
    "area": "results/costmodel/area.csv",
    "paper_comparison": "results/paper_comparison.csv",
    "accepted_per_iteration_model": "results/acceptance/accepted_per_iteration_model.csv",
    "batching": "results/simulation/batching.csv",
    "timeline": "results/simulation/timeline.csv",
    "fidelity_attribution": "results/simulation/fidelity_attribution.csv",
}


def caption(name):
    path = os.path.join(BASEDIR, "workflow", "report", f"{name}.rst")
    with open(path) as fh:
        return fh.read().strip()


def default_targets():
    """Figures, plus the acceptance tables when the profile exists."""
    names = default_figures()
    extra = []
    if PROFILE_FIGURES & set(names):
        extra = [
            "results/acceptance/model_selection.csv",
            "results/acceptance/heldout_check.csv",
            "results/acceptance/tau.csv",
            "results/acceptance/calibration_check.csv",
            "results/simulation/layouts.csv",
        ]
    return figure_outputs(names) + extra


def figure_outputs(names):
    out = []
    for name in names:
        out += [
            f"figures/{name}.pdf",
            f"figures/{name}.png",
            f"results/figures/{name}.csv",
        ]
    return out
