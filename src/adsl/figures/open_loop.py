"""Figure serving_latency_throughput (beyond the paper): open-loop serving with Poisson arrivals on one
pair, p50 and p99 time per output token against the achieved output throughput as the arrival rate is
swept up to each system's saturation; the five systems with their own draft-length rules, and the SADDLE
pipeline under the best policies of the policy zoo."""

from __future__ import annotations

import pandas as pd

from adsl.sim.systems import in_order
from adsl.workspace import Workspace


def serving_latency_throughput(ws: Workspace, df: pd.DataFrame):
    """Beyond the paper: open-loop serving on one pair. Requests arrive as a Poisson process (prompt
    lengths of the profiled prompts, log-normal output lengths), queue while every slot is busy and are
    served with continuous batching; the rate is swept as fractions of each system's saturation rate. Left:
    p50 time per output token (TPOT), right: p99, against the achieved output throughput (tokens over the
    time from the first arrival to the last completion, vLLM benchmark_serving's definition). Dashed: the
    SADDLE pipeline under the policy zoo's best observable policies."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    del ws
    df = df.copy()
    df["tpot_p50_ms"] = df.tpot_p50_s * 1e3
    df["tpot_p99_ms"] = df.tpot_p99_s * 1e3
    labels = list(dict.fromkeys([*in_order(df[df.policy == "own"].system), *df[df.policy != "own"].label]))
    dashes = {lab: (4, 2) if lab not in set(df[df.policy == "own"].system) else "" for lab in labels}
    fig, axes = plt.subplots(1, 2, figsize=(10.0, 3.8), sharex=True)
    for ax, col, title in zip(axes, ("tpot_p50_ms", "tpot_p99_ms"), ("p50", "p99"), strict=True):
        sns.lineplot(
            data=df,
            x="achieved_tok_s",
            y=col,
            hue="label",
            hue_order=labels,
            style="label",
            dashes=dashes,
            markers=True,
            sort=False,
            estimator=None,
            ax=ax,
        )
        ax.set(
            title=f"{df.pair.iloc[0]}: {title} time per output token",
            xlabel="Achieved output throughput (tokens/s)",
            ylabel=f"{title} TPOT (ms)",
        )
        ax.set_ylim(bottom=0)
        if col == "tpot_p50_ms":
            ax.get_legend().remove()
    axes[1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    cols = ["pair", "label", "system", "policy", "load", "rate_req_s", "achieved_tok_s", "tpot_p50_ms", "tpot_p99_ms"]
    return fig, df[[*cols, "ttft_p50_s", "ttft_p99_s", "e2e_p50_s", "e2e_p99_s"]].reset_index(drop=True)
