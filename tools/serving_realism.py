"""What each serving-realism change moved: SADDLE's average gain over each baseline (the paper's
averaging) on the main experiment, as the changes are applied one at a time, cumulatively, from the
previous model to today's defaults.

    python tools/serving_realism.py          # after `snakemake --cores 2` (reads results/acceptance)

Steps: previous model (static batches, draft tensor-parallel and split as the verification, calibration on
the curve's intercept, no static power) -> continuous batching -> draft placement and split where
faster -> calibration that moves the draft's confidences (with the measured spread) -> static power.
Writes results/serving_realism.csv (one row per step x metric x baseline) and prints the table. The
calibration variants are refitted here (adsl.fitting.paper_calibration) exactly as the workflow's rules do.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from adsl.figures.breakdown import paper_average_gain
from adsl.fitting.generator import continuation_boost, draw_streams
from adsl.fitting.modelfile import read_model, write_model
from adsl.fitting.paper_calibration import SPREAD_POSITIONS, calibrate_pair
from adsl.fitting.pipeline import request_rate_sd
from adsl.fitting.tau import calibrate_tau
from adsl.profiling.traces import read_profile
from adsl.sim.experiment import run_experiment
from adsl.workspace import load_workspace

ROOT = Path(__file__).resolve().parents[1]
BASELINES = ("GPU-AD", "GPU-SD", "PIM-AD", "PIM-SD")
PREVIOUS = {
    "batching": {"mode": "static"},
    "draft_placement": "tensor_parallel",
    "draft_split": "inherit",
    "static_power": False,
}
STEPS = [  # (name, simulation overrides, calibration variant)
    ("previous model", PREVIOUS, "intercept"),
    ("+ continuous batching", {**PREVIOUS, "batching": {"mode": "continuous"}}, "intercept"),
    ("+ draft placement and split", {"static_power": False}, "intercept"),
    ("+ consistent calibration", {"static_power": False}, "confidence"),
    ("+ static power (today)", {}, "confidence"),
]


def calibrated_models(ws, variant: str, out: Path) -> tuple[dict, dict]:
    """Model files of every pair for a calibration variant and their tau per (pair, category)."""
    acc = ws.settings.acceptance
    cats = acc.categories
    measured = {c: read_model(ROOT / "results/acceptance/measured" / f"{c}.json") for c in cats}
    paper = pd.read_csv(ROOT / "data/anchors/paper_fig04a.csv")
    targets = {
        c: dict(zip(g.draft_length.astype(int), g.acceptance_rate, strict=True)) for c, g in paper.groupby("category")
    }
    cal = acc.calibration
    profile = read_profile(ROOT / "data/profiles" / ws.settings.profiling.name)
    spreads = {c: request_rate_sd(profile, c, SPREAD_POSITIONS) for c in cats} if variant == "confidence" else None
    fitted = calibrate_pair(
        measured,
        targets,
        cal.streams,
        cal.positions,
        ws.settings.seed,
        continuation=cal.draft_continuation,
        applies_to="confidence" if variant == "confidence" else "acceptance",
        spread_targets=spreads,
    )
    paths, taus = {}, {}
    t = acc.tau
    for pair, how in acc.pairs.items():
        for c in cats:
            calib = fitted[c] if how.calibrate == "paper_fig04a" or how.same_as else {"shift": 0.0}
            model = {**measured[c], "pair": pair, "calibration": calib}
            model.pop("format", None)
            path = out / variant / pair / f"{c}.json"
            write_model(model, path)
            paths.setdefault(pair, {})[c] = str(path)
            conf, accepted = draw_streams(model, t.streams, t.positions, np.random.default_rng(0))
            r = calibrate_tau(conf, accepted, t.d_max, t.window, t.success, boost=continuation_boost(model))
            taus.setdefault(pair, {})[c] = r["tau"]
    return paths, taus


def main() -> None:
    ws = load_workspace(ROOT / "config" / "config.yaml", base=ROOT)
    out = ROOT / "results" / "serving_realism"
    variants = {v: calibrated_models(ws, v, out) for v in ("intercept", "confidence")}
    rows = []
    for step, overrides, variant in STEPS:
        step_ws = ws.with_overrides(simulation={"experiments": {"main": {"overrides": overrides}}})
        df = run_experiment(step_ws, "main", *variants[variant])
        for metric, col in (("throughput", "throughput_tok_s"), ("energy_efficiency", "tokens_per_j")):
            for b in BASELINES:
                rows.append(dict(step=step, metric=metric, baseline=b, gain=paper_average_gain(df, col, "SADDLE", b)))
        print(step, {b: round(rows[-8 + i]["gain"], 2) for i, b in enumerate(BASELINES)}, file=sys.stderr)
    table = pd.DataFrame(rows)
    table.to_csv(out.with_suffix(".csv"), index=False, float_format="%.4g")
    print(table.pivot_table(index=["metric", "step"], columns="baseline", values="gain", sort=False).round(2))


if __name__ == "__main__":
    main()
