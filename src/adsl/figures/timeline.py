"""A few rounds of PIM-SD and SADDLE as they run on the devices: a Gantt chart from the event core's
timelines (which machine works on which kind of pass when; white is idle; the table is
``adsl.sim.timeline``)."""

from __future__ import annotations

import pandas as pd

from adsl.sim.timeline import LABELS
from adsl.workspace import Workspace


def timeline(ws: Workspace, df: pd.DataFrame):
    """Three verification passes of PIM-SD and SADDLE on OPT-66B at batch 64, as the event-driven core ran
    them: for each machine (the GPUs and the PIM stacks of the tensor-parallel group) the passes it worked
    on, by kind (drafting, eager drafting, verification, prefill); white is idle. PIM-SD's two micro-batches
    alternate drafting and verification, so one drafts while the other is verified; SADDLE verifies the
    pooled drafts of both micro-batches in one pass and drafts eagerly while it runs."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    cfg = ws.settings.simulation.timeline
    systems = list(dict.fromkeys(df.system))
    kinds = list(LABELS.values())
    colors = dict(zip(kinds, sns.color_palette(n_colors=len(kinds)), strict=True))
    fig, axes = plt.subplots(len(systems), 1, figsize=(9.0, 1.2 + 1.1 * len(systems)), squeeze=False)
    for ax, system in zip(axes[:, 0], systems, strict=True):
        part = df[df.system == system]
        devices = sorted(part.device.unique())
        for y, device in enumerate(devices):
            for kind, g in part[part.device == device].groupby("kind"):
                ax.broken_barh(
                    list(zip(g.start_ms, g.end_ms - g.start_ms, strict=True)), (y - 0.35, 0.7), color=colors[kind]
                )
        ax.set_yticks(range(len(devices)), devices)
        ax.set_xlim(0, part.end_ms.max())
        ax.set(title=system, xlabel="time (ms)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colors.values()]
    fig.legend(handles, kinds, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 0.95))
    fig.suptitle(f"Devices over {cfg.passes} verification passes, {cfg.pair}, batch {cfg.batch} (white: idle)", y=1.0)
    fig.tight_layout()
    return fig, df
