"""The draft's entropy given its confidence: fitted on the profile, drawn jointly with the confidences.

Entropy-based draft stopping (AdaEDL) reads the entropy of the draft's next-token distribution, which
the profile records at every teacher-forced position (``positions.draft_entropy``, nats) beside the
draft's top-1 probability (the confidence the acceptance model uses). The two are strongly dependent (a
confident draft has a peaked distribution), so the entropy is modelled conditionally: confidence bins at
the measured confidence quantiles, and in each bin the empirical quantile function of the entropy. A draw
takes the bin of each generated confidence and a uniform quantile. ``entropy_check`` compares draws with
held-out measurements (KS statistic and the rank correlation with confidence).
"""

from __future__ import annotations

import numpy as np
from scipy import stats

BINS = 12  # confidence bins (equal counts)
LEVELS = 64  # entropy quantiles per bin


def fit_entropy(confidence: np.ndarray, entropy: np.ndarray, bins: int = BINS, levels: int = LEVELS) -> dict:
    """Confidence bin edges and, per bin, the entropy's mid-point quantiles (nats)."""
    c, h = np.asarray(confidence, dtype=float), np.asarray(entropy, dtype=float)
    if c.size < bins * 4:
        raise ValueError(f"{c.size} positions cannot fit {bins} confidence bins of entropy")
    edges = np.quantile(c, np.linspace(0, 1, bins + 1))
    edges[0], edges[-1] = 0.0, 1.0
    idx = np.clip(np.searchsorted(edges, c, side="right") - 1, 0, bins - 1)
    q = (np.arange(levels) + 0.5) / levels
    table = [np.quantile(h[idx == b], q) if (idx == b).any() else np.zeros(levels) for b in range(bins)]
    return {"edges": edges.tolist(), "quantiles": np.array(table).tolist()}


def draw_entropy(model: dict, confidence: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Entropies (float32, same shape as ``confidence``) drawn from the fitted conditional quantiles."""
    edges = np.asarray(model["edges"])
    table = np.asarray(model["quantiles"], dtype=np.float32)
    bins, levels = table.shape
    b = np.clip(np.searchsorted(edges, confidence, side="right") - 1, 0, bins - 1)
    u = rng.integers(0, levels, size=np.shape(confidence))
    return table[b, u]


def entropy_check(model: dict, confidence: np.ndarray, entropy: np.ndarray, seed: int = 0) -> dict:
    """Draws given held-out confidences against the held-out entropies: KS statistic and p-value of the
    marginal, and the Spearman correlation of entropy with confidence, measured and drawn (None where it is
    undefined: a constant input; model files are strict JSON, which has no NaN)."""
    drawn = draw_entropy(model, confidence, np.random.default_rng(seed))
    ks = stats.ks_2samp(drawn, entropy)
    return {
        "ks_statistic": float(ks.statistic),
        "ks_pvalue": float(ks.pvalue),
        "spearman_measured": _defined(stats.spearmanr(confidence, entropy).statistic),
        "spearman_drawn": _defined(stats.spearmanr(confidence, drawn).statistic),
    }


def _defined(x) -> float | None:
    return float(x) if np.isfinite(x) else None
