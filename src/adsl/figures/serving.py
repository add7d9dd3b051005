"""How the serving model changes the answer: continuous vs static batching per system."""

from __future__ import annotations

import pandas as pd

from adsl.figures.evaluation import pairs_in_order
from adsl.sim.systems import in_order
from adsl.workspace import Workspace


def batching_table(ws: Workspace, continuous: str, static: str) -> pd.DataFrame:
    """Throughput of every (pair, system, batch) with continuous and with static batching, and the gain
    (continuous / static); the continuous run's measured window beside it."""
    del ws
    keys = ["pair", "system", "batch"]
    cont = pd.read_parquet(continuous).set_index(keys)
    stat = pd.read_parquet(static).set_index(keys)
    out = pd.DataFrame(
        {
            "continuous_tok_s": cont.throughput_tok_s,
            "continuous_ci95": cont.throughput_ci95,
            "static_tok_s": stat.throughput_tok_s.reindex(cont.index),
            "window_start_s": cont.window_start_s,
            "window_end_s": cont.window_end_s,
        }
    ).reset_index()
    out["gain"] = out.continuous_tok_s / out.static_tok_s
    return out.sort_values(keys).reset_index(drop=True)


def batching_static_vs_continuous(ws: Workspace, df: pd.DataFrame):
    """Throughput of each system with continuous batching (a finished request's slot takes the next queued
    request at the next iteration, its prefill charged, throughput measured over the steady-state window)
    divided by its throughput with static batches (the batch decodes until its last request finishes), for
    the three pairs and batch 16-128. Speculative systems gain the most: their requests finish after very
    different numbers of iterations, so a static batch spends a long tail with a few stragglers."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    pairs = pairs_in_order(ws, df)
    fig, axes = plt.subplots(1, len(pairs), figsize=(4.2 * len(pairs), 3.4), sharey=True, squeeze=False)
    for ax, pair in zip(axes[0], pairs, strict=True):
        sns.barplot(data=df[df.pair == pair], x="batch", y="gain", hue="system", hue_order=in_order(df.system), ax=ax)
        ax.axhline(1.0, color="0.3", lw=0.8, ls="--")
        ax.set(xlabel="Batch size", ylabel="Throughput, continuous / static batching", title=pair)
        if ax is not axes[0][-1]:
            ax.get_legend().remove()
    axes[0][-1].legend(fontsize=7, title=None, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.suptitle("Gain from continuous batching (slots refilled from a queue)", y=1.03)
    return fig, df


def layouts_table(ws: Workspace, tensor_parallel: str, pipeline: str) -> pd.DataFrame:
    """SADDLE's silicon in its two layouts, per system and batch: throughput tensor-parallel (the main
    experiment) and as pipeline stages, which is faster, and what limits the pipeline (micro-batches,
    device utilisation)."""
    del ws
    keys = ["pair", "system", "batch"]
    tp = pd.read_parquet(tensor_parallel)
    pp = pd.read_parquet(pipeline).set_index(keys)
    tp = tp.set_index(keys).reindex(pp.index)
    out = pd.DataFrame(
        {
            "tensor_parallel_tok_s": tp.throughput_tok_s,
            "pipeline_tok_s": pp.throughput_tok_s.reindex(tp.index),
            "pipeline_micro_batches": pp.micro_batches.reindex(tp.index),
            "tensor_parallel_gpu_util": tp.gpu_util,
            "pipeline_gpu_util": pp.gpu_util.reindex(tp.index),
            "pipeline_overlap_share": (pp.stage_overlap_s / pp.time_s).reindex(tp.index),
        }
    ).reset_index()
    out["faster"] = out.tensor_parallel_tok_s.gt(out.pipeline_tok_s).map({True: "tensor_parallel", False: "pipeline"})
    out["ratio"] = out.tensor_parallel_tok_s / out.pipeline_tok_s
    return out.sort_values(keys).reset_index(drop=True)
