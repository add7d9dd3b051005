"""Profile a draft/target pair over a prompt plan, one checkpoint per request, resumable.

A plan is a list of requests (mode, sampling settings, prompt). Each finished request is written to the
folder ``<checkpoints>/<request_id>/``: its trace tables as ``<table>.parquet`` (``traces.write_table``),
then ``manifest.json``, written last and atomically, recording the plan row they were made for (pair,
prompt, settings, a hash over those) and each table's sha256. A rerun skips requests whose checkpoint
validates, so an interrupted run resumes where it stopped and gives the same tables as an uninterrupted
one (seeds are per request). Checkpoints are data only: nothing in the folder is ever executed, and a
file that does not validate is reported (``CheckpointWarning``) and its request profiled again.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import warnings
from dataclasses import asdict
from pathlib import Path

import pandas as pd

from adsl.io import atomic_path
from adsl.profiling import datasets
from adsl.profiling.traces import (
    TABLES,
    TraceError,
    empty_tables,
    read_profile,
    versions_json,
    write_profile,
    write_table,
)
from adsl.settings import ProfilingRun

CHECKPOINT_FORMAT = "adsl-checkpoint/1"
MANIFEST = "manifest.json"


class CheckpointWarning(UserWarning):
    """A checkpoint file that is not used: unreadable, incomplete, inconsistent, or an old pickle."""


class _Invalid(Exception):
    """Why a checkpoint folder cannot be used; reported as a CheckpointWarning, never raised to the user."""


def default_checkpoints(name: str) -> Path:
    """Per-request checkpoints of profile ``name``, outside the repository so they survive a fresh
    checkout: $ADSL_CACHE/checkpoints/<name> (default ~/.cache/adsl)."""
    from adsl.profiling.offline_models import cache_root

    return cache_root() / "checkpoints" / name


def build_plan(prompts: pd.DataFrame, runs: list[ProfilingRun]) -> pd.DataFrame:
    """One row per request of the profiling plan: each run's prompts, numbered in order."""
    parts = []
    for i, run in enumerate(runs):
        sel = datasets.select(prompts, run.prompts, run.skip).assign(
            run=i, **{k: v for k, v in asdict(run).items() if k not in ("prompts", "skip")}
        )
        parts.append(sel)
    plan = pd.concat(parts, ignore_index=True)
    plan.insert(0, "request_id", range(len(plan)))
    return plan


def encode(tokenizer, turns: list[str]) -> list[int]:
    """First user turn, through the chat template when the tokenizer has one."""
    if getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": turns[0]}], add_generation_prompt=True, tokenize=True
        )
        if not isinstance(ids, list):
            ids = ids["input_ids"]
        return [int(i) for i in ids]
    return [int(i) for i in tokenizer(turns[0])["input_ids"]]


def profile_request(row, draft, target, tokenizer, seed: int, names: tuple[str, str]) -> dict[str, pd.DataFrame]:
    """One plan row profiled: speculative generation (and teacher-forced records if asked) as trace tables."""
    import torch

    from adsl.profiling.loop import speculative_generate, teacher_forced

    prompt = encode(tokenizer, list(row.turns))
    eos = tuple(
        sorted({i for i in (tokenizer.eos_token_id, getattr(tokenizer, "pad_token_id", None)) if i is not None})
    )
    gen_seed = _gen_seed(seed, row.request_id)
    t0 = time.perf_counter()
    g = speculative_generate(
        draft,
        target,
        prompt,
        d=int(row.d_max),
        max_new_tokens=int(row.max_new_tokens),
        min_new_tokens=int(row.min_new_tokens),
        greedy=row.mode == "greedy",
        temperature=float(row.temperature),
        eos_ids=eos,
        generator=torch.Generator().manual_seed(gen_seed),
    )
    rid = int(row.request_id)
    out = empty_tables()
    out["steps"] = pd.DataFrame(
        [dict(request_id=rid, step=i, **asdict(s)) for i, s in enumerate(g.steps)], columns=out["steps"].columns
    )
    out["drafts"] = pd.DataFrame([dict(request_id=rid, **asdict(r)) for r in g.drafts], columns=out["drafts"].columns)
    if row.teacher_forced:
        rec = teacher_forced(draft, target, prompt, g.tokens, min_new_tokens=int(row.min_new_tokens), eos_ids=eos)
        out["positions"] = pd.DataFrame(
            dict(request_id=rid, pos=range(len(g.tokens)), **asdict(rec)), columns=out["positions"].columns
        )
    out["requests"] = pd.DataFrame(
        [
            dict(
                request_id=rid,
                dataset=row.dataset,
                category=row.paper_category or row.category,
                source_category=row.category,
                question_id=str(row.question_id),
                mode=row.mode,
                temperature=float(row.temperature),
                seed=gen_seed,
                d_max=int(row.d_max),
                draft_model=names[0],
                target_model=names[1],
                prompt_len=len(prompt),
                generated_len=len(g.tokens),
                wall_time_s=time.perf_counter() - t0,
                versions=versions_json(),
            )
        ]
    )
    return out


def combine(parts: list[dict[str, pd.DataFrame]]) -> dict[str, pd.DataFrame]:
    """Per-request tables concatenated into one profile's tables, sorted by request, step and position."""
    tables = {}
    for name in TABLES:
        frames = [p[name] for p in parts if len(p[name])]
        df = pd.concat(frames, ignore_index=True) if frames else empty_tables()[name]
        tables[name] = df.sort_values([c for c in ("request_id", "step", "pos") if c in df.columns], kind="stable")
    return {k: v.reset_index(drop=True) for k, v in tables.items()}


def run_profile(
    plan: pd.DataFrame,
    draft_source: str,
    target_source: str,
    out_dir: str | Path,
    checkpoints: str | Path,
    *,
    seed: int = 0,
    device: str = "cpu",
    dtype: str = "float32",
    threads: int | None = None,
    progress: bool = True,
    models=None,
    seed_from: str | Path | None = None,
) -> dict[str, pd.DataFrame]:
    """Profile every request of ``plan``; ``models`` = (draft, target, tokenizer) skips loading (tests).
    ``seed_from``: a partial profile (see ``snapshot``) whose finished requests need not be rerun."""
    import torch

    from adsl.profiling.loop import CausalLM

    if threads:
        torch.set_num_threads(threads)
    ckpt = Path(checkpoints)
    ckpt.mkdir(parents=True, exist_ok=True)
    _report_pickles(ckpt)
    pair = (draft_source, target_source)
    # every checkpoint is checked against the plan before any model loads: an edited plan stops at once
    parts = {int(r.request_id): load_checkpoint(ckpt, r, *pair, seed=seed) for r in plan.itertuples()}
    missing = [rid for rid, part in parts.items() if part is None]
    if missing and seed_from is not None and Path(seed_from).is_dir():
        seeded = _seed(plan[plan.request_id.isin(missing)], seed_from, ckpt, pair, seed)
        parts.update({int(r.request_id): load_checkpoint(ckpt, r, *pair, seed=seed) for r in seeded})
    todo = [r for r in plan.itertuples() if parts[int(r.request_id)] is None]
    if todo:
        if models is None:
            from adsl.profiling.sources import check_same_tokenizer, load_model

            dm, dtok = load_model(draft_source, device, dtype)
            tm, ttok = load_model(target_source, device, dtype)
            check_same_tokenizer(dtok, ttok, draft_source, target_source)
            models = (CausalLM(dm), CausalLM(tm), ttok)
        draft, target, tok = models
        bar = _progress(len(plan), len(plan) - len(todo), progress)
        for row in todo:
            rid = int(row.request_id)
            part = profile_request(row, draft, target, tok, seed, pair)
            write_checkpoint(ckpt / str(rid), rid, part, identity(row, *pair, seed=seed))
            # read back like any other checkpoint, so a resumed run assembles exactly what a fresh one does
            parts[rid] = load_checkpoint(ckpt, row, *pair, seed=seed)
            if parts[rid] is None:
                raise TraceError(f"{ckpt / str(rid)}: the checkpoint just written does not read back (see warning)")
            bar.update(1)
        bar.close()
    tables = combine([parts[int(r.request_id)] for r in plan.itertuples()])
    write_profile(tables, out_dir)
    return tables


def _gen_seed(seed: int, request_id: int) -> int:
    """The generator seed of one request: fixed by the run's seed and the request id alone."""
    return int(seed) * 1_000_003 + int(request_id)


def _sha256_json(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def identity(row, draft_source: str, target_source: str, *, seed: int = 0) -> dict:
    """What a checkpoint of plan row ``row`` is made for: the pair, the prompt (dataset, question id, sha256
    of its turns) and the settings that shape its tables. Key order is the order mismatches are reported in."""
    turns = json.dumps([str(t) for t in row.turns], ensure_ascii=False)
    return {
        "dataset": str(row.dataset),
        "question_id": str(row.question_id),
        "prompt_sha256": hashlib.sha256(turns.encode()).hexdigest(),
        "mode": str(row.mode),
        "d_max": int(row.d_max),
        "temperature": float(row.temperature),
        "max_new_tokens": int(row.max_new_tokens),
        "min_new_tokens": int(row.min_new_tokens),
        "teacher_forced": bool(row.teacher_forced),
        "seed": int(seed),
        "draft": str(draft_source),
        "target": str(target_source),
    }


def write_checkpoint(folder: Path, request_id: int, tables: dict[str, pd.DataFrame], made_for: dict) -> None:
    """One request's checkpoint: its tables as Parquet, then ``manifest.json`` (last, atomically) with the
    plan row ``made_for`` (see ``identity``), its hash and each table's sha256. Only the manifest makes the
    folder count, so a run killed while writing leaves a folder that is profiled again."""
    folder = Path(folder)
    (folder / MANIFEST).unlink(missing_ok=True)  # a stale manifest must not vouch for the tables below
    digests = {}
    for name in TABLES:
        path = folder / f"{name}.parquet"
        write_table(tables[name], path, name)  # checks the table before writing
        digests[name] = _sha256_file(path)
    manifest = {
        "format": CHECKPOINT_FORMAT,
        "request_id": int(request_id),
        "plan_row": made_for,
        "settings_sha256": _sha256_json(made_for),
        "tables": digests,
    }
    with atomic_path(folder / MANIFEST) as tmp:
        tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def _record_mismatch(tables: dict[str, pd.DataFrame], made_for: dict, request_id: int) -> str | None:
    """The first field on which a request's tables contradict the plan row they claim (``identity``), else None."""
    rec = tables["requests"].iloc[0]
    checks = {
        "dataset": (rec["dataset"], made_for["dataset"]),
        "question_id": (str(rec["question_id"]), made_for["question_id"]),
        "mode": (rec["mode"], made_for["mode"]),
        "d_max": (int(rec["d_max"]), made_for["d_max"]),
        "temperature": (float(rec["temperature"]), float(made_for["temperature"])),
        "draft_model": (rec["draft_model"], made_for["draft"]),
        "target_model": (rec["target_model"], made_for["target"]),
        "seed": (int(rec["seed"]), _gen_seed(made_for["seed"], request_id)),
        # teacher-forced requests have one position record per generated token, the others none
        "positions": (len(tables["positions"]), int(rec["generated_len"]) if made_for["teacher_forced"] else 0),
    }
    return next((name for name, (have, want) in checks.items() if have != want), None)


def _read_checkpoint(folder: Path, request_id: int) -> tuple[dict[str, pd.DataFrame], dict] | None:
    """(tables, plan row) of a checkpoint folder, None when there is none; _Invalid saying why when the
    folder does not hold a complete, self-consistent checkpoint of ``request_id``. Reads JSON and Parquet
    only."""
    if not folder.is_dir():
        return None
    path = folder / MANIFEST
    if not path.is_file():
        raise _Invalid(f"no {MANIFEST} (the run stopped while writing it, or the folder was not made by adsl)")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        fmt, rid, made_for = manifest["format"], manifest["request_id"], manifest["plan_row"]
        digest, digests = manifest["settings_sha256"], manifest["tables"]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise _Invalid(f"{path}: not a checkpoint manifest ({type(exc).__name__}: {exc})") from exc
    if fmt != CHECKPOINT_FORMAT:
        raise _Invalid(f"{path}: format {fmt!r}, this adsl reads {CHECKPOINT_FORMAT!r}")
    if rid != request_id or isinstance(rid, bool):
        raise _Invalid(f"{path}: request_id {rid!r}, the folder is request {request_id}")
    if not isinstance(made_for, dict) or _sha256_json(made_for) != digest:
        raise _Invalid(f"{path}: plan_row does not match settings_sha256 (edited by hand?)")
    if not isinstance(digests, dict) or sorted(digests) != sorted(TABLES):
        raise _Invalid(f"{path}: tables must give the sha256 of each of {list(TABLES)}")
    for name in TABLES:
        table = folder / f"{name}.parquet"
        try:
            actual = _sha256_file(table)
        except OSError as exc:
            raise _Invalid(f"{table}: unreadable ({exc})") from exc
        if actual != digests[name]:
            raise _Invalid(f"{table}: sha256 {actual} differs from the {digests[name]!r} in {MANIFEST}")
    try:
        prof = read_profile(folder)
    except TraceError as exc:
        raise _Invalid(str(exc)) from exc
    tables = {name: prof.table(name) for name in TABLES}
    if len(tables["requests"]) != 1:
        raise _Invalid(f"{folder / 'requests.parquet'}: {len(tables['requests'])} rows, a checkpoint holds one")
    other = next((n for n in TABLES if (tables[n]["request_id"] != request_id).any()), None)
    if other is not None:
        raise _Invalid(f"{folder / other}.parquet: rows of another request than {request_id}")
    try:
        name = _record_mismatch(tables, made_for, request_id)
    except (KeyError, TypeError, ValueError) as exc:
        raise _Invalid(f"{path}: plan_row incomplete ({type(exc).__name__}: {exc})") from exc
    if name is not None:
        raise _Invalid(f"{folder / 'requests.parquet'}: {name} contradicts the plan_row of {MANIFEST}")
    return tables, made_for


def _warn_unused(folder: Path, reason) -> None:
    warnings.warn(f"{folder}: checkpoint not used, its request is profiled again: {reason}", CheckpointWarning, 3)


def _report_pickles(ckpt: Path) -> None:
    """Warn about each ``*.pkl`` in the checkpoint folder: never read, never a finished request."""
    for f in sorted(ckpt.glob("*.pkl")):
        warnings.warn(
            f"{f}: not read: pickle checkpoints (adsl before data-only checkpoints, or a planted file) cannot be "
            "loaded safely; it does not count as a finished request (delete it)",
            CheckpointWarning,
            3,
        )


def load_checkpoint(ckpt: Path, row, draft_source: str, target_source: str, *, seed: int = 0):
    """A request's checkpointed tables; None (with a CheckpointWarning when something was there) when it has
    no usable checkpoint; TraceError when the checkpoint is sound but was made for another plan row."""
    rid = int(row.request_id)
    folder = Path(ckpt) / str(rid)
    try:
        got = _read_checkpoint(folder, rid)
    except _Invalid as exc:
        _warn_unused(folder, exc)
        return None
    if got is None:
        return None
    tables, made_for = got
    want = identity(row, draft_source, target_source, seed=seed)
    name = next((k for k, v in want.items() if made_for.get(k) != v), None)
    if name is not None:
        raise TraceError(
            f"{folder / MANIFEST}: checkpoint of request {rid} has {name} = {made_for.get(name)!r}, the plan has "
            f"{want[name]!r} (the profiling runs, pair or seed were edited so that request ids name other "
            f"requests; add prompts with a new run and `skip`, or delete {ckpt} to profile the new plan from scratch)"
        )
    return tables


def _progress(total: int, done: int, enabled: bool):
    try:
        from tqdm import tqdm

        return tqdm(total=total, initial=done, disable=not enabled, unit="request", desc="profiling")
    except ImportError:  # pragma: no cover

        class _Null:
            def update(self, n):
                pass

            def close(self):
                pass

        return _Null()


def snapshot(checkpoints: str | Path, out_dir: str | Path) -> int:
    """Write the finished requests of an interrupted run as a (partial) profile; returns their count.
    Committed, it lets a run resume on another machine (``run_profile(seed_from=...)``). Only checkpoints
    that validate are read; TraceError, and nothing written, when there is none."""
    ckpt = Path(checkpoints)
    parts = []
    if ckpt.is_dir():
        _report_pickles(ckpt)
        # request folders only ("7", not "07"): anything else was not written by run_profile
        folders = [f for f in ckpt.iterdir() if f.is_dir() and re.fullmatch(r"0|[1-9][0-9]*", f.name)]
        for folder in sorted(folders, key=lambda f: int(f.name)):
            try:
                got = _read_checkpoint(folder, int(folder.name))
            except _Invalid as exc:
                warnings.warn(f"{folder}: checkpoint not used: {exc}", CheckpointWarning, 2)
                continue
            if got is not None:
                parts.append(got[0])
    if not parts:
        raise TraceError(
            f"{ckpt}: no valid checkpoints to snapshot (folders <request_id>/ with {MANIFEST}); "
            f"nothing written to {out_dir}"
        )
    write_profile(combine(parts), out_dir)
    return len(parts)


def seed_checkpoints(
    plan: pd.DataFrame, partial: str | Path, ckpt: Path, draft_source: str, target_source: str, *, seed: int = 0
) -> int:
    """Turn the requests of a partial profile that match their plan row (``identity``: prompt, settings,
    pair, seed) into checkpoints, where no usable checkpoint exists; returns how many were added."""
    return len(_seed(plan, partial, Path(ckpt), (draft_source, target_source), seed))


def _seed(plan: pd.DataFrame, partial: str | Path, ckpt: Path, pair: tuple[str, str], seed: int) -> list:
    """The plan rows seed_checkpoints wrote a checkpoint for."""
    prof = read_profile(partial)
    ids = set(prof.requests["request_id"].astype(int))
    added = []
    for row in plan.itertuples():
        rid = int(row.request_id)
        folder = ckpt / str(rid)
        if rid not in ids:
            continue
        try:
            if _read_checkpoint(folder, rid) is not None:
                continue  # run_profile checks it against the plan
        except _Invalid:
            pass  # replaced below by the committed request
        part = {n: prof.table(n)[prof.table(n).request_id == rid].reset_index(drop=True) for n in TABLES}
        made_for = identity(row, *pair, seed=seed)
        if _record_mismatch(part, made_for, rid) is not None:
            continue
        write_checkpoint(folder, rid, part, made_for)
        added.append(row)
    return added
