"""The busy intervals of a few steady-state verification passes per device, from the event loop's
timelines (``simulate_point(timelines=True)``): the table behind the timeline figure."""

from __future__ import annotations

import dataclasses

import pandas as pd

from adsl.fitting.modelfile import read_model
from adsl.fitting.tau import read_taus
from adsl.paths import models_by_pair
from adsl.sim.experiment import Point, search_point, simulate_point
from adsl.sim.search import configuration_of
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
        p = search_point(ws, sim, point, accept, taus).inputs  # the configuration the search keeps
        res = simulate_point(p, timelines=True)
        conf = configuration_of(p.setup).label
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
                        configuration=conf,
                        device=device.upper(),
                        kind=kind,
                        start_ms=(max(s, lo) - lo) * 1e3,
                        end_ms=(min(e, hi) - lo) * 1e3,
                    )
                )
    return pd.DataFrame(rows).sort_values(["system", "device", "start_ms"]).reset_index(drop=True)
