"""Paper Fig. 3: speculative (d = 8) vs autoregressive decoding on the SpecPIM-style motivation system."""

from __future__ import annotations

import pandas as pd

from adsl.workspace import Workspace


def fig03a_table(ws: Workspace, experiment: str) -> pd.DataFrame:
    del ws
    df = pd.read_parquet(experiment)
    base = df[(df.system == "AD") & (df.batch == df.batch.min())].throughput_tok_s.iloc[0]
    out = df[["batch", "system", "throughput_tok_s", "fits_memory", "draft_length"]].copy()
    out["normalized"] = out.throughput_tok_s / base
    return out.sort_values(["system", "batch"]).reset_index(drop=True)


def fig03b_table(ws: Workspace, experiment: str) -> pd.DataFrame:
    del ws
    df = pd.read_parquet(experiment)
    ad = df[df.system == "AD"].throughput_tok_s.iloc[0]
    sd = df[df.system == "SD"][["draft_length", "system", "throughput_tok_s"]].copy()
    lengths = sorted(sd.draft_length.unique())
    ad_rows = pd.DataFrame({"draft_length": lengths, "system": "AD", "throughput_tok_s": ad})
    out = pd.concat([ad_rows, sd], ignore_index=True)
    out["normalized"] = out.throughput_tok_s / ad
    return out.sort_values(["system", "draft_length"]).reset_index(drop=True)


def fig03a_sd_vs_ad_batch(ws: Workspace, df: pd.DataFrame):
    """Paper Fig. 3a, modelled: throughput of SpecPIM-style speculative decoding (d = 8, static operator
    mapping searched for the batch and the maximum sequence length) and of autoregressive decoding on the
    4-device motivation system (each A100 with 5 HBM3-PIM stacks), OPT-66B + OPT-1.3B, normalised to AD at
    batch 8. Batches whose weights + KV caches exceed the stacks' capacity are marked."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    del ws
    fig, ax = plt.subplots(figsize=(5.6, 3.6))
    sns.barplot(data=df, x="batch", y="normalized", hue="system", hue_order=["AD", "SD"], ax=ax)
    # above the group's taller bar: on the bars' common edge the mark sat across both of them
    order, top = sorted(df.batch.unique()), df.groupby("batch").normalized.max()
    for b in df[~df.fits_memory].batch.unique():
        ax.annotate(
            "exceeds\nmemory",
            (order.index(b), top[b]),
            xytext=(0, 3),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=7,
        )
    ax.margins(y=0.12)
    ax.set(
        xlabel="Batch size",
        ylabel="Throughput (norm. to AD, batch 8)",
        title="SpecPIM-style SD (d = 8) vs AD, OPT-66B + OPT-1.3B",
    )
    return fig, df


def fig03b_sd_vs_ad_draft_length(ws: Workspace, df: pd.DataFrame):
    """Paper Fig. 3b, modelled: the same system at batch 64, speculative decoding with d = 2..12 normalised to
    autoregressive decoding (dashed line)."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    del ws
    fig, ax = plt.subplots(figsize=(5.6, 3.6))
    sd = df[df.system == "SD"]
    sns.barplot(data=sd, x="draft_length", y="normalized", color=sns.color_palette()[1], ax=ax, label="SD")
    ax.axhline(1.0, color="0.2", ls="--", lw=1, label="AD")
    ax.set(xlabel="Draft length d", ylabel="Throughput (norm. to AD)", title="Batch 64, OPT-66B + OPT-1.3B")
    ax.legend()
    return fig, df
