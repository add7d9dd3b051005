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
    on, by kind (drafting, eager drafting, verification, prefill); white is idle. Each runs in the
    configuration the search picks (its name is in the table); SADDLE verifies the pooled drafts in one
    pass and drafts eagerly after it. With exclusive stacks (``access: exclusive``) a PIM stack computes only
    while the GPU leaves it alone, so drafting in PIM does not hide under the GPU's verification. The legend
    lists the kinds of pass the window holds."""
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
    shown = [k for k in kinds if (df.kind == k).any()]  # colours stay fixed by kind, whatever is shown
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[k]) for k in shown]
    fig.legend(handles, shown, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 0.95))
    fig.suptitle(f"Devices over {cfg.passes} verification passes, {cfg.pair}, batch {cfg.batch} (white: idle)", y=1.0)
    fig.tight_layout()
    return fig, df
