"""The real Snakemake DAG: dry run, bad configuration, and a tiny end-to-end run in a temp dir."""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
SNAKEMAKE = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--cores", "2"]


def run(args, cwd, check=True):
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    res = subprocess.run(SNAKEMAKE + args, cwd=cwd, capture_output=True, text=True, env=env)
    if check and res.returncode:
        raise AssertionError(f"snakemake {args} failed:\n{res.stdout}\n{res.stderr}")
    return res


def outputs(folder: Path):
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        # logs and per-job benchmarks hold wall times: everything else must be byte-identical
        if p.is_file() and ".snakemake" not in p.parts and "logs" not in p.parts
    }


def test_dry_run_of_the_real_dag(tmp_path):
    listed = run(["--list-rules"], tmp_path).stdout
    for rule in (
        "table_roofline_points",
        "table_validation",
        "figure",
        "all",
        "profile_acceptance",
        "fit_measured",
        "calibrate_pair",
        "tau",
        "experiment",
        "offline_models",
    ):
        assert rule in listed
    text = "".join(run(["-n"], tmp_path).__getattribute__(s) for s in ("stdout", "stderr"))
    for rule in ("table_roofline_points", "table_validation", "figure", "all"):
        assert f"rule {rule}:" in text
    assert "figures/fig06_roofline.pdf" in text
    assert outputs(tmp_path) == {}


def test_a_fresh_checkout_never_plans_profiling(tmp_path):
    """Checkout order gives the committed profile and the workflow's files arbitrary times: even with
    every workflow file newer than the profile, the default run must not plan the profiling rule
    (hours of CPU and the profiling extra)."""
    copy = tmp_path / "checkout"
    copy.mkdir()
    for part in ("Snakefile", "workflow", "config", "data", "profiles"):
        (shutil.copytree if (ROOT / part).is_dir() else shutil.copy2)(ROOT / part, copy / part)
    later = time.time() + 3600
    for p in [copy / "Snakefile", *(copy / "workflow").rglob("*")]:
        os.utime(p, (later, later))
    cmd = [sys.executable, "-m", "snakemake", "-s", str(copy / "Snakefile"), "--cores", "2", "-n"]
    res = subprocess.run(cmd, cwd=copy, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    planned = [line for line in (res.stdout + res.stderr).splitlines() if line.startswith("rule ")]
    assert planned and "rule profile_acceptance:" not in planned
    # the committed profile is no rule's output, so Snakemake has no metadata to miss
    assert "missing metadata" not in res.stdout + res.stderr


@pytest.mark.parametrize(
    ("yaml_text", "field"),
    [
        ("roofline:\n  points: [{batch: 0, draft_length: 1}]\n", "roofline.points.0.batch"),
        ("roofline:\n  pair: OPT-67B\n", "roofline.pair"),
        ("roofline:\n  context_len: lots\n", "roofline.context_len"),
    ],
)
def test_bad_config_stops_before_any_job(tmp_path, yaml_text, field):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(yaml_text)
    res = run(["--configfile", str(cfg)], tmp_path, check=False)
    assert res.returncode != 0
    assert field in res.stderr + res.stdout
    assert not (tmp_path / "results").exists() and not (tmp_path / "figures").exists()


def test_bad_catalogue_stops_before_any_job(tmp_path):
    hw = (ROOT / "config" / "hardware.yaml").read_text().replace("mem_bw_bytes_s: 2039.0e+9", "mem_bw_bytes_s: -5")
    (tmp_path / "hw.yaml").write_text(hw)
    res = run(["--config", f"catalogues={{hardware: {tmp_path / 'hw.yaml'}}}"], tmp_path, check=False)
    assert res.returncode != 0
    assert "gpus.A100-80GB-SXM.mem_bw_bytes_s" in res.stderr + res.stdout
    assert not (tmp_path / "results").exists()


# The whole DAG on the committed profile, shrunk: fewer streams, replicas, tokens and batches.
TINY = """
acceptance:
  bootstrap: 0
  heldout_streams: 200
  heldout_splits: 1
  calibration: {streams: 200, positions: 96}
  tau: {d_max: 8, streams: 100, positions: 96}
simulation:
  replicas: 1
  precision: {target: 0}
  max_seq_len: 192
  max_seq_len_by_pair: {OPT-175B: 192}
  experiments:
    fig03a: {batches: [8, 16]}
    main: {batches: [64]}
    ablation: {batches: [16]}
    seqlen: {seq_lens: [192, 256]}
    small_batch: {batches: [2]}
    main_static: {batches: [64]}
    layout_pipeline: {batches: [16]}
  timeline: {batch: 16, passes: 2}
  attribution:
    - {name: previous release, simulation: {batching: {mode: static}, search: {knobs: []}}}
    - {name: today, simulation: {batching: {mode: continuous}, search: {knobs: [draft_placement, micro_batches]}}}
    - {name: + PE registers, hardware: {pim_stacks: {HBM3-PIM: {queries_per_pass: 8}}}}
"""


@pytest.mark.slow
def test_end_to_end_twice_is_deterministic_and_incremental(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    tiny = tmp_path / "tiny.yaml"
    tiny.write_text(TINY)
    for d in (a, b):
        d.mkdir()
        run(["--configfile", str(ROOT / "config" / "config.yaml"), str(tiny)], d)
    out_a = outputs(a)
    assert {"figures/fig06_roofline.pdf", "figures/validation_gpu.pdf", "results/figures/fig06_roofline.csv"} <= set(
        out_a
    )
    assert out_a == outputs(b)
    assert "figures/fig12_throughput.pdf" in out_a and "results/paper_comparison.csv" in out_a
    # the tables behind the pictures hold the run's numbers, not just files
    comparison = pd.read_csv(a / "results/paper_comparison.csv")
    assert len(comparison) == 8 and comparison.ours.between(0.2, 10).all()
    fig12 = pd.read_csv(a / "results/figures/fig12_throughput.csv")
    assert fig12.groupby("pair").system.nunique().eq(5).all() and (fig12.throughput_tok_s > 0).all()
    assert (fig12[fig12.system == "GPU-AD"].normalized == 1).all()
    run(["--configfile", str(ROOT / "config" / "config.yaml"), str(tiny), "--report", "report.html"], a)
    html = (a / "report.html").read_text(errors="replace")
    assert "fig06_roofline" in html and "validation_gpu" in html
    # A second run has nothing to do: the committed profile is read from the workflow's folder, so
    # nothing in this working directory looks newer than the fits built from it.
    again = run(["--configfile", str(ROOT / "config" / "config.yaml"), str(tiny), "-n"], a)
    assert "Nothing to be done" in again.stdout + again.stderr
    assert not (a / "data").exists()
    # One figure: only its own chain is rebuilt.
    one = run(
        [
            "--configfile",
            str(ROOT / "config" / "config.yaml"),
            str(tiny),
            "-n",
            "figures/fig06_roofline.pdf",
            "--forceall",
        ],
        a,
    )
    text = one.stdout + one.stderr
    assert "table_roofline_points" in text and "figures/fig06_roofline.pdf" in text
    assert "table_validation" not in text and "validation_gpu" not in text
