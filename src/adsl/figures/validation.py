"""Predicted vs measured for every public anchor of the cost model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from adsl.errors import AdslError, shorten, shown
from adsl.fitting.modelfile import read_model
from adsl.perf import anchors as anchor_rows
from adsl.perf.hardware import HardwareCatalogue
from adsl.perf.models import ModelCatalogue
from adsl.sim.sd_batch import sd_batch_table
from adsl.sim.spec_bench import spec_bench_rows
from adsl.workspace import Workspace


def validation_table(
    anchors_dir: str | Path, models: ModelCatalogue, hw: HardwareCatalogue, acceptance: list[dict] | None = None
) -> pd.DataFrame:
    """Every anchor; with measured ``acceptance`` models also the speculative path (Spec-Bench)."""
    d = Path(anchors_dir)

    def read(name):
        return read_anchor(d / name)

    rows = (
        anchor_rows.decode_speed("gpt-fast", "gpt-fast", read("gpu_decode.csv"), models, hw)
        + anchor_rows.attacc_gpu(read("attacc_gpu.csv"), models, hw)
        + anchor_rows.vidur(read("vidur_mlp.csv"), models, hw)
        + anchor_rows.llmcompass(read("llmcompass_gemm.csv"), hw)
        + anchor_rows.pim_attention(read("pim_attention.csv"), hw)
        + anchor_rows.decode_speed("eager PyTorch", "eager", read("eager_decode.csv"), models, hw)
    )
    if acceptance:
        rows += spec_bench_rows(read("spec_bench.csv"), models, hw, acceptance)
    df = pd.DataFrame(rows)
    for col in ("low", "high"):
        if col not in df:
            df[col] = np.nan
    cols = anchor_rows.COLUMNS + ["low", "high"]
    extra = [c for c in df.columns if c not in cols]  # the speculative path's diagnostics
    return df[cols + extra]


def anchors_table(ws: Workspace, anchors: list[str] | None = None, measured: list[str] | None = None) -> pd.DataFrame:
    """Every public anchor (the CSV files ``anchors``; default: the configured folder's); with the
    ``measured`` acceptance models also the speculative path."""
    acceptance = [read_model(p) for p in measured] if measured else None
    folder = Path(anchors[0]).parent if anchors else ws.path(ws.settings.anchors_dir)
    return validation_table(folder, ws.models, ws.hardware, acceptance)


# the columns of an anchor table that hold text (names, units, sources); every other column is a number
MAX_ANCHOR_BYTES = 16_000_000  # the anchors are a few KB of published measurements
ANCHOR_TEXT = frozenset({"source", "model", "gpu", "pair", "pim", "quantity", "unit", "use", "runtime", "category"})


def read_anchor(path: str | Path) -> pd.DataFrame:
    """An anchor table (CSV under ``anchors_dir``): every column not in ``ANCHOR_TEXT`` finite numbers; a
    missing file, a text cell in a number column or an empty table is an error naming file, column and row."""
    path = Path(path)
    if not path.is_file():
        raise AdslError(f"{path}: anchor table not found")
    if path.stat().st_size > MAX_ANCHOR_BYTES:
        raise AdslError(f"{path}: {path.stat().st_size:,} bytes; allowed: at most {MAX_ANCHOR_BYTES:,}")
    try:
        df = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise AdslError(f"{path}: not a CSV table ({shorten(exc, 200)})") from None
    if df.empty:
        raise AdslError(f"{path}: no rows")
    for col in df.columns:
        if col in ANCHOR_TEXT:
            continue
        values = pd.to_numeric(df[col], errors="coerce")
        bad = values.isna() | ~np.isfinite(values.astype(float))
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            cell = shown(df[col].iloc[row], 80)
            raise AdslError(f"{path}: column {shorten(col, 80)!r} row {row + 2}: {cell} is not a finite number")
        df[col] = values
    return df


def sd_batch_validation(ws: Workspace, anchor: str) -> pd.DataFrame:
    """The speculative path at batch 8-64 against serving-engine measurements (``adsl.sim.sd_batch``)."""
    return sd_batch_table(read_anchor(anchor), ws.models, ws.hardware)


def validation_gpu(ws: Workspace, df: pd.DataFrame):
    """The analytical cost model against public measurements (gpt-fast decode speeds, the AttAcc simulator's
    GPU-only GPT-3 175B point, Vidur's linear-layer profiles, LLMCompass GEMM throughput, AttAcc's PIM
    attention refit). "fit" rows calibrate the gpt-fast runtime; every other row is held out."""
    import matplotlib.pyplot as plt
    import matplotlib.ticker as mticker
    import seaborn as sns

    del ws  # everything is in the table
    df = df.assign(ratio=df.predicted / df.measured, label=df.anchor + ": " + df.point + " " + df.metric)
    fig, ax = plt.subplots(figsize=(7.0, 0.28 * len(df) + 1.2))
    ax.axvspan(0.8, 1.2, color="0.9", zorder=0, label="±20 %")
    ax.axvline(1.0, color="0.3", lw=1)
    ranged = df.dropna(subset=["low", "high"])
    y = {lab: i for i, lab in enumerate(df.label)}
    for r in ranged.itertuples():
        ax.plot([r.low / r.measured, r.high / r.measured], [y[r.label]] * 2, color="0.5", lw=4, alpha=0.5)
    sns.scatterplot(data=df, x="ratio", y="label", hue="use", style="anchor", s=60, ax=ax, zorder=5)
    ax.set(
        xscale="log",
        xlabel="predicted / measured (grey bars: published range)",
        ylabel="",
        title="Cost model against public measurements",
    )
    spread = np.concatenate([df.ratio, 1 / df.ratio, ranged.high / ranged.measured, ranged.measured / ranged.low])
    lim = max(1.6, float(np.nanmax(spread)) * 1.15)
    ax.set_xlim(1 / lim, lim)
    ticks = [t for t in (0.1, 0.25, 0.5, 0.8, 1.0, 1.25, 2.0, 4.0, 10.0) if 1 / lim <= t <= lim]
    ax.xaxis.set_major_locator(mticker.FixedLocator(ticks))
    ax.xaxis.set_major_formatter(mticker.FixedFormatter([f"{t:g}" for t in ticks]))
    ax.xaxis.set_minor_locator(mticker.NullLocator())
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    return fig, df
