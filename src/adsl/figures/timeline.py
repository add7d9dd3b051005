"""A few rounds of PIM-SD and SADDLE as they run on the devices: a Gantt chart from the event core's
timelines (which machine works on which kind of pass when; white is idle)."""

from __future__ import annotations

import dataclasses

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from adsl.fitting.modelfile import read_model
from adsl.fitting.tau import read_taus
from adsl.paths import models_by_pair
from adsl.sim.experiment import Point, point_inputs, simulate_point
from adsl.sim.tables import Layout
from adsl.workspace import Workspace

LABELS = {"draft": "drafting", "eager": "eager drafting", "verify": "verification", "prefill": "prefill"}


def timeline_table(ws: Workspace, models: list[str], tau: str) -> pd.DataFrame:
    """Busy intervals per device of each configured system over ``passes`` verification passes of the
    steady state (one replica), in ms from the slice's start; contiguous intervals of a kind merged."""
    cfg = ws.settings.simulation.timeline
    sim = dataclasses.replace(ws.settings.simulation, replicas=1)
    accept = {c: read_model(p) for c, p in models_by_pair(models)[cfg.pair].items()}
    taus = read_taus(tau)[cfg.pair]
    rows = []
    for system in cfg.systems:
        point = Point(cfg.pair, system, cfg.batch, sim.draft_length, sim.seq_len(cfg.pair), "warn")
        p = point_inputs(ws, sim, point, accept, taus)
        res = simulate_point(p, timelines=True)
        names = Layout.of(p.setup.system).machines
        spans = sorted(res.timelines[0]["segments"], key=lambda z: z[1])
        verify = sorted(s for k, s, _ in res.timelines[0]["jobs"] if k == "verify" and s >= res.window["start_s"][0])
        lo = verify[0] if verify else res.window["start_s"][0]
        hi = verify[min(cfg.passes, len(verify) - 1)] if len(verify) > 1 else lo + 0.05
        merged: dict = {}
        for m, s, e, k in spans:
            if e <= lo or s >= hi:
                continue
            key = (names[m], LABELS.get(k, k))
            last = merged.setdefault(key, [])
            if last and abs(last[-1][1] - s) < 1e-12:
                last[-1][1] = e
            else:
                last.append([s, e])
        for (device, kind), ivs in merged.items():
            for s, e in ivs:
                rows.append(
                    dict(
                        system=system,
                        device=device.upper(),
                        kind=kind,
                        start_ms=(max(s, lo) - lo) * 1e3,
                        end_ms=(min(e, hi) - lo) * 1e3,
                    )
                )
    return pd.DataFrame(rows).sort_values(["system", "device", "start_ms"]).reset_index(drop=True)


def timeline(ws: Workspace, df: pd.DataFrame):
    """Three verification passes of PIM-SD and SADDLE on OPT-66B at batch 64, as the event-driven core ran
    them: for each machine (the GPUs and the PIM stacks of the tensor-parallel group) the passes it worked
    on, by kind (drafting, eager drafting, verification, prefill); white is idle. PIM-SD's two micro-batches
    alternate drafting and verification, so one drafts while the other is verified; SADDLE verifies the
    pooled drafts of both micro-batches in one pass and drafts eagerly while it runs."""
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
