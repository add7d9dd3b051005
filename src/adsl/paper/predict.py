"""The simulated value of every training target (``adsl.paper.training``) under a workspace: Figs. 3a and
3b from the motivation experiments, Figs. 12, 13 and 16 from the main experiment's OPT-66B points."""

from __future__ import annotations

import numpy as np
import pandas as pd

from adsl.paper.training import Target
from adsl.sim.experiment import run_experiment

PAIR = "OPT-66B"  # the training figures' pair


def training_rows(ws, model_paths: dict, taus: dict) -> pd.DataFrame:
    """The rows of the experiments the training figures come from (fig03a, fig03b, main for OPT-66B)."""
    one = ws.with_overrides({"experiments": {"main": {"pairs": [PAIR]}}})
    frames = [run_experiment(one, name, {PAIR: model_paths[PAIR]}, taus) for name in ("fig03a", "fig03b", "main")]
    return pd.concat(frames, ignore_index=True)


def fig16_parts(main: pd.DataFrame) -> pd.DataFrame:
    """Fig. 16's parts per batch as shares of PIM-SD's total time, both systems emitting PIM-SD's window
    tokens (as ``adsl.figures.breakdown.fig16_table``): columns batch, part, share."""
    rows = []
    for batch, g in main[main.system.isin(["PIM-SD", "SADDLE"])].groupby("batch"):
        ref = g[g.system == "PIM-SD"].iloc[0]
        total = ref.time_s  # PIM-SD's own window
        for _, r in g.iterrows():
            scale = ref.window_tokens / r.window_tokens
            overlap = r.get("stage_overlap_s", np.nan)
            parts = {
                "verification": r.stage_verify_s * scale,
                "prediction": r.stage_draft_s * scale,
                "total": r.time_s * scale,
                "overlap": (float(overlap) if pd.notna(overlap) else 0.0) * scale,
            }
            for name, t in parts.items():
                rows.append(dict(batch=int(batch), part=f"{r.system}_{name}", share=float(t) / total))
    return pd.DataFrame(rows, columns=["batch", "part", "share"])


def predictions(rows: pd.DataFrame, targets: tuple[Target, ...]) -> np.ndarray:
    """Each target's simulated value, in the targets' order."""
    thr = {
        (e, s, int(b), int(d)): v
        for e, s, b, d, v in rows[["experiment", "system", "batch", "draft_length", "throughput_tok_s"]].itertuples(
            index=False
        )
    }
    tpj = {
        (e, s, int(b)): v
        for e, s, b, v in rows[["experiment", "system", "batch", "tokens_per_j"]].itertuples(index=False)
    }
    main = rows[rows.experiment == "main"]
    fig16 = {(p, b): v for b, p, v in fig16_parts(main)[["batch", "part", "share"]].itertuples(index=False)}

    def throughput(exp: str, system: str, batch: int, d: int) -> float:
        """An SD system's row at d; an AD system's single row (its d is not a setting)."""
        if (exp, system, batch, d) in thr:
            return thr[(exp, system, batch, d)]
        return next(v for (e, s, b, _), v in thr.items() if (e, s, b) == (exp, system, batch))

    def ad(exp, b):
        return throughput(exp, "AD", b, 0)

    def gpu_ad(b):
        return throughput("main", "GPU-AD", b, 0)

    out = []
    for t in targets:
        if t.figure == "fig03a_sd_over_ad":
            v = throughput("fig03a", "SD", t.batch, t.draft_length) / ad("fig03a", t.batch)
        elif t.figure == "fig03a_ad":
            v = ad("fig03a", t.batch) / ad("fig03a", 8)
        elif t.figure == "fig03b":
            v = throughput("fig03b", "SD", t.batch, t.draft_length) / ad("fig03b", t.batch)
        elif t.figure == "fig12":
            v = throughput("main", t.system, t.batch, t.draft_length) / gpu_ad(t.batch)
        elif t.figure == "fig13":
            v = tpj[("main", t.system, t.batch)] / tpj[("main", "GPU-AD", t.batch)]
        elif t.figure == "fig16":
            v = fig16[(t.system, t.batch)]
        else:
            raise ValueError(f"unknown training figure {t.figure!r}")
        out.append(v)
    return np.asarray(out, dtype=float)
