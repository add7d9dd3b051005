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
