"""Paper Fig. 6: draft (DLM) and target (TLM) operators on one device's GPU and PIM rooflines."""

from __future__ import annotations

import numpy as np
import pandas as pd

from adsl.perf.roofline import attainable, crossover_intensity, device_rooflines, roofline_points
from adsl.workspace import Workspace


def roofline_table(ws: Workspace) -> pd.DataFrame:
    cfg = ws.settings.roofline
    system = ws.hardware.system(cfg.system)
    pair = ws.models.pair(cfg.pair)
    df = roofline_points(pair, system, cfg.points, cfg.context_len)
    df.insert(0, "system", system.name)
    df.insert(1, "pair", pair.name)
    df["attainable_tflops"] = np.where(df.better_device == "PIM", df.pim_attainable_tflops, df.gpu_attainable_tflops)
    return df


def fig06_roofline(ws: Workspace, df: pd.DataFrame):
    """Paper Fig. 6: attention and FC operators of the target (TLM) and draft (DLM) models at the configured
    (effective batch, draft length) points, placed on the GPU and PIM rooflines of one device. Left of the
    dotted line the PIM stacks attain more FLOP/s (PIM benefit), right of it the GPU does."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    cfg = ws.settings.roofline
    system = ws.hardware.system(cfg.system)
    pair = ws.models.pair(cfg.pair)

    roofs = device_rooflines(system)
    cross = crossover_intensity(system)
    lo = min(0.3, df.intensity_flop_per_byte.min() / 2)
    hi = max(1e3, df.intensity_flop_per_byte.max() * 4)
    grid = np.logspace(np.log10(lo), np.log10(hi), 400)

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    line = {"GPU": "-", "PIM": "--"}
    for dev, (peak, bw) in roofs.items():
        ax.plot(grid, attainable(peak, bw, grid) / 1e12, color="0.2", ls=line[dev], lw=1.8, label=f"{dev} roofline")
    ax.axvspan(lo, cross, color="tab:green", alpha=0.07)
    ax.axvspan(cross, hi, color="tab:purple", alpha=0.07)
    ax.axvline(cross, color="0.4", ls=":", lw=1)
    ymax = max(p for p, _ in roofs.values()) / 1e12 * 3
    ax.text(np.sqrt(lo * cross), ymax / 2, "PIM benefit", ha="center", va="top", fontsize=9)
    ax.text(np.sqrt(cross * hi), ymax / 2, "GPU benefit", ha="center", va="top", fontsize=9)
    sns.scatterplot(
        data=df,
        x="intensity_flop_per_byte",
        y="attainable_tflops",
        hue="label",
        style="point",
        palette="deep",
        s=90,
        ax=ax,
        zorder=5,
    )
    ax.set(
        xscale="log",
        yscale="log",
        xlim=(lo, hi),
        ylim=(1, ymax),
        xlabel="Arithmetic intensity (FLOP/byte)",
        ylabel="Attainable performance (TFLOP/s)",
        title=f"{pair.name} pair on one {system.name} device (KV {cfg.context_len} tokens)",
    )
    handles, labels = ax.get_legend_handles_labels()
    names = {"label": "operator", "point": "(batch, draft length)"}
    ax.legend(handles, [names.get(x, x) for x in labels], fontsize=8, loc="lower right", ncol=2)
    return fig, df
