"""The paper mode's figures and ``reproduction.csv``: every evaluation figure's table under the default and
under the paper mode, point by point, and for the training targets the paper's value beside them."""

from __future__ import annotations

import numpy as np
import pandas as pd

from adsl.paper.calibrate import residuals
from adsl.paper.predict import predictions
from adsl.paper.training import Target

# the registry tables the paper mode recomputes: every evaluation figure whose table reads simulated experiments
# or the cost model (the acceptance figures do not depend on the paper mode)
TABLES = (
    "fig03a",
    "fig03b",
    "fig12",
    "fig13",
    "fig14",
    "fig15a",
    "fig15b",
    "fig16",
    "fig17",
    "fig18",
    "fig19",
    "paper_comparison",
)
PAPER_DIR = "results/paper/"


def paper_path(path: str) -> str:
    """Where the paper mode writes what the default writes at ``path`` (results/... -> results/paper/...)."""
    if not path.startswith("results/"):
        return path  # a committed input (data/...) is the same in both modes
    return PAPER_DIR + path[len("results/") :]


def paper_figure_files(name: str) -> list[str]:
    return [f"figures/paper/{name}.pdf", f"figures/paper/{name}.png", f"results/paper/figures/{name}.csv"]


def _long(df: pd.DataFrame) -> pd.DataFrame:
    """A table's numbers as (point, quantity, value): the point is its non-float columns written out."""
    keys = [c for c in df.columns if not pd.api.types.is_float_dtype(df[c])]
    values = [c for c in df.columns if c not in keys]
    point = df[keys].astype(str).apply(lambda r: ", ".join(f"{k}={v}" for k, v in r.items()), axis=1)
    out = df[values].assign(point=point).melt(id_vars="point", var_name="quantity", value_name="value")
    return out


def reproduction_table(
    default_tables: dict[str, str],
    paper_tables: dict[str, str],
    targets: tuple[Target, ...],
    default_rows: pd.DataFrame,
    paper_rows: pd.DataFrame,
) -> pd.DataFrame:
    """Rows ``kind`` training: each training target with the default's, the paper mode's and the paper's value;
    rows ``kind`` figure: each number of each recomputed figure table in both modes (no paper value: those
    figures are the test set, compared outside the project)."""
    d, p = predictions(default_rows, targets), predictions(paper_rows, targets)
    train = pd.DataFrame(
        dict(
            kind="training",
            figure=[t.figure for t in targets],
            point=[f"system={t.system}, batch={t.batch}, draft_length={t.draft_length}" for t in targets],
            quantity="ratio",
            default=d,
            paper_mode=p,
            paper=[t.value for t in targets],
            log_ratio_paper_mode=residuals(p, targets),
            log_ratio_default=residuals(d, targets),
        )
    )
    frames = [train]
    for name in sorted(default_tables):
        a = _long(pd.read_csv(default_tables[name])).rename(columns={"value": "default"})
        b = _long(pd.read_csv(paper_tables[name])).rename(columns={"value": "paper_mode"})
        m = a.merge(b, on=["point", "quantity"], how="outer", sort=False)
        frames.append(m.assign(kind="figure", figure=name, paper=np.nan))
    out = pd.concat(frames, ignore_index=True)
    cols = [
        "kind",
        "figure",
        "point",
        "quantity",
        "default",
        "paper_mode",
        "paper",
        "log_ratio_paper_mode",
        "log_ratio_default",
    ]
    return out[cols]
