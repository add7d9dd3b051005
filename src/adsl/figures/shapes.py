"""The two shapes of the paper we do not reproduce, decomposed (issue 25): Fig. 12's SADDLE gain over
GPU-AD from batch 16 to 128, and Fig. 3a's AD and SD from batch 8 to 128 on the motivation pipeline.

Per point: tokens a request emits per iteration (one verification, or one decode pass, of its
micro-batch), tokens it drafts per iteration, and the wall time per output token split into what the
devices were busy with (FC, attention with its softmax, all-reduce, the other operators) and the stages
(verification or decoding, drafting not hidden under it, prefill, idle). Device-busy times add up the
GPUs' and the PIM stacks' work, so they can exceed the wall time; stage times are unions over the
devices. Fig. 12 is decomposed under every attribution step, so the step that turns the trend shows;
the paper's values read off its plots (``data/paper_shapes.csv``) stand beside ours."""

from __future__ import annotations

import numpy as np
import pandas as pd

from adsl.workspace import Workspace

# the paper's figure -> (systems, their baseline), each at the smallest and the largest batch its
# experiment runs (the paper's: 16 and 128 for Fig. 12, 8 and 128 for Fig. 3a)
SHAPES = {"fig12": (("GPU-AD", "SADDLE"), "GPU-AD"), "fig03a": (("AD", "SD"), "AD")}
# which of our ratios a paper value is read against
PAPER_RATIO = {"fig12": "gain", "fig03a": "vs_first_batch_of_baseline"}


def _per_token(r) -> dict:
    n = float(r.window_tokens)
    us = 1e6 / n
    draft = max(float(r.stage_draft_s) - float(r.stage_overlap_s), 0.0)  # AD: no drafting to hide
    busy = float(r.stage_verify_s) + draft + float(r.stage_prefill_s)
    return {
        # iterations count every micro-batch's rounds: per request, a round of its own micro-batch
        "tokens_per_iteration": n * float(r.micro_batches) / (float(r.iterations) * r.batch),
        "drafted_per_iteration": float(r.mean_draft_length) if pd.notna(r.mean_draft_length) else 0.0,
        "wall_us": float(r.time_s) * us,
        "fc_us": float(r.class_fc_s) * us,
        "attention_us": (float(r.class_attention_s) + float(r.class_softmax_s)) * us,
        "allreduce_us": float(r.class_allreduce_s) * us,
        "other_ops_us": (float(r.class_norm_s) + float(r.class_act_s)) * us,
        "verify_or_decode_us": float(r.stage_verify_s) * us,
        "exposed_drafting_us": draft * us,
        "prefill_us": float(r.stage_prefill_s) * us,
        "idle_us": max(float(r.time_s) - busy, 0.0) * us,
    }


def _rows(df: pd.DataFrame, figure: str, setting: str, pair: str | None) -> list[dict]:
    systems, base = SHAPES[figure]
    df = df[df.system.isin(systems)]
    if pair is not None:
        df = df[df.pair == pair]
    batches = (df.batch.min(), df.batch.max())
    df = df[df.batch.isin(batches)]
    rows = []
    for _, r in df.iterrows():
        same = df[(df.pair == r.pair) & (df.batch == r.batch)].set_index("system").throughput_tok_s
        first = df[(df.pair == r.pair) & (df.system == base) & (df.batch == min(batches))].throughput_tok_s
        rows.append(
            {
                "figure": figure,
                "setting": setting,
                "pair": r.pair,
                "system": r.system,
                "batch": int(r.batch),
                "throughput_tok_s": float(r.throughput_tok_s),
                "gain": float(r.throughput_tok_s / same[base]),  # over the baseline at the same batch
                "vs_first_batch_of_baseline": float(r.throughput_tok_s / first.iloc[0]),
                **_per_token(r),
            }
        )
    return rows


def shape_decomposition_table(ws: Workspace, main: str, fig03a: str, steps: list[str], paper: str) -> pd.DataFrame:
    """One row per (figure, setting, system, batch): Fig. 12 (OPT-66B, today's settings and each
    attribution step of ``simulation.attribution``) and Fig. 3a (today's settings); ``paper_value`` where the
    paper's plot gives the same ratio."""
    rows = _rows(pd.read_parquet(main), "fig12", "today", "OPT-66B")
    names = [s.name for s in ws.settings.simulation.attribution]
    for i, (name, path) in enumerate(zip(names, steps, strict=True)):
        rows += _rows(pd.read_parquet(path), "fig12", f"step {i}: {name}", "OPT-66B")
    rows += _rows(pd.read_parquet(fig03a), "fig03a", "today", None)
    out = pd.DataFrame(rows, columns=list(rows[0]) if rows else ["figure", "setting", "pair", "system", "batch"])
    paper = pd.read_csv(paper)
    out["paper_value"] = np.nan
    for _, p in paper.iterrows():
        hit = (out.figure == p.figure) & (out.pair == p.pair) & (out.system == p.system) & (out.batch == p.batch)
        out.loc[hit, "paper_value"] = float(p.paper_value)
    out["paper_ratio"] = out.figure.map(PAPER_RATIO)  # the column ``paper_value`` compares with
    order = ["figure", "setting", "pair", "system", "batch"]
    return out.sort_values(order, kind="stable").reset_index(drop=True)
