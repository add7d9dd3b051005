"""Where the workflow reads and writes each kind of file, relative to the working directory. The rule
files and the table registry (``adsl.figures.registry``) both build their paths here."""

from __future__ import annotations

from pathlib import Path

TAU = "results/acceptance/tau.csv"
HEADLINES = "data/paper_headlines.csv"  # committed: the paper's headline gains
PAPER_SHAPES = "data/paper_shapes.csv"  # committed: ratios read off the paper's Figs. 12 and 3a
AREA_COMPONENTS = "data/area_components.csv"  # committed: the paper's area figures


def profile(name: str) -> str:
    """The committed acceptance profile folder ``name``."""
    return f"data/profiles/{name}"


def profile_manifest(name: str) -> str:
    """What profiling run made profile ``name``: settings, seed, table checksums (the profiling rule's output)."""
    return f"results/profiling/{name}/manifest.json"


def measured_model(category: str) -> str:
    """The acceptance model fitted to the measured profile, one category."""
    return f"results/acceptance/measured/{category}.json"


def pair_model(pair: str, category: str) -> str:
    """A paper pair's acceptance model (measured model + calibration), one category."""
    return f"results/acceptance/{pair}/{category}.json"


def pair_models(pairs, categories) -> list[str]:
    """Every category's model of every pair in ``pairs``."""
    return [pair_model(p, c) for p in pairs for c in categories]


def models_by_pair(files) -> dict[str, dict[str, str]]:
    """pair -> category -> file, for acceptance-model files laid out as ``pair_model`` lays them out."""
    out: dict[str, dict[str, str]] = {}
    for f in files:
        out.setdefault(Path(f).parent.name, {})[Path(f).stem] = str(f)
    return out


def experiment(name: str) -> str:
    """The tidy rows of one simulator experiment."""
    return f"results/experiments/{name}.parquet"


def attribution_step(i: int) -> str:
    """The main experiment under attribution step ``i``."""
    return f"results/attribution/step{i}.parquet"


def figure_files(name: str) -> list[str]:
    """What the figure rule writes for figure ``name``: PDF, PNG and the tidy table it plotted."""
    return [f"figures/{name}.pdf", f"figures/{name}.png", f"results/figures/{name}.csv"]
