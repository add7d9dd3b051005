"""A deployable draft-length table: for a system and pair, the fastest fixed draft length per (batch,
sequence length) bucket (0: speculation off, the system's autoregressive counterpart), its throughput gain
over the configured d and over the best single d, and the same table in the forms serving engines take
(TensorRT-LLM's ``draft_len_schedule``, a {batch at most: d} map; vLLM's one ``num_speculative_tokens``)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from adsl.fitting.modelfile import read_model
from adsl.progress import progress
from adsl.settings import plain
from adsl.sim.experiment import Point, run_point
from adsl.sim.systems import SYSTEMS


def counterpart(system: str) -> str | None:
    """The autoregressive system on the same hardware (``<name>-AD`` for ``<name>-SD``), if registered."""
    name = system[: -len("-SD")] + "-AD" if system.endswith("-SD") else None
    return name if name in SYSTEMS and not SYSTEMS[name].speculative else None


def draft_length_table(ws, models: list[str], tau: str) -> pd.DataFrame:
    """One row per (system, pair, sequence length, batch) of ``dse.draft_table``: the throughput at each
    fixed d (``tok_s_d<d>``; ``tok_s_d0``: speculation off), the best d, and its gain over the configured d
    and over the single d that is best over every bucket (highest geometric mean throughput)."""
    from adsl.fitting.tau import read_taus
    from adsl.paths import models_by_pair

    dse, spec = ws.settings.dse, ws.settings.dse.draft_table
    wc = ws.with_overrides(plain(dse.simulation), {})
    sim = wc.settings.simulation
    paths, taus = models_by_pair(models), read_taus(tau)
    loaded = {p: {c: read_model(f) for c, f in paths[p].items()} for p in {p for _, p in spec.runs}}
    rows = []
    jobs = [(s, p, q, b) for s, p in spec.runs for q in spec.seq_lens for b in spec.batches]
    for system, pair, seq_len, batch in progress(jobs, "dse draft-length table: bucket"):
        models_p = loaded[pair]
        drawn: dict = {}
        row = {"system": system, "pair": pair, "seq_len": seq_len, "batch": batch}
        off = counterpart(system)
        if off is not None:
            r = run_point(wc, sim, Point(pair, off, batch, sim.draft_length, seq_len, "warn"), models_p, taus.get(pair))
            row["tok_s_d0"] = r["throughput_tok_s"]
        for d in spec.draft_lengths:
            point = Point(pair, system, batch, d, seq_len, "warn", "fixed")
            row[f"tok_s_d{d}"] = run_point(wc, sim, point, models_p, taus.get(pair), drawn)["throughput_tok_s"]
        rows.append(row)
    df = pd.DataFrame(rows)
    cols = [c for c in df.columns if c.startswith("tok_s_d")]
    lengths = np.array([int(c[len("tok_s_d") :]) for c in cols])
    tput = df[cols].to_numpy(float)
    df["best_d"] = lengths[np.nanargmax(tput, axis=1)]
    df["best_tok_s"] = np.nanmax(tput, axis=1)
    configured = f"tok_s_d{sim.draft_length}"
    df["configured_d"] = sim.draft_length
    df["gain_vs_configured"] = df["best_tok_s"] / df[configured] if configured in df else np.nan
    fixed = [c for c in cols if c != "tok_s_d0"]
    for _, g in df.groupby(["system", "pair"], sort=False):
        means = np.exp(np.log(g[fixed].to_numpy(float)).mean(axis=0))
        best = fixed[int(np.argmax(means))]
        df.loc[g.index, "best_single_d"] = int(best[len("tok_s_d") :])
        df.loc[g.index, "gain_vs_best_single"] = g["best_tok_s"] / g[best]
    df["best_single_d"] = df["best_single_d"].astype(np.int64)
    return df


def schedules(table: pd.DataFrame) -> dict:
    """The table as serving-engine settings, per (system, pair) and sequence length: TensorRT-LLM's
    ``draft_len_schedule`` ({batch at most: d}, 0 turns speculation off) and vLLM's ``speculative_config``
    (one ``num_speculative_tokens``: the best single d)."""
    out: dict = {}
    for (system, pair, seq_len), g in table.groupby(["system", "pair", "seq_len"], sort=False):
        g = g.sort_values("batch")
        out.setdefault(f"{system} / {pair}", {})[f"seq_len {seq_len}"] = {
            "tensorrt_llm": {
                "draft_len_schedule": {str(int(b)): int(d) for b, d in zip(g.batch, g.best_d, strict=True)}
            },
            "vllm": {"speculative_config": {"num_speculative_tokens": int(g.best_single_d.iloc[0])}},
        }
    return out


def write_schedules(table: str, snippet: str) -> None:
    """``schedules`` of the CSV ``table``, as JSON."""
    from adsl.io import atomic_path

    with atomic_path(snippet) as tmp, open(tmp, "w") as fh:
        json.dump(schedules(pd.read_csv(table)), fh, indent=2, sort_keys=False)
        fh.write("\n")
