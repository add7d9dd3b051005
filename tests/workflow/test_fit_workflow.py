"""The fitting stage through the real Snakemake DAG, on a synthetic profile in a temp dir."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from adsl.fitting.distributions import fit_confidence
from adsl.fitting.synthetic import synthetic_profile
from adsl.profiling.traces import TABLES, write_profile

ROOT = Path(__file__).resolve().parents[2]
FAST = """
acceptance:
  bootstrap: 5
  heldout_streams: 500
  heldout_splits: 2
  calibration: {streams: 400, positions: 128}
  tau: {streams: 200, positions: 128}
"""


FIGURES = (
    "fit_diagnostics",
    "fig04a_acceptance_rate",
    "fig04b_accepted_per_iteration",
    "fig04c_accepted_per_iteration_llama",
)


@pytest.mark.slow
def test_fit_stage_end_to_end(tmp_path):
    rng = np.random.default_rng(0)
    conf = fit_confidence(np.concatenate([rng.beta(8, 1, 3000), rng.beta(2, 2, 1000)]))
    models = {
        c: {"confidence": conf, "joint": {"a": a, "b": 1.0, "s": 0.5, "g": 0.5}}
        for c, a in (("summarization", -0.8), ("open_qa", -0.2), ("creative_writing", -0.5))
    }
    prof = synthetic_profile(models, 16, 140)
    write_profile({t: prof.table(t) for t in TABLES}, tmp_path / "data/profiles/qwen2.5-coder-0.5b-1.5b")
    (tmp_path / "fast.yaml").write_text(FAST)
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(ROOT / "Snakefile"),
        "--cores",
        "2",
        "--configfile=fast.yaml",  # one file: a bare --configfile would take the targets as files too
        # the fitting stage's own outputs: the simulation stages are the other end-to-end tests' work
        *(f"figures/{name}.pdf" for name in FIGURES),
        *(f"results/acceptance/{name}" for name in ("model_selection.csv", "heldout_check.csv", "tau.csv")),
    ]
    res = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    for name in FIGURES:
        assert (tmp_path / "figures" / f"{name}.pdf").is_file()
    assert not (tmp_path / "results" / "simulation").exists()
    sel = pd.read_csv(tmp_path / "results/acceptance/model_selection.csv")
    assert set(sel.question) >= {"confidence distribution", "request heterogeneity", "dependence along a draft"}
    held = pd.read_csv(tmp_path / "results/acceptance/heldout_check.csv")
    # the generator reproduces the half it was fitted on; halves of 8 requests drawn from the exact
    # model differ from each other by up to 0.07 here, so the held-out gap gets no fixed tolerance
    assert (abs(held.rate_generated - held.rate_train) < 0.01).all()
    assert (held.diff_lo < 0).all() and (held.diff_hi > 0).all() and held.chi2_refit_pvalue_d8.between(0, 1).all()
    opt = json.loads((tmp_path / "results/acceptance/OPT-66B/open_qa.json").read_text())
    assert opt["calibration"]["method"] == "paper_fig04a" and "shift" in opt["calibration"]
    # one within-draft term for the pair, shared by its categories; Fig. 4a shows the calibrated rates
    cats = [
        json.loads((tmp_path / f"results/acceptance/OPT-66B/{c}.json").read_text())
        for c in ("summarization", "open_qa")
    ]
    assert cats[0]["calibration"]["draft_continuation"] == cats[1]["calibration"]["draft_continuation"]
    fig4a = pd.read_csv(tmp_path / "results/figures/fig04a_acceptance_rate.csv")
    assert fig4a.calibrated_acceptance_rate.notna().all()
    big = json.loads((tmp_path / "results/acceptance/OPT-175B/open_qa.json").read_text())
    assert big["calibration"]["shift"] == opt["calibration"]["shift"]
    tau = pd.read_csv(tmp_path / "results/acceptance/tau.csv")
    assert len(tau) == 9 and tau.tau.between(0, 1).all()
