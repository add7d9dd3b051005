"""The README's gallery: its committed tables are what a fresh run gives, and the numbers the README
quotes are those tables'."""

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from adsl import paths
from adsl.figures import agreement
from adsl.figures.registry import registry
from adsl.provenance import computes_alike, machine

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
            cells = [v.split("±") for v in row.group(1).split("|")]  # ours: value ± its 95 % interval
            quoted = [tuple(float(x) for x in c) for c in cells]
            cols = [col, "ours_ci95"] if who == "ours" else [col]
            baselines = ("GPU-AD", "GPU-SD", "PIM-AD", "PIM-SD")
            expected = [tuple(round(float(table.loc[(metric, b), c]), 2) for c in cols) for b in baselines]
            assert quoted == expected, (metric, who)


def _workspace():
    from adsl.workspace import load_workspace

    return load_workspace(ROOT / "config" / "config.yaml", base=ROOT)


def gallery_disagreements(run: Path, ws=None) -> list[agreement.Disagreement]:
    """Where the gallery of ``run`` (a folder ``snakemake gallery`` ran in) and the committed one disagree
    beyond what another processor explains (``adsl.figures.agreement``), against the run's own sampling
    errors: its calibration streams (Fig. 4a) and its timeline under other seeds."""
    from adsl.fitting.modelfile import read_model

    ws = ws or _workspace()
    sim = ws.settings.simulation
    (pair,) = ws.settings.acceptance.calibrated_to("paper_fig04a")  # the pair Fig. 4a marks
    calibrated = [read_model(p) for p in sorted((run / "results" / "acceptance" / pair).glob("*.json"))]
    calibration = agreement.calibration_half_widths({m["category"]: m for m in calibrated})
    models = sorted(str(p) for p in (run / "results" / "acceptance" / sim.timeline.pair).glob("*.json"))
    spread = agreement.timeline_spread(ws, models, str(run / "results" / "acceptance" / "tau.csv"))
    out = []
    for name in registry().gallery:
        fresh, committed = pd.read_csv(run / "docs" / "img" / f"{name}.csv"), pd.read_csv(IMG / f"{name}.csv")
        out += agreement.disagreements(name, fresh, committed, sim.replicas, calibration, spread)
    return out


def test_every_gallery_table_has_a_rule_for_each_number():
    assert set(agreement.RULES) == set(registry().gallery)
    for name, rule in agreement.RULES.items():
        if rule.timeline:
            continue
        table = pd.read_csv(IMG / f"{name}.csv")
        named = {*rule.exact, *(m.column for m in rule.means), *rule.intervals, rule.calibrated} - {None}
        assert set(table.select_dtypes("number").columns) <= named <= set(table.columns), name


def test_the_committed_gallery_agrees_with_itself():
    committed = {n: pd.read_csv(IMG / f"{n}.csv") for n in registry().gallery}
    spread = agreement.timeline_statistics(committed["timeline"]).to_frame().assign(b=lambda d: d.iloc[:, 0] * 1.01)
    calibration = dict.fromkeys(committed["fig04a_acceptance_rate"].category, 0.0)
    for name, table in committed.items():
        assert agreement.disagreements(name, table, table.copy(), 4, calibration, spread) == [], name


def _moved(name: str, column: str, factor: float, system: str = "SADDLE") -> list:
    table = pd.read_csv(IMG / f"{name}.csv")
    moved = table.copy()
    rows = moved.system == system
    moved.loc[rows, column] = moved.loc[rows, column] * factor
    return agreement.disagreements(name, moved, table, 4)


def test_agreement_catches_a_stale_table():
    table = pd.read_csv(IMG / "fig12_throughput.csv")
    saddle = table[table.system == "SADDLE"]
    # a mean moved by twice the 95 % half-width of a difference, at every SADDLE point
    factor = 1 + 2 * math.sqrt(2) * float((saddle.normalized_ci95 / saddle.normalized).max())
    found = _moved("fig12_throughput", "normalized", factor)
    assert {d.column for d in found} == {"normalized"} and len(found) == len(saddle)
    assert len(_moved("fig12_throughput", "normalized_ci95", 8.0)) == len(saddle)  # beyond F(3, 3)'s 99 %
    assert _moved("fig12_throughput", "normalized_ci95", 1.5) == []  # within what 4 replicas give
    # a number no draw reaches moves by one printed digit
    assert len(_moved("fig12_throughput", "limit_tok_s", 1 + 1e-5)) == len(saddle)
    assert len(_moved("fig12_throughput", "throughput_tok_s", 1.0, system="GPU-AD")) == 0
    gpu_ad = (table.system == "GPU-AD").sum()
    assert len(_moved("fig12_throughput", "throughput_tok_s", 1 + 1e-5, system="GPU-AD")) == gpu_ad
    renamed = table.assign(system=table.system.replace({"SADDLE": "saddle"}))
    assert [d.column for d in agreement.disagreements("fig12_throughput", renamed, table, 4)] == ["system"]


def test_the_interval_ratio_bound_is_the_f_distributions():
    # two sample variances of 4 draws each: F(3, 3); its 99.5 % quantile is 47.47
    assert agreement.interval_ratio_bound(4) == pytest.approx(math.sqrt(47.467), rel=1e-4)
    assert agreement.interval_ratio_bound(40) < agreement.interval_ratio_bound(4)


def test_a_timeline_beyond_its_spread_over_seeds_disagrees():
    table = pd.read_csv(IMG / "timeline.csv")
    stats = agreement.timeline_statistics(table)
    spread = pd.DataFrame({k: stats * (1 + 0.01 * (k - 4)) for k in range(1, 9)})  # sd about 2.4 % of each
    assert agreement.disagreements("timeline", table, table.copy(), 4, timeline=spread) == []
    late = table.assign(end_ms=table.end_ms * 1.02, start_ms=table.start_ms * 1.02)
    assert agreement.disagreements("timeline", late, table, 4, timeline=spread) == []  # within the spread
    later = table.assign(end_ms=table.end_ms * 1.5, start_ms=table.start_ms * 1.5)
    found = agreement.disagreements("timeline", later, table, 4, timeline=spread)
    assert {d.column for d in found} >= {"PIM-SD / span", "SADDLE / span"}
    other = table.assign(configuration=table.configuration.str.replace("1 micro-batch", "2 micro-batches"))
    assert "configuration" in {d.column for d in agreement.disagreements("timeline", other, table, 4, timeline=spread)}


@pytest.mark.slow
def test_gallery_tables_match_a_fresh_run(tmp_path):
    """Byte for byte where docs/img was made with the same vector extensions, numpy and scipy
    (``adsl.provenance.computes_alike``); everywhere the same numbers where no draw enters and statistically
    equal where one does (``adsl.figures.agreement``, docs/testing.md)."""
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--cores", "2", "gallery"]
    res = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, env={**os.environ})
    assert res.returncode == 0, res.stderr[-3000:]
    if computes_alike(json.loads((IMG / "machine.json").read_text()), machine()):
        for name in registry().gallery:
            fresh, committed = (tmp_path / "docs/img" / f"{name}.csv").read_bytes(), (IMG / f"{name}.csv").read_bytes()
            assert fresh == committed, f"docs/img/{name}.csv is stale: run `snakemake gallery`"
    found = gallery_disagreements(tmp_path)
    assert not found, "\n".join(map(str, found))


def _last_digits_moved(profile: Path, out: Path) -> None:
    """The profile with every measured float one ulp nearer zero, as another processor's last digits would
    move a computed one (the settings it records, such as the temperature, unchanged)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out.mkdir(parents=True)
    for f in sorted(profile.glob("*.parquet")):
        table = pq.read_table(f)
        columns = []
        for name, col in zip(table.column_names, table.columns, strict=True):
            if pa.types.is_floating(col.type) and name != "temperature":
                x = col.to_numpy()
                col = pa.array(np.where(x != 0, np.nextafter(x, 0.0), x), type=col.type)
            columns.append(col)
        pq.write_table(pa.Table.from_arrays(columns, schema=table.schema), out / f.name)


@pytest.mark.slow
def test_the_gallery_agrees_when_the_fits_inputs_move_in_their_last_digits(tmp_path):
    """Another processor, played here: the fits read a profile one ulp off in every measured number, so the
    fitted and calibrated models differ in their last digits (and the calibration may end elsewhere within
    its tolerance); the gallery must still agree with the committed one by ``adsl.figures.agreement``."""
    ws = _workspace()
    name = ws.settings.profiling.name
    _last_digits_moved(ROOT / paths.profile(name), tmp_path / paths.profile(name))
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--cores", "2", "gallery"]
    res = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, env={**os.environ})
    assert res.returncode == 0, res.stderr[-3000:]
    pinned = ROOT / "tests/sim/golden/results/acceptance/measured/open_qa.json"  # the golden set's fit
    fitted = tmp_path / "results/acceptance/measured/open_qa.json"
    assert json.loads(fitted.read_text())["joint"] != json.loads(pinned.read_text())["joint"]  # the move reached it
    found = gallery_disagreements(tmp_path, ws)
    assert not found, "\n".join(map(str, found))
