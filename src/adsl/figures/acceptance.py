"""Paper Fig. 4a/4b from a measured profile: acceptance rate vs fixed draft length (exact greedy
replay) and accepted tokens per speculative iteration."""

from __future__ import annotations

import pandas as pd

from adsl.fitting.modelfile import read_model
from adsl.profiling.replay import acceptance_vs_length
from adsl.profiling.traces import read_profile
from adsl.workspace import Workspace

CATEGORY_ORDER = ["summarization", "open_qa", "creative_writing"]


def _pair_label(requests: pd.DataFrame) -> str:
    def short(s: str) -> str:
        return s.removeprefix("offline:").split("/")[-1]

    r = requests.iloc[0]
    return f"{short(r.target_model)} + {short(r.draft_model)} (draft)"


def acceptance_table(ws: Workspace, profile: str, paper: str, calibrated: list[str] | None = None) -> pd.DataFrame:
    """Measured accepted/drafted at d = 4, 8, 12 beside the paper's Fig. 4a and, for every model file
    in ``calibrated`` (paper pairs calibrated to Fig. 4a), the rates its calibration achieved."""
    prof = read_profile(profile)
    greedy = prof.requests[prof.requests["mode"] == "greedy"]
    df = acceptance_vs_length(prof.positions[prof.positions.request_id.isin(greedy.request_id)], greedy, (4, 8, 12))
    ref = pd.read_csv(paper).set_index(["category", "draft_length"])["acceptance_rate"].rename("paper_acceptance_rate")
    df = df.join(ref, on=["category", "draft_length"])
    rows = [
        (m["category"], int(d), float(v), m["pair"])
        for m in map(read_model, calibrated or [])
        for d, v in m["calibration"].get("achieved_rates", {}).items()
    ]
    if rows:
        cal = pd.DataFrame(rows, columns=["category", "draft_length", "calibrated_acceptance_rate", "calibrated_pair"])
        df = df.merge(cal, on=["category", "draft_length"], how="left")
    return df.assign(pair=_pair_label(greedy))


def per_iteration_table(ws: Workspace, profile: str, iterations: int = 20) -> pd.DataFrame:
    """Accepted tokens in iterations 1..N of the real greedy loop (d = the profile's d_max), for the
    first request of each category and the mean over all its requests."""
    del ws
    prof = read_profile(profile)
    greedy = prof.requests[prof.requests["mode"] == "greedy"].set_index("request_id")
    steps = prof.steps[prof.steps.request_id.isin(greedy.index) & (prof.steps.step < iterations)]
    steps = steps.assign(category=greedy.loc[steps.request_id, "category"].to_numpy(), iteration=steps.step + 1)
    first = greedy.groupby("category").apply(lambda g: g.index.min(), include_groups=False)
    rows = steps[steps.request_id.isin(first.to_numpy())].assign(series="first request")
    mean = steps.groupby(["category", "iteration"], as_index=False).accepted.mean().assign(series="mean of requests")
    out = pd.concat([rows[["category", "iteration", "accepted", "series"]], mean], ignore_index=True)
    return out.assign(pair=_pair_label(greedy.reset_index()), d=int(greedy.d_max.iloc[0]))


def fig04a_acceptance_rate(ws: Workspace, df: pd.DataFrame):
    """Paper Fig. 4a, measured and calibrated: bars, the acceptance rate (accepted / drafted draft tokens) of
    the profiled pair at fixed draft lengths 4, 8 and 12 for the three Dolly categories (Spec-Bench
    proxies), by exact replay of greedy speculative decoding from teacher-forced records. Red diamonds: the
    paper's OPT-66B + OPT-1.3B values. Black crosses: the rates of the OPT-66B acceptance model the
    simulator uses (our measured model, one intercept shift per category and one within-draft continuation
    term for the pair, fitted to the diamonds)."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    del ws
    order = [c for c in CATEGORY_ORDER if c in set(df.category)]
    fig, ax = plt.subplots(figsize=(6.0, 3.8))
    sns.barplot(
        data=df,
        x="category",
        y="acceptance_rate",
        hue="draft_length",
        order=order,
        palette=sns.color_palette("Blues", df.draft_length.nunique() + 2)[2:],
        ax=ax,
    )
    if "calibrated_acceptance_rate" in df:
        pair = df.calibrated_pair.dropna()
        label = f"calibrated model ({pair.iloc[0]})" if len(pair) else ""
        _marks(ax, df, "calibrated_acceptance_rate", order, label, marker="x", color="black", s=36, zorder=6)
    _marks(
        ax, df, "paper_acceptance_rate", order, "paper (OPT-66B + 1.3B)", marker="D", color="tab:red", s=30, zorder=5
    )
    ax.set(ylim=(0, 1), xlabel="", ylabel="Acceptance rate (accepted / drafted)", title=f"bars: {df.pair.iloc[0]}")
    ax.legend(title="draft length", fontsize=8, title_fontsize=8)
    return fig, df


def _marks(ax, df: pd.DataFrame, column: str, order: list[str], label: str, **style) -> None:
    """One marker per (category, draft length) at the centre of its bar, from ``column``."""
    rows = df.dropna(subset=[column])
    if not len(rows):
        return
    hues = sorted(df.draft_length.unique())
    width = 0.8 / len(hues)
    for r in rows.itertuples():
        x = order.index(r.category) - 0.4 + width * (hues.index(r.draft_length) + 0.5)
        ax.scatter(x, getattr(r, column), **style)
    ax.scatter([], [], label=label, **{k: v for k, v in style.items() if k != "zorder"})


def plot_accepted_per_iteration(df: pd.DataFrame, title: str):
    """Accepted tokens per speculative iteration, one colour per category (Fig. 4b and 4c)."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    sns.lineplot(
        data=df,
        x="iteration",
        y="accepted",
        hue="category",
        style="series",
        markers=True,
        ax=ax,
        hue_order=[c for c in CATEGORY_ORDER if c in set(df.category)],
    )
    d = int(df.d.iloc[0])
    ax.set(
        ylim=(-0.3, d + 0.3),
        xticks=range(1, int(df.iteration.max()) + 1),
        xlabel="Speculative iteration",
        ylabel=f"Accepted tokens (d = {d})",
        title=title,
    )
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    return fig, df


def fig04b_accepted_per_iteration(ws: Workspace, df: pd.DataFrame):
    """Paper Fig. 4b, measured: accepted draft tokens in speculative iterations 1-20 of the real greedy loop (d
    = the profile's draft length) for the first request of each category, and the mean over requests. The
    per-iteration optimum draft length fluctuates, which motivates adaptive drafting."""
    del ws
    return plot_accepted_per_iteration(df, df.pair.iloc[0])
