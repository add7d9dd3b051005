"""The joint acceptance model the generator samples from, fitted by maximum marginal likelihood.

P(match_t) = sigmoid(a + shift + b * logit(c_t) + g * match_{t-1} + z_r),  z_r ~ Normal(0, s^2)

c_t is the draft's confidence (its probability of the token it proposes), z_r a per-request random
effect (request-to-request heterogeneity of the acceptance rate), g the first-order dependence along
the text. ``shift`` is the one calibration parameter per category used to map a measured pair onto a
paper pair. The random effect is integrated out with Gauss-Hermite quadrature.
"""

from __future__ import annotations

import numpy as np
from scipy import optimize, special

from adsl.distinct import per_distinct
from adsl.fitting.distributions import clip01, need

GH_NODES = 32


def pad(sequences: list[np.ndarray], fill=0.0) -> tuple[np.ndarray, np.ndarray]:
    """Ragged sequences as one (n, longest) array padded with ``fill``, and the mask of the real entries."""
    n = max(len(s) for s in sequences)
    out = np.full((len(sequences), n), fill, dtype=float)
    mask = np.zeros((len(sequences), n), dtype=bool)
    for i, s in enumerate(sequences):
        out[i, : len(s)] = s
        mask[i, : len(s)] = True
    return out, mask


def _marginal_nll(theta, L, M, prev, mask, nodes, weights):
    a, b, log_s, g = theta
    s = np.exp(log_s)
    eta = a + b * L + g * prev  # (R, T)
    z = np.sqrt(2.0) * s * nodes  # (J,)
    e = eta[None] + z[:, None, None]  # (J, R, T)
    ll = np.where(mask[None], M[None] * -np.logaddexp(0, -e) + (1 - M[None]) * -np.logaddexp(0, e), 0.0)
    per_req = special.logsumexp(ll.sum(axis=2) + np.log(weights / np.sqrt(np.pi))[:, None], axis=0)
    return -per_req.sum()


def fit_joint(confidence: list[np.ndarray], match: list[np.ndarray]) -> dict:
    """Fit (a, b, s, g) on per-request sequences of draft confidence and draft/target match."""
    need(len(match), 3, "joint acceptance model (requests)")
    need(sum(len(m) for m in match), 100, "joint acceptance model (positions)")
    C, mask = pad([clip01(c) for c in confidence], 0.5)
    M, _ = pad([np.asarray(m, float) for m in match])
    L = special.logit(C)
    prev = np.zeros_like(M)
    prev[:, 1:] = M[:, :-1]
    nodes, weights = np.polynomial.hermite.hermgauss(GH_NODES)
    args = (L, M, prev, mask, nodes, weights)
    res = optimize.minimize(_marginal_nll, np.array([0.0, 1.0, np.log(0.5), 0.0]), args=args, method="L-BFGS-B")
    a, b, log_s, g = res.x
    hess_inv = res.hess_inv.todense() if hasattr(res.hess_inv, "todense") else np.asarray(res.hess_inv)
    se = np.sqrt(np.clip(np.diag(hess_inv), 0, None))
    return {
        "a": float(a),
        "b": float(b),
        "s": float(np.exp(log_s)),
        "g": float(g),
        "stderr": {"a": float(se[0]), "b": float(se[1]), "log_s": float(se[2]), "g": float(se[3])},
        "loglik": float(-res.fun),
        "converged": bool(res.success),
        "requests": int(len(match)),
        "positions": int(mask.sum()),
    }


def calibration_curve(joint: dict, confidence, shift: float = 0.0, prev_rate: float = 0.0) -> np.ndarray:
    """P(match | confidence), averaged over the request effect and over the previous position, which
    matched with probability ``prev_rate`` (0: the curve after a miss, e.g. a draft's first token).

    Evaluated once per distinct confidence (``adsl.distinct``): the same values to the bit."""
    return per_distinct(lambda c: _curve(joint, c, shift, prev_rate), confidence)


def _curve(joint: dict, confidence, shift: float, prev_rate: float) -> np.ndarray:
    L = special.logit(clip01(confidence))
    nodes, weights = np.polynomial.hermite.hermgauss(GH_NODES)
    z = np.sqrt(2.0) * joint["s"] * nodes
    eta = joint["a"] + shift + joint["b"] * np.asarray(L)[..., None] + z
    if prev_rate == 0.0 or prev_rate == 1.0:  # one of the two terms is 0 x a probability: the same bits
        p = special.expit(eta + joint["g"] if prev_rate else eta)
    else:
        p = prev_rate * special.expit(eta + joint["g"]) + (1 - prev_rate) * special.expit(eta)
    return (p * weights / np.sqrt(np.pi)).sum(axis=-1)


def binned_calibration(confidence, match, bins: int = 10) -> dict:
    """Observed match frequency in confidence quantile bins (for checking the fitted curve)."""
    c, m = clip01(confidence), np.asarray(match, float)
    edges = np.unique(np.quantile(c, np.linspace(0, 1, bins + 1)))
    idx = np.clip(np.searchsorted(edges, c, side="right") - 1, 0, len(edges) - 2)
    centers, freq, count = [], [], []
    for k in range(len(edges) - 1):
        sel = idx == k
        if sel.any():
            centers.append(float(c[sel].mean()))
            freq.append(float(m[sel].mean()))
            count.append(int(sel.sum()))
    return {"confidence": centers, "frequency": freq, "count": count}
