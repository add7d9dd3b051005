"""Profile trace format: three Parquet tables per profile, numbers only (no prompt text).

``requests``  one row per profiled request (metadata: models, dataset, lengths, sampling, versions)
``steps``     one row per verification step: drafted, accepted, emitted
``drafts``    one row per drafted token: draft and target probabilities of it, min(1, p/q), beta, entropy
``positions`` teacher-forced: one row per generated position with draft/target argmax match, beta,
              draft top-1 probability and entropy (exact offline replay of greedy stopping rules)

A profile is a folder holding ``<table>.parquet`` for each table; ``format_version`` is stored in the
Parquet schema metadata and checked on load.

Reading and writing apply the same checks, so a profile that reads is one that could have been written:
every column present with a type its schema allows (``_type_ok``), no nulls, every number finite and in
its column's range (``RANGES``), no duplicate keys (``KEYS``), and, for a whole profile, the tables
agreeing with each other (``_check_consistency``). A failure is a TraceError naming the file, column,
row (0-based, as stored) and the allowed range; the checks only reject, they never alter a value.
"""

from __future__ import annotations

import json
import math
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from adsl.errors import AdslError
from adsl.io import atomic_path

FORMAT_VERSION = "1"

SCHEMAS: dict[str, pa.Schema] = {
    "requests": pa.schema(
        [
            ("request_id", pa.int32()),
            ("dataset", pa.string()),
            ("category", pa.string()),  # the paper's category this prompt stands for
            ("source_category", pa.string()),  # the prompt set's own category
            ("question_id", pa.string()),
            ("mode", pa.string()),  # greedy | sample
            ("temperature", pa.float64()),
            ("seed", pa.int64()),
            ("d_max", pa.int32()),
            ("draft_model", pa.string()),
            ("target_model", pa.string()),
            ("prompt_len", pa.int32()),
            ("generated_len", pa.int32()),
            ("wall_time_s", pa.float64()),
            ("versions", pa.string()),  # JSON: library versions
        ]
    ),
    "steps": pa.schema(
        [
            ("request_id", pa.int32()),
            ("step", pa.int32()),
            ("context_len", pa.int32()),
            ("drafted", pa.int32()),
            ("accepted", pa.int32()),
            ("emitted", pa.int32()),
        ]
    ),
    "drafts": pa.schema(
        [
            ("request_id", pa.int32()),
            ("step", pa.int32()),
            ("pos", pa.int32()),  # 1-based position inside the draft
            ("q_token", pa.float64()),  # draft probability of the token it sampled
            ("p_token", pa.float64()),  # target probability of that token
            ("accept_prob", pa.float64()),  # min(1, p / q)
            ("beta", pa.float64()),  # sum_x min(p(x), q(x))
            ("draft_entropy", pa.float64()),  # nats
            ("accepted", pa.bool_()),
        ]
    ),
    "positions": pa.schema(
        [
            ("request_id", pa.int32()),
            ("pos", pa.int32()),  # 0-based index into the generated tokens
            ("match", pa.bool_()),  # draft argmax == target argmax
            ("beta", pa.float64()),
            ("draft_top1", pa.float64()),
            ("draft_entropy", pa.float64()),
        ]
    ),
}
TABLES = tuple(SCHEMAS)

# a probability may exceed 1 by float rounding (beta sums a vocabulary of min(p, q)); never by more
PROB_SLACK = 1e-9


class Allowed(NamedTuple):
    """The allowed range of a numeric column: lo <= v (lo < v when lo_open) and v <= hi, v finite."""

    lo: float = -math.inf
    hi: float = math.inf
    lo_open: bool = False

    def outside(self, v: np.ndarray) -> np.ndarray:
        low = v <= self.lo if self.lo_open else v < self.lo
        high = v > self.hi + (PROB_SLACK if self.hi == 1 else 0)
        return low | high | ~np.isfinite(v)

    def __str__(self) -> str:
        if self.hi == math.inf:
            return f"{'>' if self.lo_open else '>='} {self.lo:g}"
        return f"{'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}]"


AT_LEAST_0, AT_LEAST_1 = Allowed(0), Allowed(1)
PROBABILITY = Allowed(0, 1)
# the probability of a token that was drafted, or of the draft's top token: never 0 (q = 0 would make
# accept_prob = min(1, p/q) undefined, and the fits take log(draft_top1))
DRAWN_PROBABILITY = Allowed(0, 1, lo_open=True)

# every numeric column's range, in one place (integer columns must also fit their Arrow type)
RANGES: dict[str, dict[str, Allowed]] = {
    "requests": {
        "request_id": AT_LEAST_0,
        "temperature": Allowed(0, lo_open=True),  # greedy requests record 1
        "seed": AT_LEAST_0,
        "d_max": AT_LEAST_1,
        "prompt_len": AT_LEAST_1,
        "generated_len": AT_LEAST_1,  # every request runs at least one step, which emits a token
        "wall_time_s": AT_LEAST_0,
    },
    "steps": {
        "request_id": AT_LEAST_0,
        "step": AT_LEAST_0,
        "context_len": AT_LEAST_1,
        "drafted": AT_LEAST_0,
        "accepted": AT_LEAST_0,
        "emitted": AT_LEAST_1,
    },
    "drafts": {
        "request_id": AT_LEAST_0,
        "step": AT_LEAST_0,
        "pos": AT_LEAST_1,
        "q_token": DRAWN_PROBABILITY,
        "p_token": PROBABILITY,
        "accept_prob": PROBABILITY,
        "beta": PROBABILITY,
        "draft_entropy": AT_LEAST_0,
    },
    "positions": {
        "request_id": AT_LEAST_0,
        "pos": AT_LEAST_0,
        "beta": PROBABILITY,
        "draft_top1": DRAWN_PROBABILITY,
        "draft_entropy": AT_LEAST_0,
    },
}
# text columns that select or label requests: an empty one would form a category of its own
NONEMPTY_TEXT = ("dataset", "category", "source_category", "question_id", "draft_model", "target_model")
MODES = ("greedy", "sample")
# one row per key: a repeated key would count a request, step or token twice
KEYS = {
    "requests": ("request_id",),
    "steps": ("request_id", "step"),
    "drafts": ("request_id", "step", "pos"),
    "positions": ("request_id", "pos"),
}
# positions may be empty: only teacher-forced runs record them (a sampling run has none)
NONEMPTY_TABLES = ("requests", "steps", "drafts")


class TraceError(AdslError, ValueError):
    """A profile file violates the trace schema or a value range; names file, column and row."""


@dataclass(frozen=True)
class Profile:
    requests: pd.DataFrame
    steps: pd.DataFrame
    drafts: pd.DataFrame
    positions: pd.DataFrame

    def table(self, name: str) -> pd.DataFrame:
        return getattr(self, name)


def empty_tables() -> dict[str, pd.DataFrame]:
    """Every trace table with its schema's columns and no rows."""
    return {name: schema.empty_table().to_pandas() for name, schema in SCHEMAS.items()}


def _fail(file, column, row, message):
    where = f"{file}: column {column!r}" + (f", row {row}" if row is not None else "")
    raise TraceError(f"{where}: {message}")


@contextmanager
def _as_trace_error(file):
    """Any pandas/pyarrow error the checks did not foresee still reaches the user as a TraceError."""
    try:
        yield
    except TraceError:
        raise
    except (pa.ArrowException, ValueError, TypeError, KeyError, IndexError, OverflowError) as exc:
        raise TraceError(f"{file}: cannot be checked as a profile table ({type(exc).__name__}: {exc})") from exc


def _type_ok(found: pa.DataType, expected: pa.DataType) -> bool:
    """Lossless widenings are accepted, bools never: any integer type in an integer column (its values
    must fit, checked before the cast), a float or an integer (exact up to 2^53, checked by the cast) in
    a float column, large_string in a string column (pandas' own string type). A bool column must be
    Arrow bool: integers or strings there are how 0/2 flags and 'False' strings got in."""
    if found == expected:
        return True
    if pa.types.is_integer(expected):
        return pa.types.is_integer(found)
    if pa.types.is_floating(expected):
        return pa.types.is_floating(found) or pa.types.is_integer(found)
    if pa.types.is_string(expected):
        return pa.types.is_large_string(found)
    return False


def _conform(columns: dict, name: str, file: str) -> pa.Table:
    """``columns`` (name -> Arrow array) as a table of exactly ``SCHEMAS[name]``: every column present,
    of an allowed type, without nulls, integers within their type."""
    schema = SCHEMAS[name]
    out = []
    for field in schema:
        if field.name not in columns:
            _fail(file, field.name, None, f"missing (table {name!r} needs {schema.names})")
        arr = columns[field.name]
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        if arr.null_count:
            row = int(np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))[0])
            _fail(file, field.name, row, f"null (missing value); every row needs a {field.type} value")
        if len(arr) and not _type_ok(arr.type, field.type):
            row = None
            if pa.types.is_floating(arr.type):  # e.g. a None that pandas turned into NaN: name its row
                values = arr.to_numpy(zero_copy_only=False)
                row = _first(~np.isfinite(values) | (values != np.round(values)))
            _fail(file, field.name, row, f"type {arr.type} found, expected {field.type}")
        if len(arr) and pa.types.is_integer(field.type):
            info = np.iinfo(field.type.to_pandas_dtype())
            values = arr.to_numpy(zero_copy_only=False)
            bad = np.flatnonzero((values < info.min) | (values > info.max))
            if bad.size:
                v = values[bad[0]].item()
                _fail(
                    file, field.name, int(bad[0]), f"value {v!r} does not fit {field.type} ({info.min} to {info.max})"
                )
        try:
            out.append(arr.cast(field.type, safe=True))
        except pa.ArrowException as exc:
            _fail(file, field.name, None, f"type {arr.type} cannot be read as {field.type} ({exc})")
    return pa.Table.from_arrays(out, schema=schema)


def _frame_columns(df: pd.DataFrame, name: str, file: str) -> dict:
    """The columns of ``df`` that the schema names, as Arrow arrays with the types pandas' values have."""
    columns = {}
    for field in SCHEMAS[name]:
        if field.name not in df.columns:
            continue  # reported by _conform
        col = df[field.name]
        if isinstance(col, pd.DataFrame):
            _fail(file, field.name, None, f"appears {col.shape[1]} times; a table holds each column once")
        try:
            if isinstance(col.dtype, np.dtype) and col.dtype.kind == "f":
                columns[field.name] = pa.array(col.to_numpy())  # NaN stays NaN: reported as not finite
            else:
                columns[field.name] = pa.Array.from_pandas(col)  # None and NA become nulls: reported as such
        except (pa.ArrowException, TypeError, ValueError) as exc:
            # the first row whose Python type differs from the first row's, when that is the cause
            kinds = col.map(lambda v: type(v).__name__)
            row = _first((kinds != kinds.iloc[0]).to_numpy()) if len(kinds) else None
            _fail(file, field.name, row, f"values of mixed types cannot be stored as {field.type} ({exc})")
    return columns


def _check_values(table: pa.Table, name: str, file: str) -> None:
    """Raise TraceError at the first value outside its range, bad text, repeated key or bad step."""
    if table.num_rows == 0:
        if name in NONEMPTY_TABLES:
            raise TraceError(f"{file}: table {name!r} has no rows; a profile needs at least one")
        return
    for column, allowed in RANGES[name].items():
        values = table.column(column).to_numpy()
        bad = np.flatnonzero(allowed.outside(values))
        if bad.size:
            v = values[bad[0]].item()
            if math.isfinite(v):
                _fail(file, column, int(bad[0]), f"value {v!r} outside the allowed range {allowed}")
            _fail(file, column, int(bad[0]), f"value {v!r} is not a finite number (allowed range {allowed})")
    df = table.to_pandas()
    if name == "requests":
        bad = np.flatnonzero(~df["mode"].isin(MODES).to_numpy())
        if bad.size:
            _fail(file, "mode", int(bad[0]), f"{df['mode'].iloc[bad[0]]!r} is not 'greedy' or 'sample'")
        for column in NONEMPTY_TEXT:
            bad = np.flatnonzero((df[column].str.len() == 0).to_numpy())
            if bad.size:
                _fail(file, column, int(bad[0]), "empty; the allowed values are non-empty strings")
    keys = list(KEYS[name])
    dup = np.flatnonzero(df.duplicated(keys).to_numpy())
    if dup.size:
        r = int(dup[0])
        key = ", ".join(f"{k}={df[k].iloc[r]}" for k in keys)
        first = int(np.flatnonzero((df[keys] == df[keys].iloc[r]).all(axis=1).to_numpy())[0])
        _fail(file, keys[-1], r, f"duplicate key ({key}), first at row {first}; each key must occur once")
    if name == "steps":
        d, a, e = (df[c].to_numpy() for c in ("drafted", "accepted", "emitted"))
        bad = np.flatnonzero((a > d) | (e != a + 1))
        if bad.size:
            r = int(bad[0])
            _fail(
                file,
                "accepted",
                r,
                f"inconsistent step: drafted {d[r]}, accepted {a[r]}, emitted {e[r]} "
                "(allowed: 0 <= accepted <= drafted, emitted = accepted + 1)",
            )


def _checked(df: pd.DataFrame, name: str, file: str) -> pa.Table:
    """``df`` as an Arrow table of its schema after every per-table check."""
    with _as_trace_error(file):
        table = _conform(_frame_columns(df, name, file), name, file)
        _check_values(table, name, file)
    return table


def validate_table(df: pd.DataFrame, name: str, file: str) -> None:
    """Raise TraceError at the first missing column, disallowed type, null, value outside its range,
    duplicate key or inconsistent step of table ``name`` (``file`` names it in the message)."""
    _checked(df, name, file)


def _write(table: pa.Table, path: str | Path, name: str) -> None:
    meta = {"adsl_trace_format": FORMAT_VERSION, "adsl_table": name}
    with atomic_path(path) as tmp:
        pq.write_table(table.replace_schema_metadata(meta), tmp, compression="zstd")


def write_table(df: pd.DataFrame, path: str | Path, name: str) -> None:
    """Check one table (``validate_table``) and write it as Parquet, atomically, with its schema and the
    format version in the metadata; a table that fails leaves ``path`` as it was."""
    _write(_checked(df, name, str(path)), path, name)


def write_profile(tables: dict[str, pd.DataFrame], folder: str | Path) -> None:
    """Check every table of a profile and the tables against each other, then write them to ``folder``
    as ``<table>.parquet``; nothing is written unless everything passes."""
    folder = Path(folder)
    checked = {name: _checked(tables[name], name, str(folder / f"{name}.parquet")) for name in TABLES}
    with _as_trace_error(folder):
        _check_consistency({name: t.to_pandas() for name, t in checked.items()}, folder)
    for name in TABLES:
        _write(checked[name], folder / f"{name}.parquet", name)


def read_table(path: str | Path, name: str) -> pd.DataFrame:
    """Profile table ``name`` from a Parquet file, checked like ``validate_table`` and against its format
    version. Columns the schema does not name are ignored."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"{path}: profile table {name!r} not found")
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise TraceError(f"{path}: not a readable Parquet file ({exc})") from exc
    meta = table.schema.metadata or {}
    version = meta.get(b"adsl_trace_format", b"?").decode()
    if version != FORMAT_VERSION:
        raise TraceError(f"{path}: trace format version {version!r}, this adsl reads {FORMAT_VERSION!r}")
    with _as_trace_error(path):
        checked = _conform({c: table.column(c) for c in table.column_names}, name, str(path))
        _check_values(checked, name, str(path))
        # from the schema alone: pandas metadata of a file may name columns (a stored index) dropped here
        return checked.to_pandas()


def profile_files(folder: str | Path) -> list[str]:
    """The files of a profile folder, one per table."""
    return [str(Path(folder) / f"{name}.parquet") for name in TABLES]


def read_profile(folder: str | Path | list) -> Profile:
    """The four tables of a profile folder (or the list of its files), each checked, and checked against
    each other."""
    folder = Path(folder[0]).parent if isinstance(folder, list) else Path(folder)
    tables = {name: read_table(folder / f"{name}.parquet", name) for name in TABLES}
    with _as_trace_error(folder):
        _check_consistency(tables, folder)
    return Profile(**tables)


def _first(mask) -> int | None:
    idx = np.flatnonzero(np.asarray(mask))
    return int(idx[0]) if idx.size else None


def _check_consistency(tables: dict[str, pd.DataFrame], folder: Path) -> None:
    """The tables agree: every row's request is in requests.parquet; a step drafts at most its request's
    d_max tokens and its rows in drafts.parquet are exactly its drafted tokens 1..drafted, the accepted
    ones first; a request's steps emit its generated_len tokens; a teacher-forced request has every
    position 0..generated_len-1 (a request with no positions was not teacher-forced)."""
    req, steps, drafts, positions = (tables[name] for name in TABLES)
    file = {name: folder / f"{name}.parquet" for name in TABLES}
    for name in ("steps", "drafts", "positions"):
        row = _first(~tables[name]["request_id"].isin(req["request_id"]))
        if row is not None:
            _fail(file[name], "request_id", row, "request not in requests.parquet")
    per_req = req.set_index("request_id")
    d_max = steps["request_id"].map(per_req["d_max"]).to_numpy()
    row = _first(steps["drafted"].to_numpy() > d_max)
    if row is not None:
        rid, d = steps["request_id"].iloc[row], steps["drafted"].iloc[row]
        _fail(
            file["steps"],
            "drafted",
            row,
            f"value {d} outside the allowed range [0, {d_max[row]}] (d_max of request {rid})",
        )
    key = ["request_id", "step"]
    joined = drafts[[*key, "pos", "accepted"]].merge(
        steps[[*key, "drafted", "accepted"]], on=key, how="left", suffixes=("", "_step"), indicator=True
    )
    row = _first((joined["_merge"] != "both").to_numpy())
    if row is not None:
        _fail(file["drafts"], "step", row, "step not in steps.parquet")
    pos, drafted, flag, acc = (joined[c].to_numpy() for c in ("pos", "drafted", "accepted", "accepted_step"))
    row = _first(pos > drafted)
    if row is not None:
        _fail(
            file["drafts"],
            "pos",
            row,
            f"value {pos[row]} outside the allowed range [1, {drafted[row]}] (its step's drafted)",
        )
    row = _first(flag != (pos <= acc))
    if row is not None:
        _fail(
            file["drafts"],
            "accepted",
            row,
            f"{bool(flag[row])} at pos {pos[row]}, but its step accepted its first {acc[row]} drafted tokens",
        )
    per_step = drafts.groupby(key).agg(n=("pos", "size"), acc=("accepted", "sum"))
    joined = steps.set_index(key).join(per_step, how="left").fillna({"n": 0, "acc": 0})
    bad = np.flatnonzero(((joined["n"] != joined["drafted"]) | (joined["acc"] != joined["accepted"])).to_numpy())
    if bad.size:
        _fail(file["steps"], "drafted", int(bad[0]), "does not match the drafted tokens in drafts.parquet")
    emitted = req["request_id"].map(steps.groupby("request_id")["emitted"].sum()).fillna(0).to_numpy()
    row = _first(emitted != req["generated_len"].to_numpy())
    if row is not None:
        rid, g = req["request_id"].iloc[row], req["generated_len"].iloc[row]
        _fail(
            file["requests"], "generated_len", row, f"value {g}, but the steps of request {rid} emit {emitted[row]:g}"
        )
    if len(positions):
        g = positions["request_id"].map(per_req["generated_len"]).to_numpy()
        row = _first(positions["pos"].to_numpy() >= g)
        if row is not None:
            p, rid = positions["pos"].iloc[row], positions["request_id"].iloc[row]
            _fail(
                file["positions"], "pos", row, f"value {p} outside the allowed range [0, {g[row] - 1}] (request {rid})"
            )
        have = req["request_id"].map(positions.groupby("request_id").size())
        row = _first((have.notna() & (have != req["generated_len"])).to_numpy())
        if row is not None:
            rid, n = req["request_id"].iloc[row], req["generated_len"].iloc[row]
            _fail(
                file["positions"],
                "pos",
                None,
                f"request {rid} has {int(have.iloc[row])} positions; a teacher-forced one has all {n} (0 to {n - 1})",
            )


def versions_json(**extra) -> str:
    """JSON of the installed adsl, torch, transformers and numpy versions, plus ``extra`` entries."""
    import importlib.metadata as md

    out = {}
    for pkg in ("adsl", "torch", "transformers", "numpy"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            continue
    out.update(extra)
    return json.dumps(out, sort_keys=True)
