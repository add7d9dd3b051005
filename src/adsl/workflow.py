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
    write_csv(compute_table(smk.params.name, _workspace(smk)), smk.output.csv)


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
