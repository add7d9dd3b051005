"""Does a profile match the profiling settings it is used under?

A profile records, per request, the pair, mode, draft length, temperature, prompt category, seed and
generated length it was made with (``requests.parquet``). The workflow compares them with ``profiling``
and the seed before any job runs: a profile made under other settings is still used (profiling takes
hours), but the run says so instead of passing silently.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from adsl.settings import ProfilingSettings

# seed of request i: the profiler's per-request seed (adsl.profiling.run.profile_request)
SEED_STRIDE = 1_000_003


def _ranges(settings: ProfilingSettings) -> list[tuple[int, int]] | None:
    """Request id range [start, stop) of each run; None when a run takes `all` of a category (its count
    depends on the prompt file)."""
    out, start = [], 0
    for run in settings.runs:
        if any(not isinstance(n, int) for n in run.prompts.values()):
            return None
        stop = start + sum(run.prompts.values())
        out.append((start, stop))
        start = stop
    return out


def _differs(rows: pd.DataFrame, column: str, want, where: str) -> str | None:
    have = sorted(set(rows[column].tolist()))
    if have != [want]:
        shown = ", ".join(map(str, have))
        return f"{where} is {want!r}; the profile's requests were made with {shown}"
    return None


def mismatches(requests: pd.DataFrame, settings: ProfilingSettings, seed: int) -> list[str]:
    """Each way in which the profile's ``requests`` table differs from ``settings`` (empty: it matches)."""
    found = []
    for column, field, want in (("draft_model", "draft", settings.draft), ("target_model", "target", settings.target)):
        found.append(_differs(requests, column, want, f"profiling.{field}"))
    ranges = _ranges(settings)
    if ranges is None:
        want = {(r.mode, r.d_max, float(r.temperature)) for r in settings.runs}
        have = set(zip(requests["mode"], requests["d_max"], requests["temperature"].astype(float), strict=True))
        if want != have:
            found.append(
                f"profiling.runs ask for (mode, d_max, temperature) {sorted(want)}; the profile has {sorted(have)}"
            )
        return [m for m in found if m]
    planned = ranges[-1][1] if ranges else 0
    if len(requests) != planned:
        found.append(f"profiling.runs plan {planned} requests; the profile has {len(requests)}")
    ids = requests["request_id"].to_numpy()
    for i, (run, (start, stop)) in enumerate(zip(settings.runs, ranges, strict=True)):
        rows = requests[(ids >= start) & (ids < stop)]
        if rows.empty:
            continue
        where = f"profiling.runs.{i}"
        found.append(_differs(rows, "mode", run.mode, f"{where}.mode"))
        found.append(_differs(rows, "d_max", run.d_max, f"{where}.d_max"))
        found.append(_differs(rows, "temperature", float(run.temperature), f"{where}.temperature"))
        counts = rows["source_category"].value_counts().to_dict()
        if counts != dict(run.prompts):
            found.append(
                f"{where}.prompts is {dict(run.prompts)}; the profile's requests {start}-{stop - 1} have {counts}"
            )
        short = rows[rows["generated_len"] < run.min_new_tokens]
        if len(short):
            found.append(
                f"{where}.min_new_tokens is {run.min_new_tokens}; request {int(short['request_id'].iloc[0])} of the "
                f"profile generated {int(short['generated_len'].iloc[0])} tokens"
            )
        # a draft may overshoot the last step by up to d_max tokens
        long = rows[rows["generated_len"] > run.max_new_tokens + run.d_max]
        if len(long):
            found.append(
                f"{where}.max_new_tokens is {run.max_new_tokens}; request {int(long['request_id'].iloc[0])} of the "
                f"profile generated {int(long['generated_len'].iloc[0])} tokens"
            )
    want_seeds = requests["request_id"].astype("int64") + int(seed) * SEED_STRIDE
    if not (requests["seed"].astype("int64") == want_seeds).all():
        found.append(f"seed is {seed}; the profile's requests were seeded from another seed")
    return [m for m in found if m]


def missing(folder: str | Path, name: str, elsewhere: list[Path]) -> str:
    """What to do about a profile that is not there: its path, how to make it, the profiles that are."""
    found = sorted({p.name for base in elsewhere for p in Path(base).glob("data/profiles/*") if p.is_dir()})
    return (
        f"acceptance profile {folder}/ not found (profiling.name = {name!r}; profiles found: {found or 'none'}). "
        "Set profiling.name to one of them, copy a profile folder of the four trace tables there "
        "(docs/profiling.md, trace format), or make it with `snakemake profile_acceptance --cores 2` "
        "(real speculative decoding: hours of CPU, needs `pip install -e '.[profile]'`)"
    )


def check(
    folder: str | Path, settings: ProfilingSettings, seed: int, elsewhere: list[Path]
) -> tuple[str | None, list[str]]:
    """(why no job may read the profile, or None; warnings): the profile must exist with every table, and
    its recorded settings should match ``settings`` (``on_mismatch`` says whether a difference stops)."""
    from adsl.profiling.traces import TraceError, profile_files, read_table

    files = profile_files(folder)
    if not all(Path(f).is_file() for f in files):
        return missing(folder, settings.name, elsewhere), []
    try:
        requests = read_table(files[0], "requests")
    except TraceError as exc:  # unreadable: the rules that read it stop on this; the others run
        return str(exc), []
    found = mismatches(requests, settings, seed)
    if not found:
        return None, []
    head = f"acceptance profile {folder}/ was made under other settings: " + "; ".join(found)
    if settings.on_mismatch == "error":
        return f"{head} (profiling.on_mismatch: error)", []
    rerun = "snakemake profile_acceptance --cores 2 --forcerun=profile_acceptance"
    return None, [f"{head}. Used as it is; to reprofile run `{rerun}`"]


def write_manifest(path: str | Path, folder: str | Path, profiling: dict, seed: int, prompts: str | Path) -> None:
    """What made the profile in ``folder``: the settings, seed, prompt file and each table's sha256 (strict
    JSON, written atomically, after the tables)."""
    import hashlib
    import json

    from adsl.io import atomic_path
    from adsl.profiling.traces import TABLES, versions_json

    def digest(p: Path) -> str:
        return hashlib.sha256(p.read_bytes()).hexdigest()

    manifest = {
        "format": "adsl-profile-manifest/1",
        "profile": str(folder),
        "profiling": profiling,
        "seed": seed,
        "prompts": {"path": str(prompts), "sha256": digest(Path(prompts))},
        "tables": {name: digest(Path(folder) / f"{name}.parquet") for name in TABLES},
        "versions": json.loads(versions_json()),
    }
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True, allow_nan=False) + "\n")
