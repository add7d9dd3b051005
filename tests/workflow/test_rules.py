"""The rules and the registry agree, rules take exactly what their functions read, a user's figure needs
no rule edit, and bad input stops a job with its message alone."""

import inspect
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from adsl import workflow
from adsl.figures.registry import registry

ROOT = Path(__file__).resolve().parents[2]
SNAKEMAKE = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--cores", "2"]
PROFILE = "data/profiles/qwen2.5-coder-0.5b-1.5b"


def snakemake(args, cwd, check=True):
    res = subprocess.run(SNAKEMAKE + args, cwd=cwd, capture_output=True, text=True, env={**os.environ})
    if check and res.returncode:
        raise AssertionError(f"snakemake {args} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    return res


def test_every_registry_entry_is_a_target_and_every_figure_output_is_registered(tmp_path):
    reg = registry()
    dry = snakemake(["-n", "--forceall", "all", *reg.targets], tmp_path)  # the default run and named targets
    planned = dry.stdout + dry.stderr
    figures = set(re.findall(r"figures/([\w.-]+)\.pdf", planned))
    assert figures == set(reg.figures), figures ^ set(reg.figures)
    for spec in reg.tables.values():
        assert spec.path in planned, spec.name


def test_rule_functions_take_exactly_their_rule_params():
    """Each function a rule runs takes keyword arguments named like the rule's inputs, outputs, params and
    wildcards; the rule files name these and nothing else (a mismatch is a TypeError at run time, here a
    check of the names the rule files declare)."""
    rules = {p.stem: p.read_text() for p in (ROOT / "workflow/rules").glob("*.smk")}
    scripts = {p.stem: p.read_text() for p in (ROOT / "workflow/scripts").glob("*.py")}
    for name, script in scripts.items():
        fn = getattr(workflow, re.search(r"run\(snakemake, (\w+)\)", script).group(1))
        params = inspect.signature(fn).parameters
        assert all(p.kind is not p.VAR_POSITIONAL for p in params.values()), name
        assert fn.__doc__, f"{fn.__name__}: one line on what the rule runs"
        assert any(f'"../scripts/{name}.py"' in r for r in rules.values()), f"no rule runs scripts/{name}.py"


def test_a_new_figure_renders_without_editing_a_rule_file(tmp_path):
    ext = tmp_path / "my_figures.py"
    ext.write_text(
        '''
import matplotlib.pyplot as plt
import pandas as pd

from adsl.figures.registry import FigureSpec, TableSpec


def squares_table(ws, n):
    return pd.DataFrame({"x": range(n), "y": [i * i for i in range(n)]})


def squares(ws, df):
    """A user's figure: y = x squared, drawn from a table the workflow computed."""
    fig, ax = plt.subplots()
    ax.plot(df.x, df.y)
    return fig, df


TABLES = [TableSpec("squares", squares_table, "results/mine/squares.csv", "costmodel", options={"n": 5})]
FIGURES = [FigureSpec("squares", "squares", squares)]
'''
    )
    res = snakemake(["figures/squares.pdf", "--config", f"extensions=['{ext}']"], tmp_path)
    assert (tmp_path / "figures/squares.pdf").is_file(), res.stderr[-2000:]
    assert (tmp_path / "results/figures/squares.csv").read_text().splitlines()[-1] == "4,16"
    assert "rule table_squares" in res.stdout + res.stderr
    assert (tmp_path / "logs/tables/squares.log").read_text().startswith("rule table_squares: adsl.workflow.table(")


@pytest.fixture
def working_copy(tmp_path):
    """A working directory with its own copy of the committed profile."""
    shutil.copytree(ROOT / PROFILE, tmp_path / PROFILE)
    return tmp_path


def test_a_bad_profile_file_stops_before_any_job_that_reads_it(working_copy):
    (working_copy / PROFILE / "requests.parquet").write_bytes(b"not a parquet file")
    res = snakemake(["results/acceptance/measured/open_qa.json"], working_copy, check=False)
    assert res.returncode != 0
    out = res.stdout + res.stderr
    assert "requests.parquet: not a readable Parquet file" in out
    assert not (working_copy / "logs").exists()
    # a target that does not read the profile still runs
    snakemake(["-n", "figures/fig06_roofline.pdf"], working_copy)


def test_a_job_error_is_in_its_log_with_the_traceback(working_copy):
    """The profile reads, but one category of it has too few greedy requests to fit: the job fails."""
    steps = working_copy / PROFILE / "requests.parquet"
    table = pq.read_table(steps)
    col = table.schema.get_field_index("category")
    renamed = pc.if_else(pc.equal(table["category"], "open_qa"), "creative_writing", table["category"])
    pq.write_table(table.set_column(col, table.schema.field(col), renamed), steps)
    res = snakemake(["results/acceptance/measured/open_qa.json"], working_copy, check=False)
    assert res.returncode != 0
    log = (working_copy / "logs/fit_measured/open_qa.log").read_text()
    assert "Traceback (most recent call last)" in log and "adsl: " in log and "open_qa" in log


def test_editing_a_profile_file_in_place_reruns_the_fits(working_copy):
    target = "results/acceptance/measured/open_qa.json"
    (working_copy / target).parent.mkdir(parents=True)
    (working_copy / target).write_text("{}")
    snakemake(["--touch", target], working_copy)  # the output marked up to date without running
    before = snakemake(["-n", target], working_copy)
    assert "Nothing to be done" in before.stdout + before.stderr
    f = working_copy / PROFILE / "positions.parquet"
    later = time.time() + 60
    os.utime(f, (later, later))
    planned = snakemake(["-n", target], working_copy)
    assert "rule fit_measured:" in planned.stdout + planned.stderr


def test_the_paper_target_plans_the_calibration_every_paper_figure_and_the_ledger(tmp_path):
    """`snakemake paper`: the calibration, each evaluation figure under figures/paper/, the reproduction
    table, the ledger with its waterfall and the pipeline decomposition; the default run plans none of them."""
    import json

    import yaml

    sys.path.insert(0, str(ROOT / "tests" / "paper"))
    from training_layout import training_values

    (tmp_path / "training.json").write_text(json.dumps(training_values()))
    raw = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    raw["training"] = str(tmp_path / "training.json")
    (tmp_path / "paper.yaml").write_text(yaml.safe_dump(raw))
    dry = snakemake(["-n", "paper", "--config", f"paper_mode={tmp_path / 'paper.yaml'}"], tmp_path)
    planned = dry.stdout + dry.stderr
    from adsl.paper.reproduction import TABLES

    reg = registry()
    figures = {n for n in reg.figures if reg.figures[n].table in TABLES}
    assert set(re.findall(r"figures/paper/([\w.-]+)\.pdf", planned)) == figures | {"waterfall"}
    for out in ("calibration.csv", "reproduction.csv", "ledger.csv", "pipeline_puzzle.csv", "constants.json"):
        assert f"results/paper/{out}" in planned, out
    default = snakemake(["-n", "--forceall"], tmp_path)
    assert "results/paper/" not in default.stdout + default.stderr
