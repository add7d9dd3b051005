"""Bad-input fuzz: every value of the shipped configuration and of a profile, mutated one at a time into
something no rule allows, is stopped before any work with a message (an ``AdslError``), never a traceback."""

import copy
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from adsl.cli import main
from adsl.config import read_yaml
from adsl.errors import AdslError
from adsl.profiling.traces import SCHEMAS, TABLES, read_profile
from adsl.sim.experiment import check_experiments
from adsl.workspace import load_workspace

ROOT = Path(__file__).resolve().parents[2]
CONFIG = read_yaml(ROOT / "config" / "config.yaml")
PROFILE = ROOT / "data" / "profiles" / "qwen2.5-coder-0.5b-1.5b"


def leaves(node, path=()):
    """(path, value) of every scalar in the configuration."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from leaves(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from leaves(v, (*path, i))
    else:
        yield path, node


def bad_values(value) -> list:
    """Values no setting of ``value``'s kind accepts."""
    if isinstance(value, bool):
        return ["maybe", {"on": 1}]
    if isinstance(value, int | float):  # (integers written as floats: test_config_input, per setting)
        return [math.nan, math.inf, -math.inf, "lots", [value]]
    if isinstance(value, str):
        return [{"typo": value}, [value, value]]
    return []


CASES = [(path, bad) for path, value in leaves(CONFIG) for bad in bad_values(value)]


def mutated(path: tuple, value) -> dict:
    cfg = copy.deepcopy(CONFIG)
    *parents, leaf = path
    node = cfg
    for key in parents:
        node = node[key]
    node[leaf] = value
    return cfg


def test_the_fuzz_covers_more_than_a_hundred_config_values():
    assert len(CASES) > 300 and len({p for p, _ in CASES}) > 100


@pytest.mark.parametrize(("path", "value"), CASES, ids=[f"{'.'.join(map(str, p))}={v!r}"[:80] for p, v in CASES])
def test_every_mutated_config_value_is_stopped_before_work(path, value):
    with pytest.raises(AdslError):
        check_experiments(load_workspace(mutated(path, value), base=ROOT, file="fuzz.yaml"))


@pytest.mark.parametrize("path", ["simulation.replicas", "profiling.name", "acceptance.tau.window", "seed"])
def test_the_command_line_says_so_without_a_traceback(tmp_path, capsys, path):
    f = tmp_path / "fuzz.yaml"
    f.write_text(yaml.safe_dump(mutated(tuple(path.split(".")), math.nan if path != "profiling.name" else "../up")))
    assert main(["--config", str(f), "--base", str(ROOT), "check"]) == 2
    err = capsys.readouterr().err
    assert path in err and "Traceback" not in err


# -- profiles --------------------------------------------------------------------------------------
def bad_cells(field: pa.Field) -> list:
    """Values that break a trace column of ``field``'s type: a null, and one out of any range it has."""
    if pa.types.is_boolean(field.type):
        return [None, 2, "yes"]
    if pa.types.is_integer(field.type):
        return [None, -7, 2.5]
    if pa.types.is_floating(field.type):
        return [None, math.nan, -0.5, math.inf]
    return [None, "nope"] if field.name == "mode" else [None]  # other text columns are free text


def _profile_cases():
    return [(name, field.name, bad) for name in TABLES for field in SCHEMAS[name] for bad in bad_cells(field)]


PROFILE_CASES = _profile_cases()


def test_the_fuzz_covers_every_profile_column():
    assert {(t, c) for t, c, _ in PROFILE_CASES} == {(t, f.name) for t in TABLES for f in SCHEMAS[t]}


def _array(values: list) -> pa.Array:
    """A column as pyarrow infers it; a mix it cannot type (a string among numbers) as text."""
    try:
        return pa.array(values, from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([None if v is None else str(v) for v in values])


def write_with(tmp_path, table: str, column: str, value) -> Path:
    """The committed profile with one cell of ``table.column`` replaced, written with raw pyarrow (so no
    adsl check stands between the bad value and the file), the other tables copied."""
    out = tmp_path / "profile"
    out.mkdir()
    for name in TABLES:
        src = pq.read_table(PROFILE / f"{name}.parquet")
        if name == table:
            df = src.to_pandas()
            row = len(df) // 2
            col = df[column].astype(object)
            col.iloc[row] = value
            df[column] = col
            arrays = [_array(df[f.name].tolist()) for f in src.schema]
            src = pa.Table.from_arrays(arrays, names=src.schema.names).replace_schema_metadata(src.schema.metadata)
        pq.write_table(src, out / f"{name}.parquet")
    return out


@pytest.mark.parametrize(
    ("table", "column", "value"), PROFILE_CASES, ids=[f"{t}.{c}={v!r}" for t, c, v in PROFILE_CASES]
)
def test_every_mutated_profile_value_is_stopped_on_read(tmp_path, table, column, value):
    folder = write_with(tmp_path, table, column, value)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    with pytest.raises(AdslError) as err:
        read_profile(folder)
    assert f"{table}.parquet" in str(err.value) and column in str(err.value)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before  # nothing written


def test_the_committed_profile_reads():
    prof = read_profile(PROFILE)
    assert len(prof.requests) == 160 and np.isfinite(prof.drafts.q_token).all()
