"""The real Snakemake workflow stops promptly on bad input, before any job where it can, with the message
in its output or in the failing rule's log; it never hangs."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def snakemake(args, cwd, timeout=60, env=None):
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--cores", "2", *args]
    t0 = time.monotonic()
    res = subprocess.run(
        cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
    )
    return res, time.monotonic() - t0


def config(tmp_path, text):
    f = tmp_path / "mine.yaml"
    f.write_text(text)
    return f"--configfile={f}"


def nothing_written(folder: Path) -> bool:
    return not any((folder / d).exists() for d in ("results", "figures", "data"))


def test_a_mistyped_profile_name_stops_the_default_run_within_30_s(tmp_path):
    res, took = snakemake([config(tmp_path, "profiling:\n  name: qwen-typo\n")], tmp_path, timeout=30)
    out = res.stdout + res.stderr
    assert res.returncode != 0 and took < 30
    assert "data/profiles/qwen-typo/ not found" in out and "snakemake profile_acceptance --cores 2" in out
    assert "qwen2.5-coder-0.5b-1.5b" in out  # the profiles there are
    assert nothing_written(tmp_path)


def test_a_profile_made_under_other_settings_warns_or_stops(tmp_path):
    changed = "profiling:\n  runs:\n    - {mode: greedy, d_max: 12, max_new_tokens: 128, prompts: {qa: 5}}\n"
    res, _ = snakemake([config(tmp_path, changed), "-n", "figures/fig06_roofline.pdf"], tmp_path)
    assert res.returncode == 0
    assert "was made under other settings" in res.stderr and "profiling.runs.0.d_max is 12" in res.stderr
    res, _ = snakemake([config(tmp_path, changed + "  on_mismatch: error\n"), "-n"], tmp_path)
    assert res.returncode != 0 and "profiling.on_mismatch: error" in res.stdout + res.stderr
    # a run that does not read the profile is not stopped by it
    res, _ = snakemake(
        [config(tmp_path, changed + "  on_mismatch: error\n"), "-n", "figures/fig06_roofline.pdf"], tmp_path
    )
    assert res.returncode == 0


def test_a_failing_profiling_job_fails_promptly_with_its_message_in_the_log(tmp_path):
    """It used to call sys.exit in Snakemake's worker thread and hang."""
    prompts = tmp_path / "question.jsonl"
    prompts.write_text('{"question_id": 1, "category": "qa", "turns": ["hi"]}\nnot json\n')
    res, took = snakemake(
        [config(tmp_path, f"profiling:\n  spec_bench: {prompts}\n"), "profile_acceptance"],
        tmp_path,
        timeout=120,
        env={"ADSL_CACHE": str(tmp_path / "cache")},
    )
    assert res.returncode != 0 and took < 120
    log = (tmp_path / "logs" / "profile_acceptance.log").read_text()
    assert f"{prompts}: line 2 is not JSON" in log and "Traceback" in log
    assert not (tmp_path / "results" / "profiling").exists()


def test_missing_prompts_stop_profiling_before_any_job(tmp_path, monkeypatch):
    # no network in the test: the fetch of Spec-Bench's file is refused, so the run must say where to put it
    env = {"ADSL_CACHE": str(tmp_path / "cache"), "ADSL_SPEC_BENCH_URL": "http://127.0.0.1:9/question.jsonl"}
    res, _ = snakemake(
        [config(tmp_path, f"profiling:\n  spec_bench: {tmp_path / 'none.jsonl'}\n"), "profile_acceptance"],
        tmp_path,
        env=env,
    )
    out = res.stdout + res.stderr
    assert res.returncode != 0 and "question.jsonl" in out and str(tmp_path / "none.jsonl") in out
    assert not (tmp_path / "logs").exists()  # no job started


def test_a_config_key_given_twice_stops_before_any_job(tmp_path):
    res, _ = snakemake([config(tmp_path, "simulation:\n  replicas: 2\n  replicas: 3\n")], tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode != 0 and "mine.yaml: replicas: key 'replicas' given twice (lines 2 and 3)" in out
    assert nothing_written(tmp_path)


def test_a_batch_that_cannot_fit_stops_before_any_job(tmp_path):
    res, _ = snakemake(
        [config(tmp_path, "simulation:\n  experiments:\n    small_batch: {batches: [1024]}\n")], tmp_path
    )
    out = res.stdout + res.stderr
    assert res.returncode != 0 and "simulation.experiments.small_batch" in out and "needs" in out
    assert nothing_written(tmp_path)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("acceptance:\n  tau: {window: .nan}\n", "acceptance.tau.window"),
        ("simulation:\n  replicas: 1.0e+308\n", "simulation.replicas"),
        ("profiling:\n  name: ../../../outside\n", "profiling.name"),
        ("simulation:\n  prompt_len: 2048\n", "simulation.prompt_len"),
    ],
)
def test_schema_gaps_are_closed(tmp_path, text, field):
    res, _ = snakemake([config(tmp_path, text), "-n"], tmp_path)
    assert res.returncode != 0 and field in res.stdout + res.stderr
    assert nothing_written(tmp_path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9) if i else 'x'}]\n" for i in range(10)), "aliases"),
        ("extensions: [{ext}]\n", "RuntimeError: my bug"),
        ("dse:\n  sweeps:\n    default: {base_points: 16384, chunk_points: 1}\n", "chunk_points"),
    ],
    ids=["alias bomb", "extension raises", "sweep of 262,144 jobs"],
)
def test_a_user_error_ends_the_dry_run_in_one_line(tmp_path, text, message):
    ext = tmp_path / "mine_ext.py"
    ext.write_text("raise RuntimeError('my bug')\n")
    res, took = snakemake([config(tmp_path, text.replace("{ext}", str(ext))), "-n"], tmp_path, timeout=60)
    out = res.stdout + res.stderr
    errors = [line for line in out.splitlines() if line.startswith("adsl: error: ")]
    assert res.returncode != 0 and took < 30 and len(errors) == 1 and message in errors[0]
    assert "Traceback" not in out and 'File "' not in out
    assert nothing_written(tmp_path)
