"""Bad values in a profile are refused on write and on read with a TraceError naming the file, column, row
and allowed range (never another exception), and a refused write leaves an existing profile byte-identical."""

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adsl.profiling.traces import (
    FORMAT_VERSION,
    KEYS,
    MODES,
    NONEMPTY_TEXT,
    RANGES,
    SCHEMAS,
    TABLES,
    TraceError,
    empty_tables,
    read_profile,
    read_table,
    write_profile,
    write_table,
)

COMMITTED = Path(__file__).resolve().parents[2] / "data/profiles/qwen2.5-coder-0.5b-1.5b"


def tables() -> dict[str, pd.DataFrame]:
    """Request 0: greedy, teacher-forced (3 positions); request 1: sampled, no positions."""
    common = dict(dataset="spec_bench", d_max=2, draft_model="d", target_model="t", versions="{}")
    requests = pd.DataFrame(
        [
            dict(request_id=0, category="open_qa", source_category="qa", question_id="1", mode="greedy",
                 temperature=1.0, seed=7, prompt_len=5, generated_len=3, wall_time_s=0.1, **common),
            dict(request_id=1, category="coding", source_category="code", question_id="2", mode="sample",
                 temperature=0.7, seed=8, prompt_len=4, generated_len=3, wall_time_s=0.2, **common),
        ]
    )  # fmt: skip
    steps = pd.DataFrame(
        dict(
            request_id=[0, 0, 1],
            step=[0, 1, 0],
            context_len=[5, 7, 4],
            drafted=[2, 2, 2],
            accepted=[1, 0, 2],
            emitted=[2, 1, 3],
        )
    )
    drafts = pd.DataFrame(
        dict(
            request_id=[0, 0, 0, 0, 1, 1],
            step=[0, 0, 1, 1, 0, 0],
            pos=[1, 2, 1, 2, 1, 2],
            q_token=[0.9, 0.5, 0.4, 0.3, 0.6, 0.7],
            p_token=[0.95, 0.1, 0.2, 0.3, 0.8, 0.7],
            accept_prob=[1.0, 0.2, 0.5, 1.0, 1.0, 1.0],
            beta=[0.9, 0.5, 0.6, 0.7, 0.8, 0.9],
            draft_entropy=[0.3, 1.0, 1.2, 1.4, 0.5, 0.4],
            accepted=[True, False, False, False, True, True],
        )
    )
    positions = pd.DataFrame(
        dict(
            request_id=[0, 0, 0],
            pos=[0, 1, 2],
            match=[True, False, True],
            beta=[0.9, 0.5, 0.8],
            draft_top1=[0.9, 0.5, 0.7],
            draft_entropy=[0.3, 1.0, 0.6],
        )
    )
    return dict(requests=requests, steps=steps, drafts=drafts, positions=positions)


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.fixture
def good(tmp_path) -> Path:
    """A folder holding a valid profile, to be left untouched by refused writes."""
    folder = tmp_path / "profile"
    write_profile(tables(), folder)
    return folder


def refused_write(folder: Path, t: dict[str, pd.DataFrame]) -> str:
    """The message of write_profile refusing ``t`` over the valid profile in ``folder``, which must stay
    byte-identical (and no stray temporary files)."""
    before = snapshot(folder)
    with pytest.raises(TraceError) as err:
        write_profile(t, folder)
    assert snapshot(folder) == before
    return str(err.value)


def raw_file(path: Path, name: str, df: pd.DataFrame, **arrays) -> Path:
    """Write ``df`` (columns replaced by ``arrays``) as a Parquet trace file without any check, as another
    tool might, with the format version in its metadata."""
    table = pa.Table.from_pandas(df, preserve_index=False)
    for column, arr in arrays.items():
        table = table.set_column(table.schema.get_field_index(column), column, arr)
    table = table.replace_schema_metadata({"adsl_trace_format": FORMAT_VERSION, "adsl_table": name})
    pq.write_table(table, path)
    return path


def refused_read(path: Path, name: str) -> str:
    with pytest.raises(TraceError) as err:
        read_table(path, name)
    return str(err.value)


def set_value(df: pd.DataFrame, column: str, row: int, value) -> pd.DataFrame:
    """``df`` with one value replaced, the column's dtype inferred anew (as a producer would get it)."""
    values = df[column].tolist()
    values[row] = value
    return df.assign(**{column: pd.Series(values, dtype=object).infer_objects()})


# --------------------------------------------------------------------------- the reported failures
def test_bool_stored_as_int8_is_refused(good, tmp_path):
    t = tables()
    t["drafts"]["accepted"] = np.array([2, 0, 0, 0, 2, 2], dtype=np.int8)
    msg = refused_write(good, t)
    assert f"{good / 'drafts.parquet'}: column 'accepted'" in msg and "type int8 found, expected bool" in msg
    path = raw_file(tmp_path / "drafts.parquet", "drafts", t["drafts"])
    msg = refused_read(path, "drafts")
    assert f"{path}: column 'accepted'" in msg and "type int8 found, expected bool" in msg


def test_bool_column_with_none_names_the_row(good, tmp_path):
    t = tables()
    t["positions"]["match"] = [True, None, True]
    msg = refused_write(good, t)
    assert msg.startswith(f"{good / 'positions.parquet'}: column 'match', row 1: null")
    path = raw_file(tmp_path / "p.parquet", "positions", tables()["positions"], match=pa.array([True, None, True]))
    assert refused_read(path, "positions").startswith(f"{path}: column 'match', row 1: null")


def test_bool_stored_as_strings_is_refused(good, tmp_path):
    t = tables()
    t["positions"]["match"] = ["True", "False", "True"]
    msg = refused_write(good, t)
    assert "positions.parquet: column 'match'" in msg and "string found, expected bool" in msg
    path = raw_file(tmp_path / "p.parquet", "positions", t["positions"])
    msg = refused_read(path, "positions")
    assert f"{path}: column 'match'" in msg and "string found, expected bool" in msg


@pytest.mark.parametrize(("table", "row", "lo"), [("drafts", 2, 1), ("positions", 0, 0)])
def test_negative_pos(good, tmp_path, table, row, lo):
    t = tables()
    t[table].loc[row, "pos"] = -1
    want = f"column 'pos', row {row}: value -1 outside the allowed range >= {lo}"
    assert refused_write(good, t) == f"{good / f'{table}.parquet'}: {want}"
    path = raw_file(tmp_path / f"{table}.parquet", table, t[table])
    assert refused_read(path, table) == f"{path}: {want}"


def test_negative_entropy(good, tmp_path):
    t = tables()
    t["drafts"].loc[3, "draft_entropy"] = -0.5
    want = "column 'draft_entropy', row 3: value -0.5 outside the allowed range >= 0"
    assert refused_write(good, t) == f"{good / 'drafts.parquet'}: {want}"
    path = raw_file(tmp_path / "drafts.parquet", "drafts", t["drafts"])
    assert refused_read(path, "drafts") == f"{path}: {want}"


@pytest.mark.parametrize(
    ("table", "column", "allowed"), [("drafts", "beta", "[0, 1]"), ("positions", "draft_top1", "(0, 1]")]
)
def test_probability_above_one(good, tmp_path, table, column, allowed):
    t = tables()
    t[table].loc[2, column] = 1.5
    want = f"column {column!r}, row 2: value 1.5 outside the allowed range {allowed}"
    assert refused_write(good, t) == f"{good / f'{table}.parquet'}: {want}"
    path = raw_file(tmp_path / f"{table}.parquet", table, t[table])
    assert refused_read(path, table) == f"{path}: {want}"


def test_nan_and_null_in_a_float_column(good, tmp_path):
    t = tables()
    t["requests"].loc[1, "wall_time_s"] = np.nan
    want = "column 'wall_time_s', row 1: value nan is not a finite number (allowed range >= 0)"
    assert refused_write(good, t) == f"{good / 'requests.parquet'}: {want}"
    nan = pa.array(t["requests"]["wall_time_s"].to_numpy())  # stored as NaN, not as a null
    path = raw_file(tmp_path / "requests.parquet", "requests", t["requests"], wall_time_s=nan)
    assert refused_read(path, "requests") == f"{path}: {want}"
    # a real Arrow null (not NaN) is reported as a null
    path = raw_file(tmp_path / "r2.parquet", "requests", tables()["requests"], wall_time_s=pa.array([0.1, None]))
    assert refused_read(path, "requests").startswith(f"{path}: column 'wall_time_s', row 1: null")


@pytest.mark.parametrize("table", ["requests", "steps", "drafts"])
def test_empty_table_is_refused(good, tmp_path, table):
    t = tables()
    t[table] = empty_tables()[table]
    assert f"{good / f'{table}.parquet'}: table {table!r} has no rows" in refused_write(good, t)
    with pytest.raises(TraceError, match="has no rows"):
        write_table(t[table], tmp_path / "x.parquet", table)
    assert not (tmp_path / "x.parquet").exists()
    path = raw_file(tmp_path / f"{table}.parquet", table, empty_tables()[table])
    assert f"{path}: table {table!r} has no rows" in refused_read(path, table)


def test_all_empty_tables_are_refused(good):
    assert "requests.parquet: table 'requests' has no rows" in refused_write(good, empty_tables())


def test_positions_may_be_empty_without_teacher_forcing(tmp_path):
    """A profile of sampling runs only: no request was teacher-forced, so no positions."""
    t = tables()
    t["positions"] = empty_tables()["positions"]
    write_profile(t, tmp_path)
    assert read_profile(tmp_path).positions.empty
    # run.py builds an empty table from an empty record list: object columns, no rows
    write_table(pd.DataFrame([], columns=list(SCHEMAS["positions"].names)), tmp_path / "e.parquet", "positions")
    assert read_table(tmp_path / "e.parquet", "positions").dtypes["pos"] == np.int32


def test_float_in_an_integer_column(good, tmp_path):
    t = tables()
    t["steps"]["step"] = [0.0, 1.0, 0.0]
    assert refused_write(good, t) == f"{good / 'steps.parquet'}: column 'step': type double found, expected int32"
    path = raw_file(tmp_path / "steps.parquet", "steps", t["steps"])
    assert refused_read(path, "steps") == f"{path}: column 'step': type double found, expected int32"


def test_integer_widening_is_read_when_values_fit(tmp_path):
    """int64 stored for an int32 column reads (as int32); a value beyond int32 does not."""
    t = tables()
    path = raw_file(tmp_path / "steps.parquet", "steps", t["steps"])  # pandas int64 columns
    assert pq.read_schema(path).field("step").type == pa.int64()
    assert read_table(path, "steps")["step"].dtype == np.int32
    t["steps"].loc[1, "context_len"] = 2**40
    path = raw_file(tmp_path / "big.parquet", "steps", t["steps"])
    assert "column 'context_len', row 1: value 1099511627776 does not fit int32" in refused_read(path, "steps")


@pytest.mark.parametrize(("table", "row", "column", "value", "key"), [
    ("requests", 1, "request_id", 0, "request_id=0"),
    ("steps", 1, "step", 0, "request_id=0, step=0"),
    ("drafts", 1, "pos", 1, "request_id=0, step=0, pos=1"),
    ("positions", 2, "pos", 1, "request_id=0, pos=1"),
])  # fmt: skip
def test_duplicate_keys(good, tmp_path, table, row, column, value, key):
    t = tables()
    t[table].loc[row, column] = value
    first = 0 if table != "positions" else 1
    want = f"column {KEYS[table][-1]!r}, row {row}: duplicate key ({key}), first at row {first}"
    assert refused_write(good, t).startswith(f"{good / f'{table}.parquet'}: {want}")
    path = raw_file(tmp_path / f"{table}.parquet", table, t[table])
    assert refused_read(path, table).startswith(f"{path}: {want}")


# --------------------------------------------------------------------------- tables against each other
NOT_A_PREFIX = [False, True, False, False, True, True]  # step (0, 0) accepted one token: its first


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t["requests"].__setitem__("d_max", [1, 2]), "steps.parquet: column 'drafted', row 0: value 2"),
        (lambda t: t["drafts"].__setitem__("accepted", NOT_A_PREFIX), "column 'accepted', row 0: False at pos 1"),
        (lambda t: t.__setitem__("positions", t["positions"].iloc[:2]), "request 0 has 2 positions"),
        (lambda t: t["positions"].__setitem__("pos", [0, 1, 3]), "column 'pos', row 2: value 3 outside"),
        (lambda t: t["drafts"].__setitem__("step", [0, 0, 1, 2, 0, 0]), "drafts.parquet: column 'step', row 3"),
    ],
)  # fmt: skip
def test_tables_must_agree(good, tmp_path, edit, message):
    t = tables()
    edit(t)
    assert message in refused_write(good, t)
    for name in TABLES:  # one by one, as checkpoints are written: only the profile read sees it
        write_table(t[name], tmp_path / f"{name}.parquet", name)
    with pytest.raises(TraceError, match=message.replace("(", r"\(")):
        read_profile(tmp_path)


def test_other_bad_input_is_a_trace_error(tmp_path):
    t = tables()
    twice = pd.concat([t["steps"], t["steps"]["step"]], axis=1)  # two columns named 'step'
    with pytest.raises(TraceError, match="column 'step'"):
        write_table(twice, tmp_path / "s.parquet", "steps")
    with pytest.raises(TraceError, match="column 'emitted': missing"):
        write_table(t["steps"].drop(columns="emitted"), tmp_path / "s.parquet", "steps")
    (tmp_path / "junk.parquet").write_bytes(b"not parquet")
    with pytest.raises(TraceError, match="not a readable Parquet file"):
        read_table(tmp_path / "junk.parquet", "steps")
    assert not (tmp_path / "s.parquet").exists()


# --------------------------------------------------------------------------- every column, many values
def bad_values(table: str, column: str) -> list:
    """Values no column of this type and range may hold."""
    kind = SCHEMAS[table].field(column).type
    if pa.types.is_boolean(kind):
        return [None, 2, 0, "True", 1.0]
    if pa.types.is_string(kind):
        bad = [None, 5, 1.5, True]
        return bad + ([""] if column in NONEMPTY_TEXT else []) + (["beam"] if column == "mode" else [])
    lo, hi, lo_open = RANGES[table][column]
    out = [None, "x", np.nan, math.inf, -math.inf, lo if lo_open else lo - 1]
    if hi != math.inf:
        out.append(hi + 0.5)
    if pa.types.is_integer(kind):
        out += [1.5, 2**40 if kind == pa.int32() else 2**63, True]
    return out


MUTATIONS = [
    (table, column, value) for table in TABLES for column in SCHEMAS[table].names for value in bad_values(table, column)
]


def test_every_numeric_column_has_a_range():
    for table, schema in SCHEMAS.items():
        numeric = {f.name for f in schema if pa.types.is_integer(f.type) or pa.types.is_floating(f.type)}
        assert numeric == set(RANGES[table]), table
    assert set(MODES) == {"greedy", "sample"}


@pytest.mark.parametrize(("table", "column", "value"), MUTATIONS, ids=[f"{t}.{c}={v!r}" for t, c, v in MUTATIONS])
def test_single_bad_value_is_a_trace_error(good, tmp_path, table, column, value):
    t = tables()
    t[table] = set_value(t[table], column, 1, value)
    msg = refused_write(good, t)
    assert msg.startswith(f"{good / f'{table}.parquet'}: column {column!r}")
    if msg.split(": ")[2].startswith(("value", "null")):
        assert "row 1: " in msg
    try:  # the same table in a file written without checks, when Arrow can store it at all
        path = raw_file(tmp_path / f"{table}.parquet", table, t[table])
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return
    assert refused_read(path, table).startswith(f"{path}: column {column!r}")


FLOAT_COLUMNS = [(t, c) for t in TABLES for c, a in RANGES[t].items() if pa.types.is_floating(SCHEMAS[t].field(c).type)]


@st.composite
def out_of_range(draw):
    table, column = draw(st.sampled_from(FLOAT_COLUMNS))
    lo, hi, lo_open = RANGES[table][column]
    below = st.floats(max_value=lo, exclude_max=not lo_open, allow_nan=False)
    above = st.floats(min_value=hi + 1e-6, allow_nan=False) if hi != math.inf else st.nothing()
    value = draw(st.one_of(below, above, st.just(math.nan)))
    return table, column, draw(st.integers(0, len(tables()[table]) - 1)), value


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=out_of_range())
def test_random_out_of_range_floats(tmp_path, case):
    table, column, row, value = case
    t = tables()
    t[table].loc[row, column] = value
    with pytest.raises(TraceError, match=rf"{table}\.parquet: column '{column}', row {row}: value "):
        write_table(t[table], tmp_path / f"{table}.parquet", table)
    assert not (tmp_path / f"{table}.parquet").exists()


@pytest.mark.skipif(not COMMITTED.is_dir(), reason="the committed profile is not in this checkout")
def test_committed_profile_reads():
    prof = read_profile(COMMITTED)
    assert len(prof.requests) and len(prof.steps) and len(prof.drafts)
