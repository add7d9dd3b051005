"""The paper's offline tau calibration.

Run full draft/verify with a long draft, record the running product H_j of the draft's confidences and
whether position j passed verification; estimate the success rate as a function of H; take the window
covering 20 % of the H range with the longest average draft among windows whose success rate is at
least 90 %; grid-search tau inside it for the longest average draft at >= 90 % success.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from adsl.fitting.generator import (
    draft_log_products,
    fixed_lengths,
    replay_lengths,
    running_product_lengths,
    running_sums,
)


def read_taus(path) -> dict[str, dict[str, float]]:
    """pair -> category -> tau, from the tau table the workflow writes (``adsl.paths.TAU``), read as strictly
    as the fit makes it: the columns pair, category and tau, one row a (pair, category), tau in [0, 1] (a
    threshold on a running product of probabilities)."""
    from adsl.errors import AdslError, shorten, shown

    try:
        t = pd.read_csv(path)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise AdslError(f"{path}: not a tau table ({shorten(exc, 200)})") from None
    missing = [c for c in ("pair", "category", "tau") if c not in t.columns]
    if missing:
        raise AdslError(f"{path}: no column {missing[0]!r}; a tau table has pair, category and tau")
    tau = pd.to_numeric(t.tau, errors="coerce")
    bad = ~tau.between(0.0, 1.0)  # NaN (text, empty) is not between
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        cell = shown(t.tau.iloc[row], 60)
        raise AdslError(f"{path}: row {row + 2}: tau {cell} must be a number in [0, 1]")
    if t.duplicated(["pair", "category"]).any():
        row = int(np.flatnonzero(t.duplicated(["pair", "category"]).to_numpy())[0])
        raise AdslError(f"{path}: row {row + 2}: a second tau for ({t.pair.iloc[row]}, {t.category.iloc[row]})")
    t = t.assign(tau=tau.astype(float))
    return {pair: dict(zip(g.category, g.tau, strict=True)) for pair, g in t.groupby("pair")}


def running_products(conf: np.ndarray, acc: np.ndarray, d_max: int, boost: float = 0.0, sums: tuple | None = None):
    """H_j and pass/fail for every drafted position of fixed-d_max speculative decoding (``boost``: the
    later tokens' confidence term, ``adsl.fitting.generator.continuation_boost``; ``sums``: its
    ``running_sums``), step by step, in each step j = 1..d_max, in each j the streams with a valid step."""
    n, t = conf.shape
    r = replay_lengths(acc, fixed_lengths(acc.shape, d_max))
    log_h = draft_log_products(conf, boost, sums)
    k = np.arange(1, d_max + 1)
    h, passed = [], []
    pos = np.zeros(n, dtype=np.int64)
    for step in range(r["drafted"].shape[0]):
        ok = r["valid"][step]
        h.append(np.exp(np.ascontiguousarray(log_h(pos[:, None], k[None, :]).T))[:, ok].ravel())
        passed.append((r["accepted"][step][None, :] >= k[:, None])[:, ok].ravel())
        pos = np.where(ok, pos + r["accepted"][step] + 1, t)
    return np.concatenate(h), np.concatenate(passed)


def success_curve(h: np.ndarray, passed: np.ndarray, bins: int = 20) -> dict:
    """Verification success rate of drafted positions in ``bins`` equal-width bins of their running product H."""
    edges = np.linspace(0, 1, bins + 1)
    idx = np.clip(np.searchsorted(edges, h, side="right") - 1, 0, bins - 1)
    cnt = np.bincount(idx, minlength=bins)
    ok = np.bincount(idx, weights=passed, minlength=bins)
    return {
        "h_lo": edges[:-1],
        "h_hi": edges[1:],
        "count": cnt,
        "success": np.where(cnt > 0, ok / np.maximum(cnt, 1), np.nan),
    }


def mean_draft(conf: np.ndarray, tau: float, d_max: int, boost: float = 0.0, sums: tuple | None = None) -> float:
    """Mean draft length of the running-product rule at ``tau`` over every start position of the streams."""
    return float(running_product_lengths(conf, tau, d_max, boost, sums).mean())


def success_at(conf, acc, tau, d_max, boost: float = 0.0, sums: tuple | None = None) -> tuple[float, float]:
    """(success rate, acceptance) of drafting with the running-product rule at ``tau``.

    Success rate: accepted / drafted over the tokens drafted with H >= tau, the region the success
    curve and its 90 % window describe. The token whose H first falls below tau is drafted too (the
    rule can only stop after seeing its probability) and verified, so the acceptance (accepted /
    drafted over every drafted token) is lower; it is reported beside it."""
    n, t = conf.shape
    lengths = running_product_lengths(conf, tau, d_max, boost, sums)
    r = replay_lengths(acc, lengths)
    v = r["valid"]
    start = np.minimum(r["start"], t - 1).T  # (n, steps)
    log_h = draft_log_products(conf, boost, sums)(start, r["drafted"].T).T
    crossed = (log_h < (np.log(tau) if tau > 0 else -np.inf)) & (r["drafted"] > 0)
    kept = r["drafted"] - crossed
    success = np.minimum(r["accepted"], kept)[v].sum() / max(kept[v].sum(), 1)
    acceptance = r["accepted"][v].sum() / max(r["drafted"][v].sum(), 1)
    return float(success), float(acceptance)


def calibrate_tau(
    conf: np.ndarray,
    acc: np.ndarray,
    d_max: int = 16,
    window: float = 0.2,
    target: float = 0.9,
    grid: int = 21,
    boost: float = 0.0,
) -> dict:
    """Tau by the module's offline procedure; ``feasible`` False (tau 1) when no H window reaches ``target``."""
    sums = running_sums(conf, boost)  # every question below asks of the same streams
    h, passed = running_products(conf, acc, d_max, boost, sums)
    curve = success_curve(h, passed)
    best = None
    for lo in np.round(np.arange(0.0, 1.0 - window + 1e-9, 0.05), 10):
        sel = (h >= lo) & (h <= lo + window)
        if sel.sum() < 20 or passed[sel].mean() < target:
            continue
        avg = mean_draft(conf, lo, d_max, boost, sums)
        if best is None or avg > best[1]:
            best = (lo, avg)
    if best is None:
        return {"tau": 1.0, "window": None, "feasible": False, "curve": curve}
    lo = best[0]
    cands = []
    for tau in np.linspace(lo, lo + window, grid):
        s, a = success_at(conf, acc, tau, d_max, boost, sums)
        cands.append((tau, s, mean_draft(conf, tau, d_max, boost, sums), a))
    feasible = [c for c in cands if c[1] >= target]
    tau, s, avg, a = max(feasible, key=lambda c: c[2]) if feasible else max(cands, key=lambda c: c[1])
    return {
        "tau": float(tau),
        "window": [float(lo), float(lo + window)],
        "feasible": bool(feasible),
        "success_rate": float(s),
        "acceptance": float(a),
        "mean_draft": float(avg),
        "curve": curve,
    }
