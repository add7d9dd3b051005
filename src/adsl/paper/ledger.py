"""The assumption ledger: for each configuration choice and calibrated constant of the paper mode, the paper's
statement, the default's and the paper mode's value, and how SADDLE's headline gains move when that item
alone is switched back to the default; and the waterfall from the paper mode to the default, the items
switched back one after another (with every item switched back the configuration is the default)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from adsl.figures.breakdown import METRICS, paper_average_gain
from adsl.paper.mode import Overrides, PaperMode
from adsl.sim.experiment import run_experiment

BASELINES = ("GPU-AD", "GPU-SD", "PIM-AD", "PIM-SD")
PAPER_MODE = "paper mode"
DEFAULT = "default"


def headlines(rows: pd.DataFrame) -> dict[str, float]:
    """SADDLE's average gain over each baseline, throughput and energy efficiency, as the paper averages
    (``paper_average_gain``), keyed ``metric/baseline``."""
    return {
        f"{metric}/{base}": paper_average_gain(rows, column, "SADDLE", base)
        for metric, column in METRICS.items()
        for base in BASELINES
    }


def _main(ws, over, model_paths: dict, taus: dict, replicas: int) -> pd.DataFrame:
    """The main experiment under ``over`` with ``replicas`` replicas (the calibration's: the ledger compares
    settings on the same streams, so fewer replicas suffice for its moves)."""
    over = over | Overrides({"replicas": replicas}, {})
    return run_experiment(over.workspace(ws), "main", model_paths, over.taus(taus))


def default_value(ws, path: str):
    """The default configuration's value at a constant's dotted path (``hardware.gpus.X.field``,
    ``simulation.field``; ``tau.scale``: 1)."""
    section, *keys = path.split(".")
    if section == "tau":
        return 1.0
    if section == "simulation":
        node = ws.settings.simulation.raw
    else:  # the typed catalogue: its fields carry the schema's defaults
        hw = ws.hardware
        node = {"gpus": hw.gpus, "pim_stacks": hw.pims, "runtimes": hw.runtimes, "systems": hw.systems}
    for key in keys:
        node = node.get(key) if isinstance(node, Mapping) else getattr(node, key, None)
    return node


def ledger_table(ws, mode: PaperMode, values: dict[str, float], model_paths: dict, taus: dict) -> pd.DataFrame:
    """One row per item (choice or constant) and headline: the paper mode's value of the headline, the value
    with the item alone switched back to the default, and the move."""
    full = headlines(_main(ws, mode.overrides(values), model_paths, taus, mode.calibration.replicas))
    items = [(c.name, "choice", c.paper, "", "paper's setting") for c in mode.choices]
    items += [(c.name, "constant", c.meaning, default_value(ws, c.paths[0]), values[c.name]) for c in mode.constants]
    rows = []
    for name, kind, paper, default, paper_value in items:
        back = headlines(_main(ws, mode.overrides(values, without=name), model_paths, taus, mode.calibration.replicas))
        for key, v in full.items():
            metric, base = key.split("/")
            rows.append(
                dict(
                    item=name,
                    kind=kind,
                    paper=" ".join(str(paper).split()),
                    default_value=default,
                    paper_mode_value=paper_value,
                    metric=metric,
                    baseline=base,
                    paper_mode=v,
                    switched_back=back[key],
                    move=back[key] / v,
                )
            )
    return pd.DataFrame(rows)


def waterfall_table(ws, mode: PaperMode, values: dict[str, float], model_paths: dict, taus: dict) -> pd.DataFrame:
    """The headlines from the paper mode to the default: step 0 the paper mode, step i with the first i items
    (the choices, then the constants, in the file's order) switched back; the last step is the default."""
    names = [c.name for c in mode.choices] + [c.name for c in mode.constants]
    rows = []
    for i in range(len(names) + 1):
        gone = set(names[:i])
        over = mode.overrides(values, without=gone)
        label = PAPER_MODE if i == 0 else DEFAULT if i == len(names) else f"- {names[i - 1]}"
        for key, v in headlines(_main(ws, over, model_paths, taus, mode.calibration.replicas)).items():
            metric, base = key.split("/")
            rows.append(dict(step=i, label=label, metric=metric, baseline=base, gain=v))
    return pd.DataFrame(rows)


def waterfall_figure(ws, df: pd.DataFrame):
    """The waterfall from the paper mode to the default: SADDLE's average throughput gain over each baseline
    (one panel each) as the items of the assumption ledger are switched back to the default one after another,
    read top to bottom; grey bars: the paper mode (top) and the default configuration (bottom); each step's bar
    spans the gain's move (green up, red down), its tick the gain after the step (no bar: the step moves
    nothing); dotted: no gain."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    del ws
    tp = df[df.metric == "throughput"]
    labels = list(dict.fromkeys(tp.sort_values("step").label))
    fig, axes = plt.subplots(1, len(BASELINES), figsize=(13, 0.32 * len(labels) + 2.0), sharey=True)
    for ax, base in zip(np.atleast_1d(axes), BASELINES, strict=True):
        g = tp[tp.baseline == base].sort_values("step")
        y = np.arange(len(g))
        gain = g.gain.to_numpy()
        prev = np.r_[gain[0], gain[:-1]]
        ends = g.label.isin([PAPER_MODE, DEFAULT]).to_numpy()
        left = np.where(ends, 0.0, np.minimum(prev, gain))
        width = np.where(ends, gain, np.abs(gain - prev))
        colors = np.where(ends, "0.45", np.where(gain >= prev, "tab:green", "tab:red"))
        ax.barh(y, width, left=left, color=colors)
        ax.plot(gain[~ends], y[~ends], "|", color="0.15", ms=9)
        ax.axvline(1.0, color="0.3", lw=0.8, ls=":")
        ax.set_title(f"over {base}")
        ax.set_yticks(y, labels)
    np.atleast_1d(axes)[0].invert_yaxis()  # once: the panels share the y axis
    fig.supxlabel("SADDLE's average throughput gain (x)")
    fig.legend(
        handles=[
            Patch(color="0.45", label="paper mode / default"),
            Patch(color="tab:green", label="switching the item back raises the gain"),
            Patch(color="tab:red", label="switching the item back lowers the gain"),
        ],
        loc="lower center",
        ncol=3,
        bbox_to_anchor=(0.5, 1.0),
        frameon=False,
    )
    fig.tight_layout()
    return fig, df
