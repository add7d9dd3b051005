"""The registry of the workflow's tables and figures: the rule files derive every table rule, figure
target, input and caption from it.

A ``TableSpec`` names the function that computes a tidy table, where the workflow writes it, the files
its function reads (``inputs``, built from the settings with ``adsl.paths``), the configuration sections
it reads (``reads``: passed to it as the rule's params and nothing else) and fixed ``options``. A
``FigureSpec`` names the table a figure plots, its plotting function and its caption (the plotting
function's docstring unless given). Adding a figure is one plotting function, one table function and
one entry in each list below; a user's module listed under ``extensions`` in the configuration adds its
own ``TABLES`` and ``FIGURES`` lists the same way, without touching a rule file.
"""

from __future__ import annotations

import importlib.util
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adsl import paths
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
from adsl.figures.evaluation import (
    LIGHT_EXPERIMENT,
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
from adsl.figures.open_loop import serving_latency_throughput
from adsl.figures.policies import policies, policies_table, policy_gaps_table
from adsl.figures.roofline import fig06_roofline, roofline_table
from adsl.figures.serving import batching_static_vs_continuous, batching_table, layouts_table
from adsl.figures.shapes import shape_decomposition_table
from adsl.figures.timeline import timeline
from adsl.figures.validation import anchors_table, sd_batch_validation, validation_gpu
from adsl.profiling.traces import profile_files
from adsl.settings import Settings
from adsl.sim.openloop import serving_table
from adsl.sim.timeline import timeline_table

# inputs(settings, committed) -> {argument name: path or list of paths}; ``committed`` maps a committed
# file's repository path (a profile, data/...) to where this run finds it
Inputs = Callable[[Settings, Callable[[str], str]], Mapping[str, Any]]
STAGES = ("costmodel", "acceptance", "simulation")  # acceptance and simulation need the measured profile


@dataclass(frozen=True)
class TableSpec:
    name: str
    function: Callable  # (workspace, **inputs, **options) -> tidy DataFrame
    path: str  # where the workflow writes it
    stage: str  # the latest stage whose outputs it reads (STAGES)
    inputs: Inputs = lambda s, committed: {}
    reads: tuple[str, ...] = ()  # configuration sections the function reads (``adsl.settings.SECTIONS``)
    options: Mapping[str, Any] = field(default_factory=dict)  # fixed keyword arguments of the function
    target: str = "all"  # the named Snakemake target that builds it (others: too slow for the default run)

    @property
    def needs_profile(self) -> bool:
        return self.stage != "costmodel"


@dataclass(frozen=True)
class FigureSpec:
    name: str
    table: str
    plot: Callable  # (workspace, table DataFrame) -> (matplotlib figure, tidy DataFrame plotted)
    reads: tuple[str, ...] = ()  # configuration sections the plotting function reads
    caption: str = ""  # the report's caption (default: the plotting function's docstring)
    gallery: bool = False  # shown in the README (docs/img/, `snakemake gallery`)
    target: str = "all"  # the named Snakemake target that builds it (others: too slow for the default run)

    @property
    def text(self) -> str:
        return self.caption or inspect.cleandoc(self.plot.__doc__ or self.name)


def _experiment(name: str) -> Inputs:
    return lambda s, committed: {"experiment": paths.experiment(name)}


def _measured(s: Settings) -> list[str]:
    return [paths.measured_model(c) for c in s.acceptance.categories]


def _anchors(s: Settings, committed) -> list[str]:
    return sorted(str(p) for p in Path(committed(s.anchors_dir)).glob("*.csv"))


def _profile(s: Settings, committed) -> list[str]:
    return profile_files(committed(paths.profile(s.profiling.name)))


POLICY_GAPS = "results/simulation/policy_gaps.csv"


def _open_loop(s: Settings, committed) -> dict[str, Any]:
    spec = s.simulation.open_loop
    out: dict[str, Any] = {"models": paths.pair_models([spec.pair], s.simulation.categories), "tau": paths.TAU}
    if spec.prompt_len is None:
        out["profile"] = _profile(s, committed)
    if isinstance(spec.policies, int) and spec.policies:
        out["gaps"] = POLICY_GAPS
    return out


TABLES = [
    TableSpec(
        "roofline_points",
        roofline_table,
        "results/costmodel/roofline_points.csv",
        "costmodel",
        reads=("roofline", "catalogues"),
    ),
    TableSpec(
        "validation",
        anchors_table,
        "results/costmodel/validation.csv",
        "acceptance",
        lambda s, committed: {"anchors": _anchors(s, committed), "measured": _measured(s)},
        reads=("catalogues",),
    ),
    TableSpec(
        "validation_sd_batch",
        sd_batch_validation,
        "results/costmodel/validation_sd_batch.csv",
        "costmodel",
        lambda s, committed: {"anchor": committed(f"{s.anchors_dir}/sd_batch.csv")},
        reads=("catalogues",),
    ),
    TableSpec(
        "acceptance_vs_length",
        acceptance_table,
        "results/acceptance/acceptance_vs_length.csv",
        "acceptance",
        lambda s, committed: {
            "profile": _profile(s, committed),
            "paper": committed(f"{s.anchors_dir}/paper_fig04a.csv"),
            "calibrated": paths.pair_models(s.acceptance.calibrated_to("paper_fig04a"), s.acceptance.categories),
        },
    ),
    TableSpec(
        "accepted_per_iteration",
        per_iteration_table,
        "results/acceptance/accepted_per_iteration.csv",
        "acceptance",
        lambda s, committed: {"profile": _profile(s, committed)},
    ),
    TableSpec(
        "fit_diagnostics",
        fit_diagnostics_table,
        "results/acceptance/fit_diagnostics.csv",
        "acceptance",
        lambda s, committed: {"profile": _profile(s, committed), "models": _measured(s)},
    ),
    TableSpec(
        "accepted_per_iteration_model",
        per_iteration_model_table,
        "results/acceptance/accepted_per_iteration_model.csv",
        "acceptance",
        lambda s, committed: {"models": paths.pair_models([s.acceptance.fig04c.pair], s.acceptance.categories)},
        reads=("acceptance", "seed"),
    ),
    TableSpec("fig03a", fig03a_table, "results/simulation/fig03a.csv", "simulation", _experiment("fig03a")),
    TableSpec("fig03b", fig03b_table, "results/simulation/fig03b.csv", "simulation", _experiment("fig03b")),
    TableSpec(
        "fig12",
        fig12_table,
        "results/simulation/fig12.csv",
        "simulation",
        _experiment("main"),
        reads=("simulation", "catalogues"),
    ),
    TableSpec("fig13", fig13_table, "results/simulation/fig13.csv", "simulation", _experiment("main")),
    TableSpec("fig14", fig14_table, "results/simulation/fig14.csv", "simulation", _experiment("ablation")),
    TableSpec("fig15a", fig15a_table, "results/simulation/fig15a.csv", "simulation", _experiment("seqlen")),
    TableSpec(
        "fig15b",
        fig15b_table,
        "results/simulation/fig15b.csv",
        "simulation",
        lambda s, committed: {
            "experiment": paths.experiment("small_batch"),
            **({"light": paths.experiment(LIGHT_EXPERIMENT)} if LIGHT_EXPERIMENT in s.simulation.experiments else {}),
        },
        reads=("simulation",),
    ),
    TableSpec("fig16", fig16_table, "results/simulation/fig16.csv", "simulation", _experiment("ablation")),
    TableSpec("fig17", fig17_table, "results/costmodel/fig17.csv", "costmodel", reads=("simulation", "catalogues")),
    TableSpec(
        "fig18",
        fig18_table,
        "results/simulation/fig18.csv",
        "simulation",
        _experiment("main"),
        options={"batch": 64, "systems": ["PIM-AD", "PIM-SD", "SADDLE"]},
    ),  # the paper's Fig. 18 setting
    TableSpec("fig19", fig19_table, "results/simulation/fig19.csv", "simulation", _experiment("scheduler")),
    TableSpec(
        "area",
        area_table,
        "results/costmodel/area.csv",
        "costmodel",
        lambda s, committed: {"components": committed(paths.AREA_COMPONENTS)},
    ),
    TableSpec(
        "paper_comparison",
        paper_comparison_table,
        "results/paper_comparison.csv",
        "simulation",
        lambda s, committed: {"experiment": paths.experiment("main"), "headlines": committed(paths.HEADLINES)},
    ),
    TableSpec(
        "batching",
        batching_table,
        "results/simulation/batching.csv",
        "simulation",
        lambda s, committed: {"continuous": paths.experiment("main"), "static": paths.experiment("main_static")},
    ),
    TableSpec(
        "timeline",
        timeline_table,
        "results/simulation/timeline.csv",
        "simulation",
        lambda s, committed: {
            "models": paths.pair_models([s.simulation.timeline.pair], s.simulation.categories),
            "tau": paths.TAU,
        },
        reads=("simulation", "seed", "catalogues"),
    ),
    TableSpec(
        "fidelity_attribution",
        attribution_table,
        "results/simulation/fidelity_attribution.csv",
        "simulation",
        lambda s, committed: {
            "steps": [paths.attribution_step(i) for i in range(len(s.simulation.attribution))],
            "headlines": committed(paths.HEADLINES),
        },
        reads=("simulation",),
    ),
    TableSpec(
        "shape_decomposition",
        shape_decomposition_table,
        "results/simulation/shape_decomposition.csv",
        "simulation",
        lambda s, committed: {
            "main": paths.experiment("main"),
            "fig03a": paths.experiment("fig03a"),
            "steps": [paths.attribution_step(i) for i in range(len(s.simulation.attribution))],
            "paper": committed(paths.PAPER_SHAPES),
        },
        reads=("simulation",),
    ),
    TableSpec(
        "policies",
        policies_table,
        "results/simulation/policies.csv",
        "simulation",
        _experiment("policies"),
        target="policies",
    ),
    TableSpec(
        "policy_gaps",
        policy_gaps_table,
        POLICY_GAPS,
        "simulation",
        _experiment("policies"),
        target="policies",
    ),
    TableSpec(
        "serving",
        serving_table,
        "results/simulation/serving.csv",
        "simulation",
        _open_loop,
        reads=("simulation", "seed", "catalogues"),
        target="serving",
    ),
    TableSpec(
        "layouts",
        layouts_table,
        "results/simulation/layouts.csv",
        "simulation",
        lambda s, committed: {
            "tensor_parallel": paths.experiment("main"),
            "pipeline": paths.experiment("layout_pipeline"),
        },
    ),
]

FIGURES = [
    FigureSpec("fig03a_sd_vs_ad_batch", "fig03a", fig03a_sd_vs_ad_batch),
    FigureSpec("fig03b_sd_vs_ad_draft_length", "fig03b", fig03b_sd_vs_ad_draft_length),
    FigureSpec("fig04a_acceptance_rate", "acceptance_vs_length", fig04a_acceptance_rate, gallery=True),
    FigureSpec("fig04b_accepted_per_iteration", "accepted_per_iteration", fig04b_accepted_per_iteration),
    FigureSpec(
        "fig04c_accepted_per_iteration_llama", "accepted_per_iteration_model", fig04c_accepted_per_iteration_llama
    ),
    FigureSpec("fit_diagnostics", "fit_diagnostics", fit_diagnostics),
    FigureSpec("fig06_roofline", "roofline_points", fig06_roofline, reads=("roofline", "catalogues"), gallery=True),
    FigureSpec("validation_gpu", "validation", validation_gpu),
    FigureSpec("fig12_throughput", "fig12", fig12_throughput, reads=("catalogues",), gallery=True),
    FigureSpec("fig13_energy", "fig13", fig13_energy, reads=("catalogues",)),
    FigureSpec("fig14_ablation", "fig14", fig14_ablation, gallery=True),
    FigureSpec("fig15a_seqlen", "fig15a", fig15a_seqlen),
    FigureSpec("fig15b_small_batch", "fig15b", fig15b_small_batch),
    FigureSpec("fig16_latency_breakdown", "fig16", fig16_latency_breakdown),
    FigureSpec("fig17_verification_breakdown", "fig17", fig17_verification_breakdown),
    FigureSpec("fig18_utilization", "fig18", fig18_utilization),
    FigureSpec("fig19_scheduler", "fig19", fig19_scheduler),
    FigureSpec("area", "area", area),
    FigureSpec("paper_comparison", "paper_comparison", fig_paper_comparison, gallery=True),
    FigureSpec("batching_static_vs_continuous", "batching", batching_static_vs_continuous, reads=("catalogues",)),
    FigureSpec("timeline", "timeline", timeline, reads=("simulation",), gallery=True),
    FigureSpec("fidelity_attribution", "fidelity_attribution", fidelity_attribution),
    FigureSpec("policies", "policies", policies, reads=("catalogues",), target="policies"),
    FigureSpec("serving_latency_throughput", "serving", serving_latency_throughput, target="serving"),
]


@dataclass(frozen=True)
class Registry:
    """Tables and figures by name: the package's and those of the configured extensions."""

    tables: Mapping[str, TableSpec]
    figures: Mapping[str, FigureSpec]

    def table_of(self, figure: str) -> TableSpec:
        return self.tables[self.figures[figure].table]

    @property
    def gallery(self) -> list[str]:
        """Figures shown in the README, sorted."""
        return sorted(n for n, f in self.figures.items() if f.gallery)

    def figure_names(self, profile: bool = True, target: str = "all") -> list[str]:
        """Figure names of a named target, sorted; without the ``profile``, only those whose table needs none."""
        return sorted(
            n for n, f in self.figures.items() if f.target == target and (profile or not self.table_of(n).needs_profile)
        )

    def table_names(self, profile: bool = True, target: str = "all") -> list[str]:
        """Table names of a named target; without the ``profile``, only those that need none."""
        return [n for n, t in self.tables.items() if t.target == target and (profile or not t.needs_profile)]

    @property
    def targets(self) -> list[str]:
        """Named targets other than ``all``."""
        named = {f.target for f in self.figures.values()} | {t.target for t in self.tables.values()}
        return sorted(named - {"all"})


def registry(extensions: list[str] | tuple[str, ...] = ()) -> Registry:
    """The registry with the ``TABLES`` and ``FIGURES`` of every extension module laid over the
    package's (a module is imported by name, or loaded from a ``.py`` path)."""
    tables = {t.name: t for t in TABLES}
    figures = {f.name: f for f in FIGURES}
    for ext in extensions:
        mod = _load(ext)
        tables.update({t.name: t for t in getattr(mod, "TABLES", [])})
        figures.update({f.name: f for f in getattr(mod, "FIGURES", [])})
    for f in figures.values():
        if f.table not in tables:
            raise KeyError(f"figure {f.name!r} plots table {f.table!r}, which no registry entry provides")
    for t in tables.values():
        if t.stage not in STAGES:
            raise ValueError(f"table {t.name!r}: stage {t.stage!r} is not one of {STAGES}")
    return Registry(tables, figures)


def _load(ext: str):
    if ext.endswith(".py"):
        spec = importlib.util.spec_from_file_location(Path(ext).stem, ext)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    return importlib.import_module(ext)
