"""Profile a draft/target pair over a prompt plan, one checkpoint per request, resumable.

A plan is a list of requests (mode, sampling settings, prompt). Each finished request is written to
``<checkpoints>/<request_id>.pkl`` atomically; a rerun skips finished requests, so an interrupted run
resumes where it stopped and gives the same tables as an uninterrupted one (seeds are per request).
"""

from __future__ import annotations

import pickle
import time
from dataclasses import asdict
from pathlib import Path

import pandas as pd

from adsl.io import atomic_path
from adsl.profiling import datasets
from adsl.profiling.traces import TABLES, TraceError, empty_tables, versions_json, write_profile
from adsl.settings import ProfilingRun


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
    gen_seed = seed * 1_000_003 + int(row.request_id)
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
    if seed_from is not None and Path(seed_from).is_dir():
        seed_checkpoints(plan, seed_from, ckpt)
    todo = [r for r in plan.itertuples() if not (ckpt / f"{r.request_id}.pkl").is_file()]
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
            part = profile_request(row, draft, target, tok, seed, (draft_source, target_source))
            with atomic_path(ckpt / f"{row.request_id}.pkl") as tmp:
                tmp.write_bytes(pickle.dumps(part))
            bar.update(1)
        bar.close()
    parts = [load_checkpoint(ckpt, r) for r in plan.itertuples()]
    tables = combine(parts)
    write_profile(tables, out_dir)
    return tables


# what a checkpoint must agree on with its plan row; a plan edited so that ids now name other prompts
# would otherwise assemble a profile from the wrong requests
_CHECKED = ("question_id", "mode", "d_max", "temperature")


def _mismatch(got, row) -> str | None:
    """The first of _CHECKED on which a profiled request record and a plan row differ, else None."""
    for name in _CHECKED:
        want, have = getattr(row, name), got[name]
        if str(want) != str(have) and not (name == "temperature" and float(want) == float(have)):
            return name
    return None


def load_checkpoint(ckpt: Path, row) -> dict[str, pd.DataFrame]:
    """A request's checkpointed tables; TraceError when the checkpoint was made for another plan row."""
    path = ckpt / f"{row.request_id}.pkl"
    part = pickle.loads(path.read_bytes())
    got = part["requests"].iloc[0]
    name = _mismatch(got, row)
    if name is not None:
        raise TraceError(
            f"{path}: checkpoint of request {row.request_id} has {name} = {got[name]!r}, the plan has "
            f"{getattr(row, name)!r} (the profiling runs were edited so that request ids changed; add prompts "
            f"with a new run and `skip`, or delete {ckpt} to profile the new plan from scratch)"
        )
    return part


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
    Committed, it lets a run resume on another machine (``run_profile(seed_from=...)``)."""
    files = sorted(Path(checkpoints).glob("*.pkl"), key=lambda p: int(p.stem))
    parts = [pickle.loads(f.read_bytes()) for f in files]
    write_profile(combine(parts), out_dir)
    return len(parts)


def seed_checkpoints(plan: pd.DataFrame, partial: str | Path, ckpt: Path) -> int:
    """Turn the requests of a partial profile that match the plan (same id, and the fields a checkpoint
    is checked on) into checkpoints; returns how many were added."""
    from adsl.profiling.traces import read_profile

    prof = read_profile(partial)
    req = prof.requests.set_index("request_id")
    added = 0
    for row in plan.itertuples():
        rid = int(row.request_id)
        target = ckpt / f"{rid}.pkl"
        if target.is_file() or rid not in req.index:
            continue
        if _mismatch(req.loc[rid], row) is not None:
            continue
        part = {name: prof.table(name)[prof.table(name).request_id == rid].reset_index(drop=True) for name in TABLES}
        with atomic_path(target) as tmp:
            tmp.write_bytes(pickle.dumps(part))
        added += 1
    return added
