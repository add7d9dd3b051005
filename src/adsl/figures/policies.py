"""Figure policies (beyond the paper): every draft-length policy of ``adsl.sim.policies`` on a GPU-SD-style
and a SADDLE-style system, three pairs, batch 1-128, throughput normalised to the oracle policy on the
same system, pair and batch; and the table of each policy's gap to the oracle."""

from __future__ import annotations

import numpy as np
import pandas as pd

from adsl.sim.experiment import ci95, replica_values
from adsl.sim.policies import POLICIES
from adsl.sim.systems import in_order
from adsl.workspace import Workspace

KEYS = ["pair", "system", "batch"]


def policies_table(ws: Workspace, experiment: str) -> pd.DataFrame:
    """One row per (pair, system, batch, policy): throughput, its ratio to the oracle's, the mean draft
    length, and whether the policy is the best observable one (the oracle excluded) at that point."""
    del ws
    return _policies(pd.read_parquet(experiment))


def _policies(df: pd.DataFrame) -> pd.DataFrame:
    """``policies_table`` of an experiment table."""
    oracle = df[df.policy == "oracle"].set_index(KEYS).throughput_tok_s.rename("oracle_tok_s")
    out = df.join(oracle, on=KEYS)
    out["vs_oracle"] = out.throughput_tok_s / out.oracle_tok_s
    observable = out[out.policy != "oracle"]
    best = observable.loc[observable.groupby(KEYS).throughput_tok_s.idxmax()].set_index(KEYS).policy
    out["best_observable"] = [best.get(tuple(k)) == p for k, p in zip(out[KEYS].to_numpy(), out.policy, strict=True)]
    order = {p: i for i, p in enumerate(POLICIES)}
    out["_order"] = out.policy.map(order)
    cols = [*KEYS, "policy", "throughput_tok_s", "oracle_tok_s", "vs_oracle", "mean_draft_length", "best_observable"]
    return out.sort_values([*KEYS, "_order"])[cols].reset_index(drop=True)


def _mean_ci95(raw: pd.DataFrame, index: pd.Index) -> pd.Series:
    """Per (system, policy) of ``index``: the 95 % interval of the mean over the points of throughput / oracle,
    from that mean computed on each replica alone (``_policies`` of the replica's values; replica i of every
    policy at a point draws the same streams), Student t over the replicas; NaN without the experiment's
    per-replica column."""
    if "throughput_replicas" not in raw:
        return pd.Series(np.nan, index=index)
    means = [
        _policies(raw.assign(throughput_tok_s=v)).groupby(["system", "policy"]).vs_oracle.mean()
        for v in replica_values(raw.throughput_replicas).T
    ]
    return pd.concat(means, axis=1).apply(lambda r: ci95(r.to_numpy()), axis=1).reindex(index)


def policy_gaps_table(ws: Workspace, experiment: str) -> pd.DataFrame:
    """Per (system, policy): mean (with its 95 % interval, ``_mean_ci95``), min and max of throughput / oracle over
    pairs and batches, and at how many points it is the best observable policy."""
    del ws
    raw = pd.read_parquet(experiment)
    df = _policies(raw)
    g = df.groupby(["system", "policy"], sort=False)
    mean = g.vs_oracle.mean()
    return pd.DataFrame(
        {
            "mean_vs_oracle": mean,
            # in the table's row order: two indexes in different orders would make the frame sort its rows
            "mean_vs_oracle_ci95": _mean_ci95(raw, mean.index),
            "min_vs_oracle": g.vs_oracle.min(),
            "max_vs_oracle": g.vs_oracle.max(),
            "wins": g.best_observable.sum().astype(int),
            "points": g.size(),
        }
    ).reset_index()


def policies(ws: Workspace, df: pd.DataFrame):
    """Beyond the paper: throughput of every draft-length policy (fixed d, TensorRT-LLM-style batch
    schedule, SADDLE's running product, SpecDec++-style rejection risk, AdaEDL-style entropy bound,
    SmartSpec-style goodput) on a GPU-SD-style system (DGX) and on SADDLE's pipeline, three pairs, batch
    1-128, normalised to the oracle that drafts exactly the tokens the target will accept (dashed line).
    Thresholds of the learned rules are fitted per point on training streams; the streams simulated are
    held out. The table also lists each policy's mean gap to the oracle and where it wins."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    systems = in_order(df.system)
    pairs = [p for p in ws.models.pairs if p in set(df.pair)]
    fig, axes = plt.subplots(len(systems), len(pairs), figsize=(4.0 * len(pairs), 3.0 * len(systems)), squeeze=False)
    hue = [p for p in POLICIES if p in set(df.policy) and p != "oracle"]
    for i, system in enumerate(systems):
        for j, pair in enumerate(pairs):
            ax = axes[i][j]
            part = df[(df.system == system) & (df.pair == pair) & (df.policy != "oracle")]
            sns.lineplot(data=part, x="batch", y="vs_oracle", hue="policy", hue_order=hue, marker="o", ax=ax)
            ax.axhline(1.0, color="0.3", lw=0.8, ls="--")
            ax.set_xscale("log", base=2)
            batches = sorted(part.batch.unique())
            ax.set_xticks(batches, [str(b) for b in batches])
            ax.minorticks_off()
            ax.set(title=f"{system}, {pair}", xlabel="Batch size", ylabel="Throughput / oracle" if j == 0 else "")
            if (i, j) != (0, len(pairs) - 1):
                ax.get_legend().remove()
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return fig, df
