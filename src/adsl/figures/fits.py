"""Diagnostics of the acceptance fits and the paper's Fig. 4c from the calibrated model."""

from __future__ import annotations

import numpy as np
import pandas as pd

from adsl.figures.acceptance import CATEGORY_ORDER, plot_accepted_per_iteration
from adsl.fitting import distributions as dist
from adsl.fitting.generator import draw_streams, fixed_lengths, replay_lengths
from adsl.fitting.joint_model import calibration_curve
from adsl.fitting.modelfile import read_model
from adsl.fitting.pipeline import accepted_at, greedy_sequences
from adsl.profiling.traces import read_profile
from adsl.workspace import Workspace


def fit_diagnostics_table(ws: Workspace, profile: str, models: list[str]) -> pd.DataFrame:
    del ws
    prof = read_profile(profile)
    rows = []
    for path in models:
        m = read_model(path)
        cat = m["category"]
        conf, match = greedy_sequences(prof, cat)
        for d_key, fit in m["accepted_length"].items():
            d = int(d_key)
            counts = np.bincount(accepted_at(match, d), minlength=d + 1)[: d + 1]
            series = {
                "observed": counts / counts.sum(),
                "truncated geometric": dist.truncated_geometric_pmf(fit["truncated_geometric"]["alpha"], d),
                "beta-geometric": dist.beta_geometric_pmf(fit["beta_geometric"]["a"], fit["beta_geometric"]["b"], d),
            }
            for name, y in series.items():
                rows += [
                    dict(category=cat, panel=f"accepted length, d = {d}", series=name, x=k, y=float(v))
                    for k, v in enumerate(y)
                ]
        chk = m["calibration_check"]
        rows += [
            dict(category=cat, panel="calibration", series="observed (binned)", x=x, y=y)
            for x, y in zip(chk["confidence"], chk["frequency"], strict=True)
        ]
        grid = np.linspace(0.01, 0.999, 60)
        rows += [
            dict(category=cat, panel="calibration", series="fitted", x=float(x), y=float(y))
            for x, y in zip(grid, calibration_curve(m["joint"], grid), strict=True)
        ]
        c = np.sort(dist.clip01(np.concatenate(conf)))
        u = (np.arange(1, 51) - 0.5) / 50
        sel = m["confidence"]["selected"]
        theo = dist.confidence_ppf(sel, m["confidence"]["candidates"][sel]["params"], u)
        rows += [
            dict(category=cat, panel="QQ", series=f"confidence vs {sel}", x=float(t), y=float(e))
            for t, e in zip(theo, np.quantile(c, u), strict=True)
        ]
    return pd.DataFrame(rows)


def fit_diagnostics(ws: Workspace, df: pd.DataFrame):
    """Acceptance fits of the measured profile, per category: accepted tokens per verification at fixed draft
    lengths with the fitted truncated-geometric and beta-geometric pmfs; the fitted calibration curve
    P(accepted | draft confidence) against binned frequencies; a QQ plot of the draft confidence against the
    AIC-selected distribution."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    del ws
    cats = [c for c in CATEGORY_ORDER if c in set(df.category)]
    panels = [p for p in df.panel.unique() if p.startswith("accepted")] + ["calibration", "QQ"]
    fig, axes = plt.subplots(len(cats), len(panels), figsize=(3.2 * len(panels), 2.8 * len(cats)), squeeze=False)
    for i, cat in enumerate(cats):
        for j, panel in enumerate(panels):
            ax = axes[i, j]
            sub = df[(df.category == cat) & (df.panel == panel)]
            if panel.startswith("accepted"):
                obs = sub[sub.series == "observed"]
                ax.bar(obs.x, obs.y, color="0.75", label="observed")
                sns.lineplot(data=sub[sub.series != "observed"], x="x", y="y", hue="series", marker="o", ax=ax)
                ax.set(xlabel="accepted tokens", ylabel="probability")
            elif panel == "calibration":
                sns.lineplot(data=sub[sub.series == "fitted"], x="x", y="y", ax=ax, label="fitted")
                obs = sub[sub.series != "fitted"]
                ax.scatter(obs.x, obs.y, color="k", s=14, label="observed (binned)", zorder=5)
                ax.plot([0, 1], [0, 1], ls=":", color="0.5")
                ax.set(xlabel="draft confidence", ylabel="P(accepted)", xlim=(0, 1), ylim=(0, 1))
            else:
                ax.scatter(sub.x, sub.y, s=10)
                ax.plot([0, 1], [0, 1], ls=":", color="0.5")
                ax.set(
                    xlabel=f"theoretical ({sub.series.iloc[0].split(' vs ')[-1]})",
                    ylabel="empirical",
                    xlim=(0, 1),
                    ylim=(0, 1),
                )
            ax.set_title(f"{cat}: {panel}", fontsize=9)
            if ax.get_legend() is not None:
                ax.legend(fontsize=6)
    fig.tight_layout()
    return fig, df


def per_iteration_model_table(ws: Workspace, models: list[str]) -> pd.DataFrame:
    cfg = ws.settings.acceptance.fig04c
    d, iters = cfg.draft_length, cfg.iterations
    rows = []
    for path in models:
        m = read_model(path)
        rng = np.random.default_rng(ws.settings.seed)
        _, acc = draw_streams(m, 1000, (d + 1) * iters, rng)
        r = replay_lengths(acc, fixed_lengths(acc.shape, d))
        a = r["accepted"][:iters].astype(float)
        rows += [
            dict(pair=m["pair"], category=m["category"], iteration=k + 1, accepted=float(a[k, 0]), series="one request")
            for k in range(iters)
        ]
        rows += [
            dict(
                pair=m["pair"],
                category=m["category"],
                iteration=k + 1,
                accepted=float(a[k].mean()),
                series="mean of 1000 requests",
            )
            for k in range(iters)
        ]
    return pd.DataFrame(rows).assign(d=d)


def fig04c_accepted_per_iteration_llama(ws: Workspace, df: pd.DataFrame):
    """Paper Fig. 4c, modelled: accepted draft tokens per speculative iteration for the Llama-3.1-70B +
    Llama-3.2-1B pair, drawn from its calibrated acceptance model (one request and the mean of 1000)."""
    del ws
    return plot_accepted_per_iteration(df, f"{df.pair.iloc[0]} pair (calibrated acceptance model)")
