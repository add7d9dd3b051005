"""Paper Figs. 12-15, 18 and 19: throughput, energy efficiency, ablation, sensitivity, utilisation and
the operator scheduler, from the simulator's experiment tables."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from adsl.perf.roofline import throughput_limit
from adsl.sim.experiment import ratio_ci95
from adsl.sim.systems import in_order
from adsl.workspace import Workspace


def pairs_in_order(ws: Workspace, df: pd.DataFrame) -> list[str]:
    """The pairs of ``df`` in the model catalogue's order (one panel each)."""
    return [p for p in ws.models.pairs if p in set(df.pair)]


def _normalized(
    df: pd.DataFrame, metric: str, base: str, keys: list[str], ci: str | None = None, replicas: str | None = None
) -> pd.DataFrame:
    """``metric`` divided by the ``base`` system's value at the same ``keys``; with ``ci`` (the metric's 95 %
    half-width column) also ``normalized_ci95``: where the base's own interval is 0 (an AD baseline decodes
    without acceptance streams, the same in every replica) that interval over the base's value; where it is
    not, from the replicas' paired values (``replicas``, a list column: ``adsl.sim.experiment.ratio_ci95``),
    else NaN (a ratio of two uncertain means is not the ratio of their intervals)."""
    cols = [c for c in (metric, ci, replicas) if c is not None]
    names = {metric: "_ref", ci: "_ref_ci", replicas: "_ref_replicas"}
    ref = df[df.system == base].set_index(keys)[cols].rename(columns=names)
    out = df.join(ref, on=keys)
    out["normalized"] = out[metric] / out["_ref"]
    if ci is not None:  # NaN == 0 is false: no base, no interval
        out["normalized_ci95"] = (out[ci] / out["_ref"]).where(out["_ref_ci"] == 0)
    if replicas is not None:
        paired = [
            ratio_ci95(a, b, r) if isinstance(b, Sequence | np.ndarray) else np.nan
            for a, b, r in zip(out[replicas], out["_ref_replicas"], out["normalized"], strict=True)
        ]
        out["normalized_ci95"] = out["normalized_ci95"].where(out["_ref_ci"] == 0, paired)
    return out.drop(columns=[*ref.columns])


def _cols(df, keys, metric):
    interval = ["normalized_ci95"] if "normalized_ci95" in df else []
    return df[[*keys, "system", metric, "normalized", *interval, "fits_memory"]]


def fig12_table(ws: Workspace, experiment: str) -> pd.DataFrame:
    """Throughput normalised to GPU-AD, with the physical limit of each (pair, batch)
    (``adsl.perf.roofline.throughput_limit`` over the systems the experiment uses, d + 1 tokens per step)."""
    df = _normalized(pd.read_parquet(experiment), "throughput_tok_s", "GPU-AD", ["pair", "batch"], "throughput_ci95")
    out = _cols(df, ["pair", "batch"], "throughput_tok_s").copy()
    sim = ws.settings.simulation
    systems = [
        ws.hardware.system(n) for n in (sim.systems.gpu_system, sim.systems.pim_system, sim.systems.saddle_system)
    ]
    k = sim.draft_length + 1
    out["limit_tok_s"] = [
        float(throughput_limit(ws.models.pair(p).target, systems, b, k))
        for p, b in zip(out.pair, out.batch, strict=True)
    ]
    ad = df[df.system == "GPU-AD"].set_index(["pair", "batch"]).throughput_tok_s
    out["limit_normalized"] = out.limit_tok_s / [ad[(p, b)] for p, b in zip(out.pair, out.batch, strict=True)]
    return out.sort_values(["pair", "batch", "system"]).reset_index(drop=True)


def fig13_table(ws: Workspace, experiment: str) -> pd.DataFrame:
    del ws
    df = pd.read_parquet(experiment).rename(columns={"tokens_per_j": "tokens_per_joule"})
    df = _normalized(df, "tokens_per_joule", "GPU-AD", ["pair", "batch"], "tokens_per_j_ci95")
    return (
        _cols(df, ["pair", "batch"], "tokens_per_joule").sort_values(["pair", "batch", "system"]).reset_index(drop=True)
    )


def fig14_table(ws: Workspace, experiment: str) -> pd.DataFrame:
    del ws
    df = _normalized(
        pd.read_parquet(experiment), "throughput_tok_s", "PIM-SD", ["batch"], "throughput_ci95", "throughput_replicas"
    )
    return (
        df[["batch", "system", "throughput_tok_s", "throughput_ci95", "normalized", "normalized_ci95"]]
        .sort_values(["batch", "system"])
        .reset_index(drop=True)
    )


def fig15a_table(ws: Workspace, experiment: str) -> pd.DataFrame:
    del ws
    df = _normalized(pd.read_parquet(experiment), "throughput_tok_s", "GPU-AD", ["seq_len"], "throughput_ci95")
    return _cols(df, ["seq_len"], "throughput_tok_s").sort_values(["seq_len", "system"]).reset_index(drop=True)


def fig15b_table(
    ws: Workspace, experiment: str, light: str | None = None, light_experiment: str = "small_batch_light"
) -> pd.DataFrame:
    """Throughput normalised to GPU-AD per batch, with its 95 % interval over the replicas; with ``light``
    (experiment ``light_experiment``: SADDLE with ``tau_light_load`` on) also that run, as system "SADDLE, tau
    x <factor> at light load"."""
    df = pd.read_parquet(experiment).assign(tau_factor=1.0)
    if light is not None:
        factor = ws.settings.simulation.for_experiment(light_experiment).tau_light_load.factor
        name = f"SADDLE, tau x {factor:g} at light load"
        df = pd.concat([df, pd.read_parquet(light).assign(system=name, tau_factor=factor)], ignore_index=True)
    df = _normalized(df, "throughput_tok_s", "GPU-AD", ["batch"], "throughput_ci95")
    cols = ["batch", "system", "throughput_tok_s", "throughput_ci95", "normalized", "normalized_ci95"]
    return df[[*cols, "fits_memory", "tau_factor"]].sort_values(["batch", "system"]).reset_index(drop=True)


def fig18_table(ws: Workspace, experiment: str, batch: int, systems: list[str]) -> pd.DataFrame:
    """GPU and PIM utilisation of ``systems`` at one ``batch`` (the paper's Fig. 18: batch 64)."""
    del ws
    df = pd.read_parquet(experiment)
    df = df[(df.batch == batch) & df.system.isin(systems)]
    long = df.melt(
        id_vars=["pair", "system"], value_vars=["gpu_util", "pim_util"], var_name="device", value_name="utilization"
    )
    long["device"] = long.device.str.replace("_util", "").str.upper()
    return long.sort_values(["pair", "system", "device"]).reset_index(drop=True)


def fig19_table(ws: Workspace, experiment: str) -> pd.DataFrame:
    """Static (SADDLE-s) vs dynamic (SADDLE) placement: share of operator time on PIM and throughput, with the
    speedup's 95 % interval from the replicas paired with the static placement's (``ratio_ci95``; NaN without
    the experiment's per-replica column)."""
    del ws
    df = pd.read_parquet(experiment)
    cls = [c for c in df.columns if c.startswith("class_")]
    rows = []
    for _, r in df.iterrows():
        pim_share = (r.pim_util) / max(r.gpu_util + r.pim_util, 1e-12)
        rows.append(
            dict(
                pair=r.pair,
                scheduler="dynamic" if r.system == "SADDLE" else "static",
                system=r.system,
                throughput_tok_s=r.throughput_tok_s,
                pim_time_share=pim_share,
                draft_fc_on_pim=r.draft_fc_on_pim,
                target_attention_on_pim=r.target_attention_on_pim,
                op_time_s=float(sum(r[c] for c in cls)),
            )
        )
    out = pd.DataFrame(rows)
    (static,) = set(df.system) - {"SADDLE"}
    reps = "throughput_replicas" if "throughput_replicas" in df else None
    norm = _normalized(df, "throughput_tok_s", static, ["pair"], "throughput_ci95", reps)  # rows in df's, as out's
    out["speedup_vs_static"] = norm.normalized.to_numpy()
    out["speedup_ci95"] = norm.normalized_ci95.to_numpy()
    return out.sort_values(["pair", "scheduler"], ascending=[True, False]).reset_index(drop=True)


def _bars(df, x, y, hue, order, ax, ylabel, title, err: str | None = None):
    """Grouped bars of ``y``; ``err``: a column of half-widths drawn as error bars on them."""
    import seaborn as sns

    from adsl.figures.common import error_bars

    sns.barplot(data=df, x=x, y=y, hue=hue, hue_order=order, ax=ax)
    if err is not None:  # keyed as the axis labels its ticks
        half = {(str(a), h): e for a, h, e in zip(df[x], df[hue], df[err], strict=True)}
        error_bars(ax, half, [h for h in order if h in set(df[hue])])
    ax.axhline(1.0, color="0.3", lw=0.8, ls="--")
    ax.set(ylabel=ylabel, title=title)


def _per_pair(ws, df, metric_label, title, limit: str | None = None):
    import matplotlib.pyplot as plt

    pairs = pairs_in_order(ws, df)
    fig, axes = plt.subplots(1, len(pairs), figsize=(4.2 * len(pairs), 3.4), sharey=True, squeeze=False)
    err = "normalized_ci95" if "normalized_ci95" in df else None
    for ax, pair in zip(axes[0], pairs, strict=True):
        part = df[df.pair == pair]
        _bars(part, "batch", "normalized", "system", in_order(df.system), ax, metric_label, pair, err)
        if limit is not None:  # one value per batch, drawn over the batch's bar group
            roof = part.groupby("batch")[limit].first()
            ax.plot(range(len(roof)), roof.to_numpy(), color="k", marker="_", ms=18, lw=1.0, label="physical limit")
            ax.set_yscale("log")
        ax.set_xlabel("Batch size")
        if ax is not axes[0][-1]:
            ax.get_legend().remove()
    axes[0][-1].legend(fontsize=7, title=None, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.suptitle(title, y=1.03)
    return fig


def fig12_throughput(ws: Workspace, df: pd.DataFrame):
    """Paper Fig. 12, modelled: generated tokens per second of GPU-AD, GPU-SD (d = 8), PIM-AD (AttAcc), PIM-SD
    (SpecPIM-style static mapping, d = 8) and SADDLE (running-product draft length, Shared and Eager Pools,
    operator scheduler) for the three pairs at batch 16-128, normalised to GPU-AD at the same pair and batch
    (log scale), with continuous batching, measured over the steady-state window. Acceptance streams come
    from the calibrated acceptance models; tau from the tau calibration. The black marks are the physical
    limit: every FC FLOP at the GPUs' peak x 0.8 and the weights read once per step of d + 1 tokens per
    request, the best of the systems on each term. Error bars: 95 % intervals over the replicas (GPU-AD and
    PIM-AD decode the same in every replica)."""
    title = "Throughput (line: physical limit; error bars: 95 % intervals)"
    fig = _per_pair(ws, df, "Throughput (norm. to GPU-AD)", title, "limit_normalized")
    return fig, df


def fig13_energy(ws: Workspace, df: pd.DataFrame):
    """Paper Fig. 13, modelled: generated tokens per joule of the five systems, same layout as Fig. 12,
    normalised to GPU-AD, with 95 % intervals over the replicas. Energy includes every board's and PIM stack's
    static power over the measured wall time."""
    return _per_pair(ws, df, "Tokens/J (norm. to GPU-AD)", "Energy efficiency (error bars: 95 % intervals)"), df


def _one_panel(df, x, order, xlabel, ylabel, title, err: str | None = None):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.0, 3.4))
    _bars(df, x, "normalized", "system", order, ax, ylabel, title, err)
    ax.set_xlabel(xlabel)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def fig14_ablation(ws: Workspace, df: pd.DataFrame):
    """Paper Fig. 14, modelled: what each SADDLE mechanism adds on OPT-66B + OPT-1.3B: adaptive length only
    (SADDLE-d), + Shared Pool (SADDLE-p, sequential), + Eager Pool (SADDLE-s, asynchronous, static FC->GPU /
    attention->PIM), + operator scheduler (SADDLE); throughput normalised to PIM-SD at the same batch. Error bars:
    95 % intervals of each ratio over the replicas, paired (replica i of every system draws the same acceptance
    streams, so the ratio's interval comes from the replicas' paired throughputs by the delta method)."""
    del ws
    labels = ("Batch size", "Throughput (norm. to PIM-SD)", "Ablation, OPT-66B (95 % intervals, paired)")
    return _one_panel(df, "batch", in_order(df.system), *labels, err="normalized_ci95"), df


def fig15a_seqlen(ws: Workspace, df: pd.DataFrame):
    """Paper Fig. 15a, modelled: throughput of the five systems vs maximum sequence length (1024-8192 tokens),
    Llama-3.1-70B + Llama-3.2-1B, batch 16, normalised to GPU-AD at the same length, with 95 % intervals over the
    replicas."""
    del ws
    labels = ("Maximum sequence length", "Throughput (norm. to GPU-AD)", "Llama pair, batch 16 (95 % intervals)")
    return _one_panel(df, "seq_len", in_order(df.system), *labels, err="normalized_ci95"), df


def fig15b_small_batch(ws: Workspace, df: pd.DataFrame):
    """Paper Fig. 15b, modelled: throughput of the five systems at batch 1, 2, 4 and 8, OPT-66B + OPT-1.3B,
    normalised to GPU-AD at the same batch, with 95 % intervals over the replicas (each serves at least
    ``simulation.precision.min_requests`` requests; the AD systems have none)."""
    del ws
    labels = ("Batch size", "Throughput (norm. to GPU-AD)", "OPT-66B, small batch (95 % intervals)")
    return _one_panel(df, "batch", in_order(df.system), *labels, err="normalized_ci95"), df


def fig18_utilization(ws: Workspace, df: pd.DataFrame):
    """Paper Fig. 18, modelled: busy time / wall time of the GPUs and of the PIM stacks at batch 64 for PIM-AD,
    PIM-SD and SADDLE, three pairs (busy time summed over devices and divided by their number). Each bar carries
    its value: a device the placement leaves idle (PIM-SD's static search puts Llama3.1-70B's GQA attention on the
    GPUs) shows 0.00 where its bar has no height."""
    import seaborn as sns
    from matplotlib.container import BarContainer

    del ws
    g = sns.catplot(
        data=df,
        x="system",
        y="utilization",
        hue="device",
        col="pair",
        kind="bar",
        height=3.2,
        aspect=0.9,
        order=["PIM-AD", "PIM-SD", "SADDLE"],
    )
    g.set_axis_labels("System", "Utilisation (busy / wall time)")
    for ax in g.axes.flat:
        for bars in ax.containers:
            if isinstance(bars, BarContainer):
                ax.bar_label(bars, fmt="%.2f", fontsize=6, padding=1)
    g.figure.suptitle("Device utilisation at batch 64", y=1.03)
    return g.figure, df


def fig19_scheduler(ws: Workspace, df: pd.DataFrame):
    """Paper Fig. 19, modelled: share of device time spent in PIM and throughput without (SADDLE-s: static FC
    ->GPU, attention->PIM) and with the arithmetic-intensity operator scheduler (SADDLE), batch 64, three
    pairs; throughput normalised to the static placement, with 95 % intervals from the replicas paired with
    the static placement's."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    del ws
    fig, (a, b) = plt.subplots(1, 2, figsize=(8.4, 3.3))
    sns.barplot(data=df, x="pair", y="pim_time_share", hue="scheduler", hue_order=["static", "dynamic"], ax=a)
    a.set(xlabel="", ylabel="Share of device time on PIM", title="Operator placement")
    ylabel, title = "Throughput (norm. to static)", "Scheduler effect, batch 64"
    err = "speedup_ci95" if "speedup_ci95" in df else None
    _bars(df, "pair", "speedup_vs_static", "scheduler", ["static", "dynamic"], b, ylabel, title, err)
    b.set(xlabel="")
    # one legend for both panels, above them and off the bars
    handles, labels = a.get_legend_handles_labels()
    a.get_legend().remove()
    b.get_legend().remove()
    fig.legend(handles, labels, title="scheduler", loc="lower center", ncol=2, bbox_to_anchor=(0.5, 1.0))
    return fig, df
