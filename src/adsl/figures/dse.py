"""Design-space exploration (``snakemake dse``, ``adsl.dse``): where each system wins, the Pareto fronts
of throughput, energy and capacity, and what SADDLE's gain is sensitive to."""

from __future__ import annotations

import numpy as np
import pandas as pd

from adsl.sim.systems import in_order
from adsl.workspace import Workspace

MAX_LEVELS = 8  # an axis with more distinct values is shown in equal-count bins


def _levels(values: pd.Series) -> pd.Series:
    """An axis's values as the winner map's rows or columns: as they are, or binned (a range axis)."""
    if values.nunique() <= MAX_LEVELS:
        return values
    bins = pd.qcut(values.astype(float), 6, duplicates="drop")
    return bins.map(lambda b: float(f"{b.mid:.3g}")).astype(float)


def winner_table(ws: Workspace, points: str) -> pd.DataFrame:
    """Per cell of the two ``dse.winner_axes``: how often each system is fastest (systems that do not fit
    in memory cannot win), the most frequent winner, and the geometric-mean throughput gain of
    ``dse.gain``'s system over its rival and over GPU-SD, over the configurations in the cell where both
    fit."""
    dse = ws.settings.dse
    system, rival = dse.gain
    x, y = dse.winner_axes
    df = pd.read_parquet(points)
    fits = df[df.fits_memory]
    best = fits.loc[fits.groupby("configuration").throughput_tok_s.idxmax(), ["configuration", "system"]]
    conf = df.drop_duplicates("configuration").set_index("configuration")[[x, y]]
    conf["winner"] = best.set_index("configuration").system
    tput = df.pivot(index="configuration", columns="system", values="throughput_tok_s")
    ok = df.pivot(index="configuration", columns="system", values="fits_memory")
    for other, col in ((rival, "gain_vs_rival"), ("GPU-SD", "gain_vs_gpu_sd")):
        if other in tput and system in tput:
            both = ok[system] & ok[other]
            conf[col] = np.log(tput[system] / tput[other]).where(both)
        else:
            conf[col] = np.nan
    conf[x], conf[y] = _levels(conf[x]), _levels(conf[y])
    rows = []
    for (vx, vy), g in conf.groupby([x, y], sort=True):
        shares = g.winner.value_counts(normalize=True)
        rows.append(
            {
                "x_axis": x,
                "y_axis": y,
                "x": vx,
                "y": vy,
                "configurations": len(g),
                "winner": shares.index[0] if len(shares) else "none fits",
                "winner_share": float(shares.iloc[0]) if len(shares) else 0.0,
                **{f"wins_{s}": float(shares.get(s, 0.0)) for s in dse.systems},
                "system": system,
                "rival": rival,
                "gain_vs_rival": float(np.exp(g.gain_vs_rival.mean())),
                "gain_vs_gpu_sd": float(np.exp(g.gain_vs_gpu_sd.mean())),
            }
        )
    return pd.DataFrame(rows)


def dse_winner(ws: Workspace, df: pd.DataFrame):
    """Where each system wins over two axes of the sweep: each cell's colour is the geometric-mean
    throughput gain of SADDLE over PIM-SD (left) and over GPU-SD (right) over the sampled configurations
    in it (every other axis varies), diverging at 1: the boundary where SADDLE stops winning is where the
    colour turns. Each cell names the system that is fastest most often and how often."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import TwoSlopeNorm

    x, y = df.x_axis.iloc[0], df.y_axis.iloc[0]
    cols = [
        ("gain_vs_rival", f"{df.system.iloc[0]} / {df.rival.iloc[0]}"),
        ("gain_vs_gpu_sd", f"{df.system.iloc[0]} / GPU-SD"),
    ]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, (col, title) in zip(axes, cols, strict=True):
        grid = df.pivot(index="y", columns="x", values=col)
        vals = grid.to_numpy(float)
        lo, hi = np.nanmin(vals, initial=1.0), np.nanmax(vals, initial=1.0)
        norm = TwoSlopeNorm(1.0, min(lo, 0.99), max(hi, 1.01))
        im = ax.imshow(vals, origin="lower", cmap="RdBu", norm=norm, aspect="auto")
        ax.set_xticks(range(grid.shape[1]), [f"{v:g}" for v in grid.columns], rotation=45)
        ax.set_yticks(range(grid.shape[0]), [f"{v:g}" for v in grid.index])
        win = df.pivot(index="y", columns="x", values="winner")
        share = df.pivot(index="y", columns="x", values="winner_share")
        for i in range(grid.shape[0]):
            for j in range(grid.shape[1]):
                g = vals[i, j]
                text = f"{win.iloc[i, j]}\n{share.iloc[i, j]:.0%}" + (f"\n{g:.2f}x" if np.isfinite(g) else "")
                dark = np.isfinite(g) and abs(norm(g) - 0.5) > 0.3  # white on the saturated ends of the scale
                ax.text(j, i, text, ha="center", va="center", fontsize=6, color="white" if dark else "black")
        ax.grid(False)
        ax.set(xlabel=x, ylabel=y, title=f"Throughput {title}")
        fig.colorbar(im, ax=ax, shrink=0.8)
    fig.suptitle("Design space: who wins where (most frequent winner, its share of the cell, the gain)", y=1.02)
    return fig, df


def _front(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Whether each point is on the Pareto front maximising ``a`` and ``b`` (no other point at least as
    good in both and better in one)."""
    order = np.lexsort((-b, -a))  # a descending, ties by b descending
    on = np.zeros(a.size, bool)
    best = -np.inf
    for i in order:
        if b[i] > best:
            on[i], best = True, b[i]
    return on


def pareto_table(ws: Workspace, points: str, capacity: str) -> pd.DataFrame:
    """Per system, every sampled configuration's (throughput, tokens per joule), fitting in memory, and
    every capacity configuration's (capacity under the SLO, hardware cost proxy), each marked on or off
    the system's Pareto front (maximise throughput and tokens/J; maximise capacity, minimise cost)."""
    del ws
    pts = pd.read_parquet(points)
    pts = pts[pts.fits_memory]
    cap = pd.read_csv(capacity)
    parts = []
    for system, g in pts.groupby("system", sort=False):
        on = _front(g.throughput_tok_s.to_numpy(float), g.tokens_per_j.to_numpy(float))
        parts.append(
            pd.DataFrame(
                {
                    "panel": "energy",
                    "system": system,
                    "configuration": g.configuration,
                    "x": g.throughput_tok_s,
                    "y": g.tokens_per_j,
                    "front": on,
                }
            )
        )
    for system, g in cap.groupby("system", sort=False):
        on = _front(g.capacity_req_s.to_numpy(float), -g.cost_proxy.to_numpy(float))
        parts.append(
            pd.DataFrame(
                {
                    "panel": "capacity",
                    "system": system,
                    "configuration": g.configuration,
                    "x": g.cost_proxy,
                    "y": g.capacity_req_s,
                    "front": on,
                }
            )
        )
    return pd.concat(parts, ignore_index=True)


def dse_pareto(ws: Workspace, df: pd.DataFrame):
    """Pareto fronts per system over the sampled design space. Left: throughput against energy efficiency
    (tokens per joule) of every configuration that fits in memory, the front of each system drawn as a
    line. Right: capacity under the SLO (the largest Poisson request rate meeting the p99 time-per-token and
    time-to-first-token bounds) against the hardware cost proxy (GPUs plus PIM stacks at their configured
    price in GPUs), front: most capacity for the cost."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    systems = in_order(df.system)
    colours = dict(zip(systems, sns.color_palette("colorblind", len(systems)), strict=True))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    labels = {
        "energy": ("Throughput (tokens/s)", "Tokens per joule"),
        "capacity": ("Hardware cost proxy (GPUs)", "Capacity under the SLO (requests/s)"),
    }
    for ax, panel in zip(axes, ("energy", "capacity"), strict=True):
        part = df[df.panel == panel]
        for s in systems:
            g = part[part.system == s]
            ax.scatter(g.x, g.y, s=6, alpha=0.25, color=colours[s])
            f = g[g.front].sort_values("x")
            ax.plot(
                f.x,
                f.y,
                marker="o",
                ms=3,
                lw=1.2,
                color=colours[s],
                label=s,
                drawstyle="steps-post" if panel == "capacity" else "default",
            )
        ax.set(xlabel=labels[panel][0], ylabel=labels[panel][1])
    axes[0].legend(fontsize=7)
    fig.suptitle("Pareto fronts of the design space", y=1.02)
    return fig, df


def sensitivity_table(ws: Workspace, points: str) -> pd.DataFrame:
    """First-order and total Sobol indices of the log throughput gain of ``dse.gain``'s system over its
    rival per axis, with bootstrap 95 % intervals (``adsl.dse.sensitivity``)."""
    from adsl.dse.sensitivity import indices

    dse = ws.settings.dse
    system, rival = dse.gain
    df = pd.read_parquet(points)
    t = df.pivot(index="configuration", columns="system", values="throughput_tok_s")
    conf = df.drop_duplicates("configuration").set_index("configuration")[["block", "sample"]]
    conf["y"] = np.log(t[system] / t[rival])
    out = indices(conf.reset_index(), [a.name for a in dse.axes], dse.bootstrap, dse.seed)
    return out.assign(system=system, rival=rival, configurations=len(conf))


def dse_sensitivity(ws: Workspace, df: pd.DataFrame):
    """Which axes SADDLE's gain over PIM-SD depends on: first-order Sobol indices (the share of the
    variance of the log gain that an axis explains alone) and total indices (with its interactions), with
    bootstrap 95 % intervals, estimated from the sweep's Saltelli design (scipy.stats.sobol_indices)."""
    import matplotlib.pyplot as plt

    d = df.sort_values("total_order", ascending=False)
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(d) + 1.2))
    pos = np.arange(len(d))
    for off, (kind, label) in zip(
        (-0.18, 0.18), (("first_order", "first order"), ("total_order", "total")), strict=True
    ):
        err = np.vstack([d[kind] - d[f"{kind}_low"], d[f"{kind}_high"] - d[kind]]).clip(min=0)
        ax.barh(pos + off, d[kind], height=0.36, xerr=err, label=label, capsize=2)
    for y, (_, r) in zip(pos, d.iterrows(), strict=True):
        if r.total_order == 0 and np.isnan(r.total_order_low):  # the axis never changed the quantity
            ax.text(0.01, y, "no effect", va="center", fontsize=7, color="0.3")
    ax.set_yticks(pos, d.axis)
    ax.invert_yaxis()
    ax.axvline(0, color="0.3", lw=0.8)
    ax.set(xlabel="Sobol index", title=f"Sensitivity of log({d.system.iloc[0]} / {d.rival.iloc[0]} throughput)")
    ax.legend(fontsize=7, loc="lower right")  # the small indices leave that corner free
    return fig, df
