"""Is a calibrated acceptance model consistent with what was measured?

Three checks per (pair, category), from streams of the calibrated model against the profile its
measured model was fitted on:

- curve: P(accept | confidence) of the tokens the calibrated model drafts (fixed d, a draft's first
  token at its confidence, later ones at ``later_confidence``, verified tokens only) against the
  measured teacher-forced P(match | draft confidence), in bins one logit wide (confidences pile up near
  1, so equal-width bins would put most data in one) compared where the measured frequency is known to
  +-0.05 (95 % binomial half-width) and the model drafted ``MIN_MODEL`` tokens; the largest gap is
  reported;
- ranking: within a pair, categories ordered by mean adaptive draft length (tau.csv) and by accepted /
  drafted at d = 8 must agree;
- spread: sd of per-request acceptance rates (128 positions), model beside measured.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import special

from adsl.fitting.generator import (
    FIRST,
    acceptance_rate,
    continuation_boost,
    draw_streams,
    fixed_lengths,
    later_confidence,
    replay_lengths,
)
from adsl.fitting.paper_calibration import SPREAD_POSITIONS
from adsl.fitting.pipeline import greedy_sequences, request_rate_sd
from adsl.profiling.traces import Profile

BIN_LOGITS = np.arange(-4.0, 9.0)  # bin edges in logit(confidence), plus 0 and 1
TOLERANCE = 0.05
MIN_MODEL = 1000


def drafted_tokens(conf: np.ndarray, later: np.ndarray, acc: np.ndarray, d: int):
    """(confidence, accepted) of every verified token of fixed-d drafting over the streams (a token after
    a rejected one in the same draft is discarded, not verified)."""
    n, t = conf.shape
    rep = replay_lengths(acc, fixed_lengths(acc.shape, d))
    rows = np.arange(n)
    cs, ok = [], []
    for step in range(rep["drafted"].shape[0]):
        valid, start, accepted = rep["valid"][step], rep["start"][step], rep["accepted"][step]
        for j in range(d):
            src = conf if j == 0 else later
            sel = valid & (accepted >= j)
            cs.append(src[rows, np.minimum(start + j, t - 1)][sel])
            ok.append((accepted > j)[sel])
    return np.concatenate(cs), np.concatenate(ok)


def curve_rows(measured: tuple[np.ndarray, np.ndarray], model: tuple[np.ndarray, np.ndarray]) -> pd.DataFrame:
    """Binned P(accept | confidence), measured beside model, with counts."""
    edges = np.concatenate([[0.0], special.expit(BIN_LOGITS), [1.0]])
    rows = []
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        (mc, mm), (gc, gm) = measured, model
        sm = (mc >= lo) & ((mc < hi) | (hi == 1.0))
        sg = (gc >= lo) & ((gc < hi) | (hi == 1.0))
        p, n = (float(mm[sm].mean()), int(sm.sum())) if sm.any() else (np.nan, 0)
        known = n > 0 and 1.96 * np.sqrt(max(p * (1 - p), 1.0 / n) / n) <= TOLERANCE
        rows.append(
            dict(
                conf_lo=lo,
                conf_hi=hi,
                measured=p,
                model=float(gm[sg].mean()) if sg.any() else np.nan,
                measured_count=int(sm.sum()),
                model_count=int(sg.sum()),
                compared=bool(known and sg.sum() >= MIN_MODEL),
            )
        )
    return pd.DataFrame(rows)


def check_models(
    profile: Profile, models: list[dict], tau: pd.DataFrame, n: int, t: int, seed: int, d: int = 8
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(one row per (pair, category) with the three checks, the binned curves)."""
    summary, curves = [], []
    for m in models:
        conf, acc = draw_streams(m, n, t, np.random.default_rng(seed))
        later = later_confidence(conf, continuation_boost(m))
        c_model, ok_model = drafted_tokens(conf, later, acc, d)
        c_meas, ok_meas = (np.concatenate(a) for a in greedy_sequences(profile, m["category"]))
        curve = curve_rows((c_meas, ok_meas), (c_model, ok_model)).assign(pair=m["pair"], category=m["category"])
        compared = curve[curve.compared]
        _, short = draw_streams(m, n, SPREAD_POSITIONS, np.random.default_rng(seed + 1))
        first = short if short.dtype == bool else (short & FIRST) != 0
        row = tau[(tau.pair == m["pair"]) & (tau.category == m["category"])]
        summary.append(
            dict(
                pair=m["pair"],
                category=m["category"],
                calibration=(m.get("calibration") or {}).get("method", "none"),
                curve_max_gap=float((compared.model - compared.measured).abs().max()),
                curve_bins=int(len(compared)),
                acceptance_d8=acceptance_rate(acc, d),
                # an infeasible tau has no mean draft (tau.csv then lacks the column)
                mean_draft=float(row["mean_draft"].iloc[0]) if len(row) and "mean_draft" in row else np.nan,
                tau=float(row["tau"].iloc[0]) if len(row) else np.nan,
                request_rate_sd_measured=request_rate_sd(profile, m["category"], SPREAD_POSITIONS),
                request_rate_sd_model=float(first.mean(axis=1).std()),
            )
        )
        curves.append(curve)
    out = pd.DataFrame(summary)
    out["request_rate_sd_ratio"] = out.request_rate_sd_model / out.request_rate_sd_measured
    ranks = out.groupby("pair")[["acceptance_d8", "mean_draft"]].rank(method="first")
    out["rank_acceptance"], out["rank_mean_draft"] = (
        ranks.acceptance_d8.astype("Int64"),
        ranks.mean_draft.astype("Int64"),
    )
    out["ranks_agree"] = (
        out.groupby("pair")
        .apply(lambda g: bool((g.rank_acceptance == g.rank_mean_draft).all()), include_groups=False)
        .reindex(out.pair)
        .to_numpy()
    )
    return out.sort_values(["pair", "category"]).reset_index(drop=True), pd.concat(curves, ignore_index=True)
