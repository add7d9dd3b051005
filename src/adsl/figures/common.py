"""Shared figure style and deterministic, atomic saving."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import seaborn as sns  # noqa: E402

from adsl.io import atomic_path, write_csv  # noqa: E402

PDF_METADATA = {"CreationDate": None, "ModDate": None}
PNG_METADATA = {"Software": None}


def style() -> None:
    sns.set_theme(context="paper", style="whitegrid", palette="colorblind", font_scale=1.1)
    plt.rcParams.update({"svg.hashsalt": "adsl", "pdf.fonttype": 42, "figure.dpi": 100})


def save_figure(fig, pdf: str | Path, png: str | Path | None = None) -> None:
    """PDF without dates (byte-identical reruns) and, optionally, a PNG at 200 dpi."""
    with atomic_path(pdf) as tmp:
        fig.savefig(tmp, format="pdf", metadata=PDF_METADATA, bbox_inches="tight")
    if png is not None:
        with atomic_path(png) as tmp:
            fig.savefig(tmp, format="png", metadata=PNG_METADATA, dpi=200, bbox_inches="tight")
    plt.close(fig)


def save_all(fig, table, pdf, png=None, csv=None) -> None:
    if csv is not None:
        write_csv(table, csv)
    save_figure(fig, pdf, png)


def error_bars(ax, half: dict, levels: list[str], capsize: float = 1.5) -> None:
    """Error bars on seaborn's grouped bars of ``ax`` (one container a hue level, in ``levels`` order): each bar's
    half-width ``half[(its x tick label, its level)]``; a bar with none, NaN (one replica) or 0 (no acceptance
    streams) gets none. A bar's x tick is the one nearest its centre (seaborn puts the ticks at 0, 1, ...)."""
    names = [t.get_text() for t in ax.get_xticklabels()]
    for level, bars in zip(levels, list(ax.containers), strict=True):  # a copy: errorbar adds containers
        for bar in bars:
            cx = bar.get_x() + bar.get_width() / 2
            e = half.get((names[round(cx)], level), 0.0)
            if e > 0:
                ax.errorbar(cx, bar.get_height(), yerr=e, color="k", lw=0.8, capsize=capsize)
