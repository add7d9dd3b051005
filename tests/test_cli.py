"""The command line: every subcommand stops on a bad argument with a message naming it and what is
allowed, exit status 2 and no traceback; the good paths print finite results."""

from __future__ import annotations

import math
import re
import subprocess
import sys

import pytest
import yaml

import adsl.profiling.run
from adsl.cli import main
from adsl.profiling.traces import TraceError
from tests.conftest import ROOT

CFG = ["--config", str(ROOT / "config" / "config.yaml"), "--base", str(ROOT)]
COST = ["cost", "--model", "OPT-66B", "--system", "saddle"]


def _config(tmp_path, **changes) -> list[str]:
    """The options for a copy of the workflow configuration with ``changes`` (section -> fields) laid over it."""
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    for section, value in changes.items():
        cfg[section] = {**cfg[section], **value} if isinstance(value, dict) else value
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return ["--config", str(path), "--base", str(ROOT)]


def _run(argv, capsys) -> tuple[int, str]:
    """Exit status and stderr of ``adsl argv`` (argparse errors exit through SystemExit)."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr().err


def _failing_snapshot(checkpoints, out_dir):
    raise TraceError(f"{checkpoints}: no valid checkpoints to snapshot; nothing written to {out_dir}")


# (case, options before the command or a config change, command, words the message must hold)
BAD = [
    ("unknown table", None, ["table", "nope"], ["table NAME", "'nope'", "roofline_points"]),
    ("unknown figure", None, ["figure", "nope"], ["figure NAME", "'nope'", "fig06_roofline"]),
    (
        "figure needs the profile",
        {"profiling": {"name": "no-such-profile"}},
        ["figure", "fig04b_accepted_per_iteration"],
        ["acceptance profile", "no-such-profile", "snakemake figures/fig04b_accepted_per_iteration.pdf --cores 2"],
    ),
    (
        "table needs the profile",
        {"profiling": {"name": "no-such-profile"}},
        ["table", "accepted_per_iteration"],
        ["no-such-profile", "snakemake results/acceptance/accepted_per_iteration.csv --cores 2"],
    ),
    ("batch 0", None, [*COST, "--batch", "0"], ["--batch", "integer in [1, 1024]"]),
    ("batch -5", None, [*COST, "--batch", "-5"], ["--batch", "integer in [1, 1024]"]),
    ("context -3", None, [*COST, "--context", "-3"], ["--context", "integer in [1, 131072]"]),
    ("tokens 0", None, [*COST, "--tokens", "0"], ["--tokens", "integer in [1, 131072]"]),
    ("batch not an integer", None, [*COST, "--batch", "two"], ["--batch", "'two'", "must be in [1, 1024]"]),
    ("batch a float", None, [*COST, "--batch", "1.5"], ["--batch", "must be in [1, 1024]"]),
    # beyond the configuration's bounds (batch x context as the schema bounds them), and echoed cut
    ("batch above the schema's", None, [*COST, "--batch", "1025"], ["--batch", "integer in [1, 1024]"]),
    ("context above the schema's", None, [*COST, "--context", "131073"], ["--context", "[1, 131072]"]),
    ("batch overflows", None, [*COST, "--batch", str(10**400)], ["--batch", "characters cut", "not an integer"]),
    ("unknown model", None, ["cost", "--model", "nope", "--system", "saddle"], ["--model", "'nope'", "OPT-66B"]),
    ("unknown system", None, ["cost", "--model", "OPT-66B", "--system", "nope"], ["--system", "'nope'", "saddle"]),
    ("unknown runtime", None, ["calibrate", "--runtime", "nope"], ["--runtime", "'nope'", "gpt-fast", "eager"]),
    (
        "snapshot fails",
        None,
        ["profile-snapshot", "--name", "x", "--out", "OUT"],
        ["no valid checkpoints", "nothing written"],
    ),
    ("snapshot name escapes", None, ["profile-snapshot", "--name", "../../x"], ["--name", "'../../x'", "'..'"]),
    ("snapshot name has a slash", None, ["profile-snapshot", "--name", "a/b"], ["--name", "letters, digits"]),
    (
        "snapshot config name escapes",
        {"profiling": {"name": "../x"}},
        ["profile-snapshot", "--out", "OUT"],
        ["profiling.name"],
    ),
    ("missing config", ["--config", "no/such/config.yaml"], ["check"], ["--config", "no/such/config.yaml"]),
    ("bad config value", {"roofline": {"system": "nope"}}, ["check"], ["roofline.system", "saddle"]),
    ("extension does not load", {"extensions": ["no_such_module_xyz"]}, ["table", "area"], ["extensions", "xyz"]),
]


@pytest.mark.parametrize(("case", "options", "command", "words"), BAD, ids=[b[0] for b in BAD])
def test_bad_argument_stops_with_a_message(case, options, command, words, tmp_path, capsys, monkeypatch):
    if case == "snapshot fails":
        monkeypatch.setattr(adsl.profiling.run, "snapshot", _failing_snapshot)
    if options is None:
        options = CFG
    elif isinstance(options, dict):
        options = _config(tmp_path, **options)
    command = [str(tmp_path / "out") if c == "OUT" else c for c in command]
    code, err = _run([*options, *command], capsys)
    assert code == 2, err
    assert "Traceback" not in err
    for word in words:
        assert word in err, f"{case}: {word!r} not in {err!r}"
    assert not (tmp_path / "out").exists()  # nothing written on an error


def test_console_script_has_no_traceback():
    for args in (["cost", "--model", "OPT-66B", "--system", "saddle", "--batch", "0"], ["table", "nope"]):
        proc = subprocess.run(
            [sys.executable, "-m", "adsl.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr
        assert "adsl" in proc.stderr


def test_help_lists_choices_and_units(capsys):
    for command, words in [
        ("figure", ["fig06_roofline", "fig04b_accepted_per_iteration"]),
        ("table", ["roofline_points"]),
        ("calibrate", ["gpt-fast", "eager"]),
        ("cost", ["(ms)", "(J)", "requests", "tokens", "1 to 1024", "1 to 131072"]),
        ("profile-snapshot", ["letters, digits"]),
    ]:
        with pytest.raises(SystemExit) as exc:
            main([command, "--help"])
        assert exc.value.code == 0
        out = capsys.readouterr().out
        for word in words:
            assert word in out, f"{command} --help: {word!r} missing"


def test_check(capsys):
    assert main([*CFG, "check"]) == 0
    out = capsys.readouterr().out
    assert "valid" in out and "OPT-66B" in out and "saddle" in out and "gpt-fast" in out


@pytest.mark.parametrize("sizes", [[], ["--batch", "64", "--tokens", "9", "--context", "1"]])
def test_cost_is_finite_and_positive(sizes, capsys):
    assert main([*CFG, *COST, *sizes]) == 0
    out = capsys.readouterr().out
    assert "nan" not in out.lower()
    ms, joules = map(float, re.search(r"total (\S+) ms, (\S+) J", out).groups())
    assert math.isfinite(ms) and ms > 0 and math.isfinite(joules) and joules > 0


def test_figure_without_inputs(tmp_path, capsys):
    assert main([*CFG, "figure", "fig06_roofline", "--outdir", str(tmp_path)]) == 0
    assert (tmp_path / "fig06_roofline.pdf").stat().st_size > 0
    assert (tmp_path / "fig06_roofline.png").stat().st_size > 0


def test_table_from_the_committed_profile(tmp_path, capsys):
    out = tmp_path / "t.csv"
    assert main([*CFG, "table", "accepted_per_iteration", "-o", str(out)]) == 0
    assert out.stat().st_size > 0


def test_calibrate(capsys):
    assert main([*CFG, "calibrate"]) == 0
    assert "runtime gpt-fast" in capsys.readouterr().out
