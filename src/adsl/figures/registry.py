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
from adsl.errors import AdslError
from adsl.profiling.traces import profile_files
from adsl.settings import Settings

LIGHT = "small_batch_light"  # the experiment of Fig. 15b's SADDLE with tau lowered under light load


@dataclass(frozen=True)
class Ref:
    """A table or plotting function named by module and name, imported when first used: a workflow job
    imports the one module it runs (and the plotting libraries only where it draws)."""

    module: str
    name: str

    def resolve(self) -> Callable:
        return getattr(importlib.import_module(self.module), self.name)

    def __call__(self, *args, **kwargs):
        return self.resolve()(*args, **kwargs)

    @property
    def __doc__(self) -> str | None:  # the function's, for captions
        return self.resolve().__doc__

    @property
    def __signature__(self) -> inspect.Signature:
        return inspect.signature(self.resolve())


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


DSE_POINTS = "results/dse/points.parquet"
DSE_CAPACITY = "results/dse/capacity.csv"
DSE_DRAFT_TABLE = "results/dse/draft_length_table.csv"
DSE_READS = ("simulation", "seed", "catalogues", "dse")


def _dse_models(s: Settings, committed) -> dict[str, Any]:
    from adsl.dse.design import pairs

    categories = set(s.simulation.categories)
    categories |= {c for a in s.dse.axes if a.name == "category" for c in (a.values or ())}
    return {"models": paths.pair_models(pairs(s.dse), sorted(categories)), "tau": paths.TAU}


def _dse_points(s: Settings, committed) -> dict[str, Any]:
    return {"points": DSE_POINTS}


TABLES = [
    TableSpec(
        "roofline_points",
        Ref("adsl.figures.roofline", "roofline_table"),
        "results/costmodel/roofline_points.csv",
        "costmodel",
        reads=("roofline", "catalogues"),
    ),
    TableSpec(
        "validation",
        Ref("adsl.figures.validation", "anchors_table"),
        "results/costmodel/validation.csv",
        "acceptance",
        lambda s, committed: {"anchors": _anchors(s, committed), "measured": _measured(s)},
        reads=("catalogues",),
    ),
    TableSpec(
        "validation_sd_batch",
        Ref("adsl.figures.validation", "sd_batch_validation"),
        "results/costmodel/validation_sd_batch.csv",
        "costmodel",
        lambda s, committed: {"anchor": committed(f"{s.anchors_dir}/sd_batch.csv")},
        reads=("catalogues",),
    ),
    TableSpec(
        "acceptance_vs_length",
        Ref("adsl.figures.acceptance", "acceptance_table"),
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
        Ref("adsl.figures.acceptance", "per_iteration_table"),
        "results/acceptance/accepted_per_iteration.csv",
        "acceptance",
        lambda s, committed: {"profile": _profile(s, committed)},
    ),
    TableSpec(
        "fit_diagnostics",
        Ref("adsl.figures.fits", "fit_diagnostics_table"),
        "results/acceptance/fit_diagnostics.csv",
        "acceptance",
        lambda s, committed: {"profile": _profile(s, committed), "models": _measured(s)},
    ),
    TableSpec(
        "accepted_per_iteration_model",
        Ref("adsl.figures.fits", "per_iteration_model_table"),
        "results/acceptance/accepted_per_iteration_model.csv",
        "acceptance",
        lambda s, committed: {"models": paths.pair_models([s.acceptance.fig04c.pair], s.acceptance.categories)},
        reads=("acceptance", "seed"),
    ),
    TableSpec(
        "fig03a",
        Ref("adsl.figures.motivation", "fig03a_table"),
        "results/simulation/fig03a.csv",
        "simulation",
        _experiment("fig03a"),
    ),
    TableSpec(
        "fig03b",
        Ref("adsl.figures.motivation", "fig03b_table"),
        "results/simulation/fig03b.csv",
        "simulation",
        _experiment("fig03b"),
    ),
    TableSpec(
        "fig12",
        Ref("adsl.figures.evaluation", "fig12_table"),
        "results/simulation/fig12.csv",
        "simulation",
        _experiment("main"),
        reads=("simulation", "catalogues"),
    ),
    TableSpec(
        "fig13",
        Ref("adsl.figures.evaluation", "fig13_table"),
        "results/simulation/fig13.csv",
        "simulation",
        _experiment("main"),
    ),
    TableSpec(
        "fig14",
        Ref("adsl.figures.evaluation", "fig14_table"),
        "results/simulation/fig14.csv",
        "simulation",
        _experiment("ablation"),
    ),
    TableSpec(
        "fig15a",
        Ref("adsl.figures.evaluation", "fig15a_table"),
        "results/simulation/fig15a.csv",
        "simulation",
        _experiment("seqlen"),
    ),
    TableSpec(
        "fig15b",
        Ref("adsl.figures.evaluation", "fig15b_table"),
        "results/simulation/fig15b.csv",
        "simulation",
        lambda s, committed: {
            "experiment": paths.experiment("small_batch"),
            **({"light": paths.experiment(LIGHT)} if LIGHT in s.simulation.experiments else {}),
        },
        reads=("simulation",),
        options={"light_experiment": LIGHT},
    ),
    TableSpec(
        "fig16",
        Ref("adsl.figures.breakdown", "fig16_table"),
        "results/simulation/fig16.csv",
        "simulation",
        _experiment("ablation"),
    ),
    TableSpec(
        "fig17",
        Ref("adsl.figures.breakdown", "fig17_table"),
        "results/costmodel/fig17.csv",
        "costmodel",
        reads=("simulation", "catalogues"),
    ),
    TableSpec(
        "fig18",
        Ref("adsl.figures.evaluation", "fig18_table"),
        "results/simulation/fig18.csv",
        "simulation",
        _experiment("main"),
        options={"batch": 64, "systems": ["PIM-AD", "PIM-SD", "SADDLE"]},
    ),  # the paper's Fig. 18 setting
    TableSpec(
        "fig19",
        Ref("adsl.figures.evaluation", "fig19_table"),
        "results/simulation/fig19.csv",
        "simulation",
        _experiment("scheduler"),
    ),
    TableSpec(
        "area",
        Ref("adsl.figures.breakdown", "area_table"),
        "results/costmodel/area.csv",
        "costmodel",
        lambda s, committed: {"components": committed(paths.AREA_COMPONENTS)},
    ),
    TableSpec(
        "paper_comparison",
        Ref("adsl.figures.breakdown", "paper_comparison_table"),
        "results/paper_comparison.csv",
        "simulation",
        lambda s, committed: {"experiment": paths.experiment("main"), "headlines": committed(paths.HEADLINES)},
    ),
    TableSpec(
        "batching",
        Ref("adsl.figures.serving", "batching_table"),
        "results/simulation/batching.csv",
        "simulation",
        lambda s, committed: {"continuous": paths.experiment("main"), "static": paths.experiment("main_static")},
    ),
    TableSpec(
        "timeline",
        Ref("adsl.sim.timeline", "timeline_table"),
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
        Ref("adsl.figures.attribution", "attribution_table"),
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
        Ref("adsl.figures.shapes", "shape_decomposition_table"),
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
        Ref("adsl.figures.policies", "policies_table"),
        "results/simulation/policies.csv",
        "simulation",
        _experiment("policies"),
        target="policies",
    ),
    TableSpec(
        "policy_gaps",
        Ref("adsl.figures.policies", "policy_gaps_table"),
        POLICY_GAPS,
        "simulation",
        _experiment("policies"),
        target="policies",
    ),
    TableSpec(
        "serving",
        Ref("adsl.sim.openloop", "serving_table"),
        "results/simulation/serving.csv",
        "simulation",
        _open_loop,
        reads=("simulation", "seed", "catalogues"),
        target="serving",
    ),
    TableSpec(
        "layouts",
        Ref("adsl.figures.serving", "layouts_table"),
        "results/simulation/layouts.csv",
        "simulation",
        lambda s, committed: {
            "tensor_parallel": paths.experiment("main"),
            "pipeline": paths.experiment("layout_pipeline"),
        },
    ),
]

TABLES += [
    TableSpec(
        "dse_capacity",
        Ref("adsl.dse.capacity", "capacity_table"),
        DSE_CAPACITY,
        "simulation",
        _dse_models,
        DSE_READS,
        target="dse",
    ),
    TableSpec(
        "dse_draft_length_table",
        Ref("adsl.dse.schedule", "draft_length_table"),
        DSE_DRAFT_TABLE,
        "simulation",
        _dse_models,
        DSE_READS,
        target="dse",
    ),
    TableSpec(
        "dse_winner",
        Ref("adsl.figures.dse", "winner_table"),
        "results/dse/winner.csv",
        "simulation",
        _dse_points,
        ("dse",),
        target="dse",
    ),
    TableSpec(
        "dse_pareto",
        Ref("adsl.figures.dse", "pareto_table"),
        "results/dse/pareto.csv",
        "simulation",
        lambda s, committed: {"points": DSE_POINTS, "capacity": DSE_CAPACITY},
        target="dse",
    ),
    TableSpec(
        "dse_sensitivity",
        Ref("adsl.figures.dse", "sensitivity_table"),
        "results/dse/sensitivity.csv",
        "simulation",
        _dse_points,
        ("dse",),
        target="dse",
    ),
]

FIGURES = [
    FigureSpec("fig03a_sd_vs_ad_batch", "fig03a", Ref("adsl.figures.motivation", "fig03a_sd_vs_ad_batch")),
    FigureSpec(
        "fig03b_sd_vs_ad_draft_length", "fig03b", Ref("adsl.figures.motivation", "fig03b_sd_vs_ad_draft_length")
    ),
    FigureSpec(
        "fig04a_acceptance_rate",
        "acceptance_vs_length",
        Ref("adsl.figures.acceptance", "fig04a_acceptance_rate"),
        gallery=True,
    ),
    FigureSpec(
        "fig04b_accepted_per_iteration",
        "accepted_per_iteration",
        Ref("adsl.figures.acceptance", "fig04b_accepted_per_iteration"),
    ),
    FigureSpec(
        "fig04c_accepted_per_iteration_llama",
        "accepted_per_iteration_model",
        Ref("adsl.figures.fits", "fig04c_accepted_per_iteration_llama"),
    ),
    FigureSpec("fit_diagnostics", "fit_diagnostics", Ref("adsl.figures.fits", "fit_diagnostics")),
    FigureSpec(
        "fig06_roofline",
        "roofline_points",
        Ref("adsl.figures.roofline", "fig06_roofline"),
        reads=("roofline", "catalogues"),
        gallery=True,
    ),
    FigureSpec("validation_gpu", "validation", Ref("adsl.figures.validation", "validation_gpu")),
    FigureSpec(
        "fig12_throughput",
        "fig12",
        Ref("adsl.figures.evaluation", "fig12_throughput"),
        reads=("catalogues",),
        gallery=True,
    ),
    FigureSpec("fig13_energy", "fig13", Ref("adsl.figures.evaluation", "fig13_energy"), reads=("catalogues",)),
    FigureSpec("fig14_ablation", "fig14", Ref("adsl.figures.evaluation", "fig14_ablation"), gallery=True),
    FigureSpec("fig15a_seqlen", "fig15a", Ref("adsl.figures.evaluation", "fig15a_seqlen")),
    FigureSpec("fig15b_small_batch", "fig15b", Ref("adsl.figures.evaluation", "fig15b_small_batch")),
    FigureSpec("fig16_latency_breakdown", "fig16", Ref("adsl.figures.breakdown", "fig16_latency_breakdown")),
    FigureSpec("fig17_verification_breakdown", "fig17", Ref("adsl.figures.breakdown", "fig17_verification_breakdown")),
    FigureSpec("fig18_utilization", "fig18", Ref("adsl.figures.evaluation", "fig18_utilization")),
    FigureSpec("fig19_scheduler", "fig19", Ref("adsl.figures.evaluation", "fig19_scheduler")),
    FigureSpec("area", "area", Ref("adsl.figures.breakdown", "area")),
    FigureSpec(
        "paper_comparison", "paper_comparison", Ref("adsl.figures.breakdown", "fig_paper_comparison"), gallery=True
    ),
    FigureSpec(
        "batching_static_vs_continuous",
        "batching",
        Ref("adsl.figures.serving", "batching_static_vs_continuous"),
        reads=("catalogues",),
    ),
    FigureSpec("timeline", "timeline", Ref("adsl.figures.timeline", "timeline"), reads=("simulation",), gallery=True),
    FigureSpec("fidelity_attribution", "fidelity_attribution", Ref("adsl.figures.attribution", "fidelity_attribution")),
    FigureSpec(
        "policies", "policies", Ref("adsl.figures.policies", "policies"), reads=("catalogues",), target="policies"
    ),
    FigureSpec(
        "serving_latency_throughput",
        "serving",
        Ref("adsl.figures.open_loop", "serving_latency_throughput"),
        target="serving",
    ),
    FigureSpec("dse_winner", "dse_winner", Ref("adsl.figures.dse", "dse_winner"), target="dse"),
    FigureSpec("dse_pareto", "dse_pareto", Ref("adsl.figures.dse", "dse_pareto"), target="dse"),
    FigureSpec("dse_sensitivity", "dse_sensitivity", Ref("adsl.figures.dse", "dse_sensitivity"), target="dse"),
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
        for kind, spec, into in (("TABLES", TableSpec, tables), ("FIGURES", FigureSpec, figures)):
            entries = getattr(mod, kind, [])
            if not isinstance(entries, list | tuple) or not all(isinstance(e, spec) for e in entries):
                raise AdslError(f"extensions: module {ext!r}: {kind} must be a list of {spec.__name__}")
            into.update({e.name: e for e in entries})
    for f in figures.values():
        if f.table not in tables:
            raise AdslError(f"extensions: figure {f.name!r} plots table {f.table!r}, which no registry entry provides")
    for t in tables.values():
        if t.stage not in STAGES:
            raise AdslError(f"extensions: table {t.name!r}: stage {t.stage!r} is not one of {STAGES}")
    return Registry(tables, figures)


def _load(ext: str):
    """An extension module; one that is missing or raises while loading is the configuration's error."""
    try:
        if ext.endswith(".py"):
            if not Path(ext).is_file():
                raise FileNotFoundError(f"no such file {ext!r}")
            spec = importlib.util.spec_from_file_location(Path(ext).stem, ext)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            return mod
        return importlib.import_module(ext)
    except Exception as exc:  # the user's code: say where and what, not our traceback
        raise AdslError(f"extensions: module {ext!r} failed to load: {type(exc).__name__}: {exc}") from exc
