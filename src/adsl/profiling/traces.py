"""Profile trace format: three Parquet tables per profile, numbers only (no prompt text).

``requests``  one row per profiled request (metadata: models, dataset, lengths, sampling, versions)
``steps``     one row per verification step: drafted, accepted, emitted
``drafts``    one row per drafted token: draft and target probabilities of it, min(1, p/q), beta, entropy
``positions`` teacher-forced: one row per generated position with draft/target argmax match, beta,
              draft top-1 probability and entropy (exact offline replay of greedy stopping rules)

A profile is a folder holding ``<table>.parquet`` for each table; ``format_version`` is stored in the
Parquet schema metadata and checked on load.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

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
PROBABILITY_COLUMNS = {
    "drafts": ("q_token", "p_token", "accept_prob", "beta"),
    "positions": ("beta", "draft_top1"),
}
TABLES = tuple(SCHEMAS)


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


def write_table(df: pd.DataFrame, path: str | Path, name: str) -> None:
    """Write one table as Parquet, atomically, with its schema and the format version in the metadata."""
    schema = SCHEMAS[name].with_metadata({"adsl_trace_format": FORMAT_VERSION, "adsl_table": name})
    table = pa.Table.from_pandas(df[list(schema.names)], schema=schema, preserve_index=False)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")


def write_profile(tables: dict[str, pd.DataFrame], folder: str | Path) -> None:
    """Validate every table of a profile and write it to ``folder`` as ``<table>.parquet``."""
    folder = Path(folder)
    for name in TABLES:
        validate_table(tables[name], name, str(folder / f"{name}.parquet"))
        write_table(tables[name], folder / f"{name}.parquet", name)


def _fail(file, column, row, message):
    where = f"{file}: column {column!r}" + (f", row {row}" if row is not None else "")
    raise TraceError(f"{where}: {message}")


def validate_table(df: pd.DataFrame, name: str, file: str) -> None:
    """Raise TraceError at the first missing column, non-finite number, probability outside [0, 1] or bad row."""
    schema = SCHEMAS[name]
    missing = [c for c in schema.names if c not in df.columns]
    if missing:
        _fail(file, missing[0], None, f"missing (table {name} needs {schema.names})")
    for field in schema:
        col = df[field.name]
        if pa.types.is_floating(field.type) or pa.types.is_integer(field.type):
            values = pd.to_numeric(col, errors="coerce").to_numpy(dtype=float)
            bad = np.flatnonzero(~np.isfinite(values))
            if bad.size:
                _fail(file, field.name, int(bad[0]), f"value {col.iloc[bad[0]]!r} is not a finite number")
    for column in PROBABILITY_COLUMNS.get(name, ()):
        values = df[column].to_numpy(dtype=float)
        bad = np.flatnonzero((values < 0) | (values > 1 + 1e-9))
        if bad.size:
            _fail(file, column, int(bad[0]), f"probability {values[bad[0]]!r} outside [0, 1]")
    if name == "steps":
        d, a, e = (df[c].to_numpy() for c in ("drafted", "accepted", "emitted"))
        bad = np.flatnonzero((a < 0) | (a > d) | (e != a + 1))
        if bad.size:
            r = int(bad[0])
            _fail(file, "accepted", r, f"inconsistent step: drafted {d[r]}, accepted {a[r]}, emitted {e[r]}")
    if name == "requests":
        bad = np.flatnonzero(~df["mode"].isin(["greedy", "sample"]).to_numpy())
        if bad.size:
            _fail(file, "mode", int(bad[0]), f"{df['mode'].iloc[bad[0]]!r} is not 'greedy' or 'sample'")


def read_table(path: str | Path, name: str) -> pd.DataFrame:
    """Profile table ``name`` from a Parquet file, checked against its schema and format version."""
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
    df = table.to_pandas()
    validate_table(df, name, str(path))
    return df


def profile_files(folder: str | Path) -> list[str]:
    """The files of a profile folder, one per table."""
    return [str(Path(folder) / f"{name}.parquet") for name in TABLES]


def read_profile(folder: str | Path | list) -> Profile:
    """The four tables of a profile folder (or the list of its files), each checked, and checked against
    each other."""
    folder = Path(folder[0]).parent if isinstance(folder, list) else Path(folder)
    tables = {name: read_table(folder / f"{name}.parquet", name) for name in TABLES}
    _check_consistency(tables, folder)
    return Profile(**tables)


def _check_consistency(tables: dict[str, pd.DataFrame], folder: Path) -> None:
    ids = set(tables["requests"]["request_id"])
    for name in ("steps", "drafts", "positions"):
        unknown = ~tables[name]["request_id"].isin(ids)
        if unknown.any():
            row = int(np.flatnonzero(unknown.to_numpy())[0])
            _fail(folder / f"{name}.parquet", "request_id", row, "request not in requests.parquet")
    steps, drafts = tables["steps"], tables["drafts"]
    per_step = drafts.groupby(["request_id", "step"]).agg(n=("pos", "size"), acc=("accepted", "sum"))
    joined = steps.set_index(["request_id", "step"]).join(per_step, how="left").fillna({"n": 0, "acc": 0})
    bad = np.flatnonzero(((joined["n"] != joined["drafted"]) | (joined["acc"] != joined["accepted"])).to_numpy())
    if bad.size:
        _fail(folder / "steps.parquet", "drafted", int(bad[0]), "does not match the drafted tokens in drafts.parquet")
    gen = steps.groupby("request_id")["emitted"].sum()
    req = tables["requests"].set_index("request_id")["generated_len"]
    mism = [i for i in gen.index if gen[i] != req[i]]
    if mism:
        _fail(folder / "requests.parquet", "generated_len", None, f"request {mism[0]}: steps emit {gen[mism[0]]}")


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
