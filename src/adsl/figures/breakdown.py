"""Paper Figs. 16 and 17 (where the time goes), the area table, and the comparison with the paper's
headline averages."""

from __future__ import annotations

import numpy as np
import pandas as pd

from adsl.perf.cost import pass_cost
from adsl.sim.experiment import ci95, replica_values
from adsl.workspace import Workspace

# the paper's headline metrics -> their experiment columns: the mean over the replicas, and each replica's value
METRICS = {"throughput": "throughput_tok_s", "energy_efficiency": "tokens_per_j"}
REPLICAS = {"throughput": "throughput_replicas", "energy_efficiency": "tokens_per_j_replicas"}

# cost-model operator classes -> the paper's Fig. 17 components
FIG17_COMPONENTS = {
    "fc": "FC",
    "attention": "attention",
    "allreduce": "inter-device communication",
    "transfer": "GPU-PIM transfer",
}


def fig16_table(ws: Workspace, experiment: str) -> pd.DataFrame:
    """Time of PIM-SD and SADDLE to emit the same number of tokens (PIM-SD's measured window at the batch:
    each system's window time and stage times scaled by that count over its own window's tokens), split
    into verification, prediction (drafting), prefill of admitted requests (continuous batching) and the
    part the system overlaps (negative). Monitoring and decision making (the running product and its
    compare) are not charged by the model: the paper puts them at 0.83 %."""
    del ws
    df = pd.read_parquet(experiment)
    df = df[df.system.isin(["PIM-SD", "SADDLE"])]
    tokens = df[df.system == "PIM-SD"].groupby("batch").window_tokens.first()
    rows = []
    for _, r in df.iterrows():
        scale = tokens[r.batch] / r.window_tokens  # the same token count for both systems
        parts = {"verification": r.stage_verify_s, "prediction": r.stage_draft_s}
        prefill = r.get("stage_prefill_s", np.nan)
        parts["prefill"] = float(prefill) if pd.notna(prefill) else 0.0
        overlap = r.get("stage_overlap_s", np.nan)
        parts["overlap"] = -float(overlap) if pd.notna(overlap) else 0.0
        for comp, t in parts.items():
            rows.append(
                dict(
                    batch=r.batch,
                    system=r.system,
                    component=comp,
                    tokens=float(tokens[r.batch]),
                    time_s=float(t) * scale,
                    total_s=r.time_s * scale,
                )
            )
    out = pd.DataFrame(rows)
    ref = out[out.system == "PIM-SD"].groupby("batch").total_s.first()
    out["normalized"] = out.time_s / out.batch.map(ref)
    return out.sort_values(["batch", "system", "component"]).reset_index(drop=True)


def fig17_table(ws: Workspace) -> pd.DataFrame:
    """Target verification pass of the Fig. 15a setting (Llama pair, batch 16, d + 1 tokens per
    request) on the SADDLE system, by operator class, vs context length."""
    sim = ws.settings.simulation
    exp = sim.experiments["seqlen"]
    pair = ws.models.pair(exp.pairs[0])
    system = ws.hardware.system(sim.systems.saddle_system)
    q = sim.draft_length + 1
    ctx = np.array(exp.seq_lens, dtype=float)
    cost = pass_cost(pair.target, system, exp.batches[0], q, ctx, {"fc": "gpu", "attention": "pim"})
    by = cost.time_by("cls")
    rows = []
    for cls, t in by.items():
        comp = FIG17_COMPONENTS.get(cls, "others")
        for c, v in zip(ctx, np.broadcast_to(t, ctx.shape), strict=True):
            rows.append(dict(seq_len=int(c), component=comp, time_s=float(v)))
    out = pd.DataFrame(rows).groupby(["seq_len", "component"], as_index=False).time_s.sum()
    out["share"] = out.time_s / out.groupby("seq_len").time_s.transform("sum")
    return out.sort_values(["seq_len", "component"]).reset_index(drop=True)


def area_table(ws: Workspace, components: str) -> pd.DataFrame:
    """Section IV's area arithmetic from its component areas; the DRAM die share uses the HBM3 die
    area of the same section."""
    del ws
    c = pd.read_csv(components)
    c["area_mm2"] = c.count_per_pch * c.pch_per_die * c.area_mm2_each
    out = c.groupby("die", as_index=False).area_mm2.sum()
    out["die_area_mm2"] = out.die.map({"DRAM die": 121.0}).astype(float)
    out["share_of_die"] = out.area_mm2 / out.die_area_mm2
    parts = c[["die", "component", "area_mm2"]]
    return pd.concat([parts, out.assign(component="total")], ignore_index=True)


def paper_average_gain(df: pd.DataFrame, metric: str, system: str, baseline: str, norm: str = "GPU-AD") -> float:
    """The paper's average gain of ``system`` over ``baseline``: the ratio of the arithmetic means, over the
    (pair, batch) points, of both systems' values normalised to ``norm`` at the same point,
    mean(system / norm) / mean(baseline / norm). Not a geometric mean and not a ratio of mean raw values
    (this definition reproduces the paper's quoted averages, e.g. 3.357 / 1.165 = 2.88 for GPU-SD)."""
    wide = df.pivot_table(index=["pair", "batch"], columns="system", values=metric, aggfunc="first")
    missing = {system, baseline, norm} - set(wide.columns)
    if missing:
        raise ValueError(f"paper average: no {metric} rows for {sorted(missing)}")
    return float((wide[system] / wide[norm]).mean() / (wide[baseline] / wide[norm]).mean())


def paper_gain_ci95(df: pd.DataFrame, replicas: str, system: str, baseline: str, norm: str = "GPU-AD") -> float:
    """Half-width of the 95 % interval of ``paper_average_gain``: the gain computed on each replica alone (replica
    i of every point and system: one whole replicate of the experiment, the same streams for every system at a
    point), Student t over those; ``replicas`` is the metric's per-replica list column (NaN without it)."""
    if replicas not in df:
        return np.nan
    each = replica_values(df[replicas])
    gains = [paper_average_gain(df.assign(_one=v), "_one", system, baseline, norm) for v in each.T]
    return ci95(np.array(gains))


def paper_comparison_table(ws: Workspace, experiment: str, headlines: str) -> pd.DataFrame:
    """SADDLE's average gain over each baseline as the paper computes it (``paper_average_gain``) over the
    (pair, batch) points of the main experiment, next to the paper's stated numbers."""
    del ws
    df = pd.read_parquet(experiment)
    paper = pd.read_csv(headlines)
    rows = []
    for _, p in paper.iterrows():
        if p.metric not in METRICS:
            raise ValueError(f"{headlines}: metric {p.metric!r} unknown; known: {sorted(METRICS)}")
        ours = paper_average_gain(df, METRICS[p.metric], "SADDLE", p.baseline)
        rows.append(
            dict(
                metric=p.metric,
                baseline=p.baseline,
                ours=ours,
                ours_ci95=paper_gain_ci95(df, REPLICAS[p.metric], "SADDLE", p.baseline),
                paper=float(p.paper_value),
                ratio_ours_to_paper=ours / float(p.paper_value),
                points=int((df.system == "SADDLE").sum()),
                source=p.source,
            )
        )
    return pd.DataFrame(rows)


def fig16_latency_breakdown(ws: Workspace, df: pd.DataFrame):
    """Paper Fig. 16, modelled: time of PIM-SD and SADDLE on OPT-66B to emit the same tokens, split into
    verification (target passes), prediction (draft passes) and the part hidden by overlapping them
    (hatched, negative); normalised to PIM-SD's end-to-end time. The legend lists the parts some bar has
    (with exclusive stacks, ``access: exclusive``, no stage overlaps another, and the figure says so).
    Monitoring and decision making (a multiply and a compare per drafted token) are not charged by the
    model."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    del ws
    batches = sorted(df.batch.unique())
    parts = ["verification", "prediction", "prefill", "overlap"]
    colors = dict(zip(parts, sns.color_palette(n_colors=len(parts)), strict=True))
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    width = 0.38
    for i, b in enumerate(batches):
        for sys_name, dx in (("PIM-SD", -width / 2), ("SADDLE", width / 2)):
            part = df[(df.batch == b) & (df.system == sys_name)].set_index("component").normalized
            bottom = 0.0
            for comp in ("verification", "prediction", "prefill"):
                ax.bar(i + dx, part.get(comp, 0.0), width, bottom=bottom, color=colors[comp], edgecolor="white")
                bottom += part.get(comp, 0.0)
            ax.bar(i + dx, part.get("overlap", 0.0), width, color=colors["overlap"], hatch="//", edgecolor="white")
            ax.plot(i + dx, bottom + part.get("overlap", 0.0), marker="_", color="k", ms=14)
    shown = [k for k in parts if (df[df.component == k].normalized != 0).any()]  # a part in some bar
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[k], hatch="//" if k == "overlap" else None) for k in shown]
    ax.legend(handles, shown, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    if "overlap" not in shown:  # say so rather than leave the reader looking for the hatched bars
        ax.text(1.02, 0.0, "overlap: 0 in\nevery bar", transform=ax.transAxes, fontsize=7, va="bottom")
    ax.axhline(0, color="0.3", lw=0.8)
    ticks = [
        (i + dx, f"{n}\n{b}")
        for i, b in enumerate(batches)
        for n, dx in (("PIM-SD", -width / 2), ("SADDLE", width / 2))
    ]
    ax.set_xticks([t for t, _ in ticks], [label for _, label in ticks], fontsize=7)
    ax.set(
        xlabel="System and batch size",
        ylabel="Time (norm. to PIM-SD end to end)",
        title="Latency breakdown for equal tokens, OPT-66B (black mark: end to end)",
    )
    return fig, df


def fig17_verification_breakdown(ws: Workspace, df: pd.DataFrame):
    """Paper Fig. 17, modelled: one target verification pass (Llama pair, batch 16, d + 1 tokens per request,
    FC on the GPUs, attention in the PIM stacks of the SADDLE system) split by operator class vs context
    length. The cost model charges inter-device all-reduce and GPU-PIM transfers; it has no separate
    pseudo-channel communication term (the paper's 13.54 %), which is folded into PIM attention time."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    del ws
    wide = df.pivot(index="seq_len", columns="component", values="share").fillna(0.0)
    fig, ax = plt.subplots(figsize=(6.0, 3.4))
    bottom = np.zeros(len(wide))
    for comp, color in zip(wide.columns, sns.color_palette(n_colors=len(wide.columns)), strict=True):
        ax.bar([str(i) for i in wide.index], wide[comp], bottom=bottom, label=comp, color=color)
        bottom += wide[comp].to_numpy()
    ax.set(
        xlabel="Context length (tokens)",
        ylabel="Share of verification time",
        title="TLM verification, Llama pair, batch 16",
    )
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig, df


def area(ws: Workspace, df: pd.DataFrame):
    """The paper's section IV area arithmetic, recomputed from its component areas (data/area_components.csv):
    PIM logic per HBM3 DRAM die (8 pseudo-channels x (16 PEs x 0.116 mm^2 + 4 accumulators x 0.044 mm^2))
    and its share of a 121 mm^2 die, and the buffer-die special function units (softmax 1.44 mm^2 +
    accumulator 0.18 mm^2, 7 nm)."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    del ws
    parts = df[df.component != "total"]
    fig, ax = plt.subplots(figsize=(5.6, 3.0))
    sns.barplot(data=parts, y="component", x="area_mm2", hue="die", dodge=False, ax=ax)
    totals = df[df.component == "total"].set_index("die")
    share = totals.share_of_die.get("DRAM die", np.nan)
    ax.set(
        xlabel="Area (mm^2)",
        ylabel="",
        title=f"PIM logic area: DRAM die {totals.area_mm2.get('DRAM die', np.nan):.2f} mm^2 ({share:.1%}), "
        f"buffer die {totals.area_mm2.get('buffer die', np.nan):.2f} mm^2",
    )
    return fig, df


def fig_paper_comparison(ws: Workspace, df: pd.DataFrame):
    """SADDLE's average throughput and energy-efficiency gains over each baseline, computed as the paper does
    (ratio of arithmetic means over the 12 pair x batch points of Fig. 12/13), next to the paper's stated
    headline numbers (data/paper_headlines.csv), ours with its 95 % interval (the gain computed on each replica
    alone, Student t over the replicas). Differences are discussed in the README."""
    import seaborn as sns

    from adsl.figures.common import error_bars

    del ws
    long = df.melt(id_vars=["metric", "baseline"], value_vars=["ours", "paper"], var_name="source", value_name="gain")
    g = sns.catplot(data=long, x="baseline", y="gain", hue="source", col="metric", kind="bar", height=3.2, aspect=1.1)
    g.set_axis_labels("", "SADDLE average gain (paper's averaging)")
    for ax, metric in zip(g.axes.flat, g.col_names, strict=True):
        ax.axhline(1.0, color="0.3", lw=0.8, ls="--")
        ours = df[df.metric == metric]
        half = {(b, "ours"): e for b, e in zip(ours.baseline, ours.ours_ci95, strict=True)}
        error_bars(ax, half, ["ours", "paper"], capsize=2)  # the paper's numbers have none
    return g.figure, df
