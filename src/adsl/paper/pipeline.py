"""The pipeline puzzle: PIM-SD and SADDLE on the paper's pipeline (8 one-GPU stages, the Shared Pool merging
every micro-batch's drafts into one verification pass), decomposed as ``adsl.figures.shapes`` decomposes the
main figure's shape: how many target-weight reads each verified token costs, how many tokens a pass carries,
how much drafting the pipeline hides and how idle a stage's GPU is."""

from __future__ import annotations

import numpy as np
import pandas as pd

from adsl.fitting.modelfile import read_model
from adsl.paper.mode import Overrides, PaperMode
from adsl.sim.experiment import Point, run_point

PAIR = "OPT-66B"


def decomposition(
    ws, over, model_paths: dict, taus: dict | None, batches=(16, 128), layout: str = "saddle"
) -> pd.DataFrame:
    """One row per (system, batch): PIM-SD and SADDLE both on ``layout`` (the paper's pipeline), under the
    overrides ``over`` (the paper mode's, with its fitted constants)."""
    # the overrides first: the paper mode's own choice puts PIM-SD on AttAcc's hardware
    w = over.workspace(ws).with_overrides({"systems": {"pim_system": layout, "saddle_system": layout}})
    sim = w.settings.simulation.for_experiment("main")
    pair = w.models.pair(PAIR)
    models = {c: read_model(p) for c, p in model_paths[PAIR].items()}
    tau = (over.taus(taus) or {}).get(PAIR)
    weights = float(pair.target.weight_bytes)
    system = w.hardware.system(layout)
    rows = []
    for batch in batches:
        for name in ("PIM-SD", "SADDLE"):
            r = run_point(w, sim, Point(PAIR, name, batch, sim.draft_length, sim.seq_len(PAIR)), models, tau)
            passes = r["iterations"]  # verification passes (each through every stage)
            draft = r.get("stage_draft_s", np.nan)
            hidden = r.get("stage_overlap_s", 0.0)
            rows.append(
                dict(
                    system=name,
                    batch=batch,
                    layout=layout,
                    stages=system.pipeline_stages,
                    micro_batches=r["micro_batches"],
                    throughput_tok_s=r["throughput_tok_s"],
                    verification_passes=passes,
                    tokens=r["tokens"],
                    tokens_per_pass=r["tokens"] / passes,
                    tokens_per_request_pass=r["tokens"] / passes / batch,
                    weight_reads_per_token=passes / r["tokens"],  # whole-model target weight reads
                    weight_gb_per_token=passes * weights / r["tokens"] / 1e9,
                    mean_draft_length=r["mean_draft_length"],
                    drafting_s=draft,
                    overlap_s=hidden or 0.0,  # stage time two kinds of work shared (Fig. 16's overlap)
                    gpu_idle_per_stage=1.0 - r["gpu_util"],
                    pim_util=r["pim_util"],
                    configuration=r.get("configuration", ""),
                )
            )
    return pd.DataFrame(rows)


def pipeline_table(ws, mode: PaperMode, values: dict[str, float], model_paths: dict, taus: dict) -> pd.DataFrame:
    """The decomposition under the paper mode and under the default's settings (both on the pipeline)."""
    paper = decomposition(ws, mode.overrides(values), model_paths, taus).assign(settings="paper mode")
    default = decomposition(ws, Overrides({}, {}), model_paths, taus).assign(settings="default")
    return pd.concat([paper, default], ignore_index=True)
