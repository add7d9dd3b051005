"""Figure fidelity_attribution: SADDLE's average gain over each baseline (the paper's averaging) as the
modelling choices of ``simulation.attribution`` change one at a time, cumulatively."""

from __future__ import annotations

import pandas as pd

from adsl.figures.breakdown import METRICS, REPLICAS, paper_average_gain, paper_gain_ci95
from adsl.settings import plain
from adsl.sim.attribution import cumulative, is_default
from adsl.workspace import Workspace

BASELINES = ("GPU-AD", "GPU-SD", "PIM-AD", "PIM-SD")


def attribution_table(ws: Workspace, steps: list[str], headlines: str) -> pd.DataFrame:
    """One row per step x metric x baseline: SADDLE's gain and its 95 % interval over the replicas
    (``paper_gain_ci95``), the paper's number, the step's overrides."""
    sim_settings = ws.settings.simulation
    spec = sim_settings.attribution
    raw = plain(sim_settings.raw["attribution"])  # each step as configured
    paper = pd.read_csv(headlines).set_index(["metric", "baseline"]).paper_value
    rows = []
    for path in steps:
        df = pd.read_parquet(path)
        i = int(df.step.iloc[0])
        sim, hw = cumulative(spec, i)
        for metric, col in METRICS.items():
            for b in BASELINES:
                rows.append(
                    dict(
                        step=i,
                        name=spec[i].name,
                        metric=metric,
                        baseline=b,
                        gain=paper_average_gain(df, col, "SADDLE", b),
                        gain_ci95=paper_gain_ci95(df, REPLICAS[metric], "SADDLE", b),
                        paper=float(paper.get((metric, b), float("nan"))),
                        today=is_default(sim_settings, i),
                        changes=repr({k: v for k, v in raw[i].items() if k != "name"}),
                        overrides=repr({"simulation": sim, "hardware": hw}),
                    )
                )
    return pd.DataFrame(rows).sort_values(["metric", "step", "baseline"]).reset_index(drop=True)


def fidelity_attribution(ws: Workspace, df: pd.DataFrame):
    """SADDLE's average gain over GPU-AD, GPU-SD, PIM-AD and PIM-SD (the paper's averaging over the main
    experiment's 12 points) as documented modelling choices change one at a time, cumulatively: from the
    previous release's settings (round-based engines, static batches, tensor-parallel draft split per
    micro-batch, no static power) to today's defaults (dashed line), then assumptions that lean toward the
    paper (the paper's pool trigger, a lower all-reduce latency, GPU attention as the AttAcc simulator
    charges it, more PE registers, no static power). Every step is a configuration override listed in the
    table; nothing is fitted. Dotted lines: the paper's numbers; error bars: 95 % intervals over the replicas."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    del ws
    names = df.drop_duplicates("step").sort_values("step").name.tolist()
    colors = dict(zip(BASELINES, sns.color_palette(n_colors=len(BASELINES)), strict=True))
    fig, axes = plt.subplots(1, 2, figsize=(11.0, 4.4), sharey=False)
    for ax, (metric, part) in zip(axes, df.groupby("metric", sort=False), strict=True):
        for b, g in part.groupby("baseline"):
            g = g.sort_values("step")
            ax.errorbar(g.step, g.gain, yerr=g.gain_ci95, marker="o", color=colors[b], capsize=2, label=f"over {b}")
            ax.axhline(g.paper.iloc[0], color=colors[b], ls=":", lw=1)
        today = part[part.today].step.unique()
        for t in today:
            ax.axvline(t, color="0.5", lw=0.8, ls="--")
        ax.axhline(1.0, color="0.3", lw=0.8)
        ax.set_xticks(range(len(names)), names, rotation=55, ha="right", fontsize=7)
        ax.set(ylabel="SADDLE average gain (paper's averaging)", title=metric.replace("_", " "))
    axes[-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    title = "Where the gain comes from (dotted: the paper's numbers; dashed: today's defaults; bars: 95 % intervals)"
    fig.suptitle(title, y=1.02)
    return fig, df
