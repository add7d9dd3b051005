"""Exact offline replay of greedy speculative decoding from teacher-forced position records.

With greedy decoding a draft token is accepted iff it equals the target's argmax, and an accepted
token leaves both models on the target's own text; so from any start position the accepted count is
the run of consecutive draft/target matches, capped by the draft length. Any stopping rule that
depends only on the draft's confidence (fixed length, the paper's running product H_t < tau) replays
exactly. Arrays in, arrays out; no state.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def match_runs(match: np.ndarray) -> np.ndarray:
    """runs[i] = number of consecutive True values of ``match`` starting at i."""
    runs = np.zeros(len(match) + 1, dtype=np.int64)
    for i in range(len(match) - 1, -1, -1):  # one pass, O(n)
        runs[i] = runs[i + 1] + 1 if match[i] else 0
    return runs[:-1]


def fixed_length_lengths(n: int, d: int) -> np.ndarray:
    """Draft length ``d`` from each of ``n`` start positions (the fixed-length stopping rule)."""
    return np.full(n, d, dtype=np.int64)


def running_product_lengths(draft_top1: np.ndarray, tau: float, d_max: int) -> np.ndarray:
    """Draft length from every start position under "stop as soon as H_t = p_1...p_t < tau" (the token
    that crosses tau is still drafted), capped at ``d_max``."""
    n = len(draft_top1)
    logp = np.log(np.clip(draft_top1, 1e-300, 1.0))
    csum = np.concatenate([[0.0], np.cumsum(logp)])
    out = np.empty(n, dtype=np.int64)
    log_tau = np.log(tau) if tau > 0 else -np.inf
    for i in range(n):
        t = np.arange(1, min(d_max, n - i) + 1)
        below = csum[i + t] - csum[i] < log_tau
        out[i] = t[np.argmax(below)] if below.any() else min(d_max, n - i)
    return out


def replay(match: np.ndarray, lengths: np.ndarray) -> pd.DataFrame:
    """Walk the generated text: at start i draft lengths[i] tokens, accept the matching run, emit
    accepted + 1. Only steps whose whole draft window lies inside the records are returned."""
    runs = match_runs(np.asarray(match, dtype=bool))
    n = len(runs)
    rows, i, step = [], 0, 0
    while i < n:
        d = int(lengths[i])
        if i + d > n:
            break
        acc = int(min(runs[i], d))
        rows.append((step, i, d, acc, acc + 1))
        i += acc + 1
        step += 1
    return pd.DataFrame(rows, columns=["step", "start", "drafted", "accepted", "emitted"])


def replay_profile(positions: pd.DataFrame, requests: pd.DataFrame, policy: str = "fixed", **kw) -> pd.DataFrame:
    """Replay every greedy request of a profile under ``policy`` ('fixed': d; 'running_product': tau,
    d_max). Returns one row per replayed step with request_id and category."""
    cats = requests.set_index("request_id")["category"]
    out = []
    for rid, grp in positions.sort_values(["request_id", "pos"]).groupby("request_id", sort=True):
        if policy == "fixed":
            lengths = fixed_length_lengths(len(grp), kw["d"])
        elif policy == "running_product":
            lengths = running_product_lengths(grp["draft_top1"].to_numpy(), kw["tau"], kw["d_max"])
        else:
            raise ValueError(f"unknown policy {policy!r}")
        steps = replay(grp["match"].to_numpy(), lengths)
        out.append(steps.assign(request_id=rid, category=cats[rid]))
    return pd.concat(out, ignore_index=True)


def acceptance_vs_length(positions: pd.DataFrame, requests: pd.DataFrame, lengths=(4, 8, 12)) -> pd.DataFrame:
    """Acceptance rate (accepted / drafted) and tokens per verification by category and fixed d."""
    rows = []
    for d in lengths:
        steps = replay_profile(positions, requests, "fixed", d=d)
        for cat, g in steps.groupby("category", sort=True):
            rows.append(
                dict(
                    category=cat,
                    draft_length=d,
                    acceptance_rate=g.accepted.sum() / g.drafted.sum(),
                    tokens_per_verification=g.emitted.mean(),
                    mean_accepted=g.accepted.mean(),
                    steps=len(g),
                    requests=g.request_id.nunique(),
                )
            )
    return pd.DataFrame(rows)
