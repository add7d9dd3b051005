"""The four classes of input that used to get through, one regression test each at least: sizes with no bound
(or a bound checked too late), fields that contradict each other, paths trusted too far, and tracebacks
where one line is promised."""

import json
import time
from pathlib import Path

import pandas as pd
import pytest

from adsl.cli import main
from adsl.config import MAX_ITEMS, MAX_TEXT, MAX_VALUES, load_config, read_yaml
from adsl.dse.design import MAX_JOBS
from adsl.errors import AdslError, ConfigError
from adsl.perf.models import load_models
from adsl.workspace import load_workspace

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "config" / "config.yaml"


def alias_bomb(levels: int, width: int = 9) -> str:
    """A few hundred bytes of YAML that expand to width ** levels strings."""
    lines = [f"l0: &l0 [{', '.join(['x'] * width)}]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def cli(args, capsys, cwd=None):
    code = main(["--config", str(CONFIG), "--base", str(ROOT), *args])
    err = capsys.readouterr().err
    return code, err


# -- 1. sizes ------------------------------------------------------------------------------------------
def test_a_yaml_alias_bomb_is_refused_at_once(tmp_path):
    f = tmp_path / "bomb.yaml"
    f.write_text(alias_bomb(9))  # 9 ** 9 strings; the NaN check used to walk them for 3 minutes
    assert len(f.read_bytes()) < 500
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match=f"more than {MAX_VALUES:,} values with YAML aliases expanded"):
        read_yaml(f)
    assert time.monotonic() - t0 < 1


def test_a_recursive_alias_is_refused(tmp_path):
    f = tmp_path / "loop.yaml"
    f.write_text("a: &a [1, *a]\n")
    with pytest.raises(ConfigError, match="refers to itself"):
        read_yaml(f)


def test_a_dict_with_shared_parts_is_sized_before_the_nan_walk():
    part = ["x"] * 9
    for _ in range(9):
        part = [part] * 9  # Snakemake's own loader keeps aliases as shared objects like these
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match="YAML aliases expanded"):
        load_config({"simulation": {"experiments": {"x": {"pairs": part}}}})
    assert time.monotonic() - t0 < 1


def test_a_sweep_of_too_many_jobs_is_refused_before_the_dag():
    cfg = read_yaml(CONFIG)
    sweep = cfg["dse"]["sweeps"]["default"]
    sweep.update(base_points=16384, chunk_points=1)  # 262,144 jobs: the dry run never finished
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match=f"allowed: at most {MAX_JOBS:,} jobs") as err:
        load_workspace(cfg, base=ROOT)
    assert err.value.field == "dse.chunk_points" and time.monotonic() - t0 < 5


def test_a_grid_of_too_many_configurations_is_refused():
    cfg = read_yaml(CONFIG)
    sweep = cfg["dse"]["sweeps"]["default"]
    sweep["sampling"] = "grid"
    sweep["axes"] = {"pim_bandwidth": {"low": 4.0, "high": 16.0, "levels": 1000}, **sweep["axes"]}
    with pytest.raises(ConfigError, match="configurations; allowed: at most 1,000,000"):
        load_workspace(cfg, base=ROOT)


def test_long_strings_and_lists_are_refused_and_not_echoed(tmp_path):
    huge = "y" * 10_000_000
    with pytest.raises(ConfigError) as err:
        load_config({"profiling": {"name": huge}})
    assert f"a string of {len(huge):,} characters; allowed: at most {MAX_TEXT:,}" in str(err.value)
    assert len(str(err.value)) < 1000
    with pytest.raises(ConfigError, match=f"allowed: at most {MAX_ITEMS:,}") as err:
        load_config({"acceptance": {"categories": ["open_qa"] * (MAX_ITEMS + 1)}})
    assert len(str(err.value)) < 1000


def test_a_long_value_is_described_not_echoed():
    with pytest.raises(ConfigError) as err:
        load_config({"simulation": {"replicas": "z" * 3000}})
    text = str(err.value)
    assert "simulation.replicas: a string of 3,000 characters is not of type 'integer'" in text and "zzz" not in text


# -- 2. fields that contradict each other ------------------------------------------------------------------
def test_an_experiment_with_both_pair_and_pairs_is_refused():
    cfg = read_yaml(CONFIG)
    name, exp = next(iter(cfg["simulation"]["experiments"].items()))
    exp.update(pair="OPT-66B", pairs=["Llama3.1-70B"])  # pairs used to win silently
    with pytest.raises(ConfigError, match="gives both pair and pairs") as err:
        load_config(cfg)
    assert err.value.field == f"simulation.experiments.{name}"


def test_a_draft_larger_than_its_target_is_refused(tmp_path):
    text = (ROOT / "config" / "models.yaml").read_text()
    swapped = text.replace("target: OPT-66B\n    draft: OPT-1.3B", "target: OPT-1.3B\n    draft: OPT-66B")
    assert swapped != text
    f = tmp_path / "models.yaml"
    f.write_text(swapped)
    with pytest.raises(ConfigError, match="is not smaller than its target") as err:
        load_models(f)
    assert err.value.field == "pairs.OPT-66B.draft"


# -- 3. paths ------------------------------------------------------------------------------------------
def test_an_empty_outdir_is_refused_and_nothing_is_written(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(["--config", str(CONFIG), "--base", str(ROOT), "figure", "fig06_roofline", "--outdir", ""])
    assert exit_.value.code == 2 and "an empty path" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_folder_given_as_an_output_file_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--config", str(CONFIG), "table", "roofline_points", "-o", str(tmp_path)])
    assert exit_.value.code == 2 and "is a folder; give a file path" in capsys.readouterr().err


def test_a_catalogue_outside_the_project_is_not_echoed(tmp_path, capsys):
    secret = tmp_path / "elsewhere" / "notes.txt"
    secret.parent.mkdir()
    secret.write_text("".join(f"line {i}: private text that is no catalogue\n" for i in range(200)))
    mine = tmp_path / "mine.yaml"
    mine.write_text(f"catalogues:\n  models: {secret}\n")
    code = main(["--config", str(mine), "--base", str(ROOT), "check"])
    err = capsys.readouterr().err
    assert code == 2 and str(secret) in err and "private text" not in err and len(err.splitlines()) == 1


# -- 4. one line, never a traceback -------------------------------------------------------------------------
def test_an_output_folder_that_cannot_be_written_is_one_line(capsys):
    code, err = cli(["table", "roofline_points", "-o", "/proc/adsl-table.csv"], capsys)
    assert code == 1 and len(err.splitlines()) == 1 and "Traceback" not in err and "/proc/" in err


def test_a_full_disk_during_a_figure_save_is_one_line_and_leaves_nothing(tmp_path, capsys, monkeypatch):
    import errno

    import matplotlib.figure

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(args[0]))

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", full)
    code, err = cli(["figure", "fig06_roofline", "--outdir", str(tmp_path / "out")], capsys)
    assert code == 1 and "No space left on device" in err and len(err.splitlines()) == 1
    assert not any(p.is_file() for p in tmp_path.rglob("*"))


def test_an_extension_module_that_raises_is_one_line(tmp_path, capsys):
    ext = tmp_path / "mine.py"
    ext.write_text("raise RuntimeError('my bug')\n")
    mine = tmp_path / "mine.yaml"
    mine.write_text(f"extensions: [{ext}]\n")
    code = main(["--config", str(mine), "--base", str(ROOT), "check"])
    err = capsys.readouterr().err
    assert code == 2 and "RuntimeError: my bug" in err and str(ext) in err and len(err.splitlines()) == 1


def test_an_anchor_table_with_text_in_a_number_column_is_one_line(tmp_path, capsys):
    anchors = tmp_path / "anchors"
    anchors.mkdir()
    for f in (ROOT / "data" / "anchors").glob("*.csv"):
        (anchors / f.name).write_bytes(f.read_bytes())
    table = pd.read_csv(anchors / "gpu_decode.csv")
    table["tokens_per_s"] = table["tokens_per_s"].astype(object)
    table.loc[2, "tokens_per_s"] = "fast"
    table.to_csv(anchors / "gpu_decode.csv", index=False)
    mine = tmp_path / "mine.yaml"
    mine.write_text(f"anchors_dir: {anchors}\n")
    code = main(["--config", str(mine), "--base", str(ROOT), "calibrate"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1
    assert "column 'tokens_per_s' row 4: 'fast' is not a finite number" in err


def test_a_model_file_out_of_its_fits_range_is_refused_on_read(tmp_path):
    from adsl.fitting.modelfile import read_model

    model = json.loads((ROOT / "tests/sim/golden/results/acceptance/OPT-66B/open_qa.json").read_text())
    model["calibration"]["draft_continuation"] = 1e300  # it was used, and moved a throughput by 8 %
    f = tmp_path / "open_qa.json"
    f.write_text(json.dumps(model))
    with pytest.raises(AdslError, match=r"calibration.draft_continuation must be a number in \[-8, 8\]"):
        read_model(f)


@pytest.mark.parametrize(
    "override",
    [
        {"catalogues": {"models": ""}},
        {"anchors_dir": " "},
        {"profiling": {"spec_bench": ""}},
        {"extensions": ["\t"]},
    ],
)
def test_a_blank_path_is_refused(override):
    with pytest.raises(ConfigError, match="is blank \\(allowed: a path, not blank"):
        load_config(override)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("OPT-66B,open_qa,1.5", "tau 1.5 must be a number in [0, 1]"),
        ("OPT-66B,open_qa,high", "tau 'high' must be a number in [0, 1]"),
        ("OPT-66B,summarization,0.5", "a second tau for (OPT-66B, summarization)"),
    ],
)
def test_a_tau_table_out_of_its_fits_range_is_refused(tmp_path, row, message):
    from adsl.fitting.tau import read_taus

    f = tmp_path / "tau.csv"
    f.write_text(f"pair,category,tau\nOPT-66B,summarization,0.7\n{row}\n")
    with pytest.raises(AdslError) as err:
        read_taus(f)
    assert str(err.value) == f"{f}: row 3: {message}"


def test_experiments_of_too_many_points_are_refused_before_building_them():
    cfg = read_yaml(CONFIG)
    exp = cfg["simulation"]["experiments"]["main"]
    exp.update(batches=list(range(1, 1025)), seq_lens=list(range(600, 1624)))  # 1024 x 1024 x pairs x systems
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match="points .*allowed: at most 20,000 in all") as err:
        load_config(cfg)
    assert err.value.field == "simulation.experiments.main" and time.monotonic() - t0 < 5


def test_oversized_model_and_anchor_files_are_refused_unread(tmp_path, capsys):
    from adsl.figures.validation import MAX_ANCHOR_BYTES, read_anchor
    from adsl.fitting.modelfile import MAX_BYTES, read_model

    big = tmp_path / "big.json"
    with big.open("wb") as fh:
        fh.truncate(MAX_BYTES + 1)  # sparse: no 16 MB written
    with pytest.raises(AdslError, match=f"allowed: at most {MAX_BYTES:,}"):
        read_model(big)
    csv = tmp_path / "big.csv"
    with csv.open("wb") as fh:
        fh.truncate(MAX_ANCHOR_BYTES + 1)
    with pytest.raises(AdslError, match=f"allowed: at most {MAX_ANCHOR_BYTES:,}"):
        read_anchor(csv)
    assert main(["--config", str(CONFIG), "--base", " ", "check"]) == 2
    assert "--base: no such folder" in capsys.readouterr().err
