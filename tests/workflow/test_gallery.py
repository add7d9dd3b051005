"""The README's gallery: its committed tables are what a fresh run gives, and the numbers the README
quotes are those tables'."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from adsl.figures.registry import registry

ROOT = Path(__file__).resolve().parents[2]
IMG = ROOT / "docs" / "img"


def test_the_gallery_is_committed_and_registered():
    names = registry().gallery
    assert "paper_comparison" in names and "fig12_throughput" in names
    for name in names:
        assert (IMG / f"{name}.png").is_file() and (IMG / f"{name}.csv").is_file(), name
    readme = (ROOT / "README.md").read_text()
    for name in names:
        assert f"docs/img/{name}.png" in readme, f"the README shows {name}"
    assert len(readme.splitlines()) <= 250


def test_the_readme_quotes_the_committed_headline():
    table = pd.read_csv(IMG / "paper_comparison.csv").set_index(["metric", "baseline"])
    readme = (ROOT / "README.md").read_text()
    for metric, label in (("throughput", "throughput"), ("energy_efficiency", "energy efficiency")):
        for who, col in (("ours", "ours"), ("paper", "paper")):
            row = re.search(rf"^\| {label}, {who} \|(.*)\|$", readme, re.M)
            assert row, f"README row '{label}, {who}'"
            quoted = [float(v) for v in row.group(1).split("|")]
            expected = [round(float(table.loc[(metric, b), col]), 2) for b in ("GPU-AD", "GPU-SD", "PIM-AD", "PIM-SD")]
            assert quoted == expected, (metric, who)


@pytest.mark.slow
def test_gallery_tables_match_a_fresh_run(tmp_path):
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--cores", "2", "gallery"]
    res = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, env={**os.environ})
    assert res.returncode == 0, res.stderr[-3000:]
    for name in registry().gallery:
        fresh = (tmp_path / "docs/img" / f"{name}.csv").read_bytes()
        assert fresh == (IMG / f"{name}.csv").read_bytes(), f"docs/img/{name}.csv is stale: run `snakemake gallery`"
