"""Map measured acceptance models onto a paper pair: one calibration parameter per category plus,
optionally, one shape parameter per pair.

Per category: a shift of the calibration curve's intercept (``joint.a``). It moves every draft token's
acceptance log-odds by the same amount and leaves the measured shape (confidence spread, request
heterogeneity, dependence along the text) as profiled.

Per pair: the within-draft continuation term h (``draft_continuation``, see adsl.fitting.generator):
the extra log-odds of a draft token whose predecessor in the same draft was accepted. Greedy
teacher-forced profiles have h = 0 by construction; a shift alone then sets the level but not the
decline with d, and the paper's Fig. 4a declines more slowly than any shift of our pair gives (max
error 0.06-0.07). h is shared by the pair's categories, so the pair gets one shape and each category
one level: 4 numbers for the 9 Fig. 4a values. Both are chosen by least squares on streams drawn with
fixed seeds (common random numbers, so the loss is smooth in both).

Consistency (``applies_to: confidence``, the default): the draft of the paper's pair is taken to be as
well calibrated as the measured one, so the per-category level moves its confidence distribution (more
or fewer confident tokens: a warp of the quantiles, values as measured) and acceptance follows through
the measured curve P(accept | confidence); the pair's h also raises a draft's later tokens' confidence
by h / b in logit space. A category the pair accepts more gets a more confident draft and longer
adaptive drafts. ``acceptance`` moves the curve's intercept instead and keeps the measured confidences
(the previous model). A uniform logit shift of every confidence was tried too: it keeps the bimodal
shape of our summarization profile (copied text at confidence ~1), so that category kept drafting
longest while accepting least; moving the share of confident tokens fits Fig. 4a closer as well.

Moving the level moves requests along the sigmoid, which widens or narrows the spread of their
acceptance rates; with ``spread_targets`` each
category also gets one heterogeneity scale (the request effect's sd and the confidence copula's
between-request share, by one factor) so the per-request spread stays the measured one. All of these are
fitted to Fig. 4a and to our own profile, nothing else.
"""

from __future__ import annotations

import copy

import numpy as np
from scipy import optimize

from adsl.fitting.generator import FIRST, acceptance_rates, draw_streams
from adsl.fitting.modelfile import SCALE_RANGE, SHIFT_RANGE

SPREAD_POSITIONS = 128  # positions per request for the per-request rate spread (the profile's minimum)


def scaled(model: dict, scale: float) -> dict:
    """The model with its request-level heterogeneity scaled: the acceptance random effect's sd by
    ``scale`` and the confidence copula's between-request share by scale^2."""
    out = copy.deepcopy(model)
    out["joint"]["s"] = float(model["joint"]["s"]) * scale
    if "confidence_request_effect" in out:
        rho = float(out["confidence_request_effect"].get("rho", 0.0))
        out["confidence_request_effect"]["rho"] = min(rho * scale**2, 0.99)
    return out


def request_rate_sd(model: dict, shift: float, continuation: float, n: int, seed: int, applies_to: str) -> float:
    """Spread (sd) of per-request acceptance rates: the share of a request's ``SPREAD_POSITIONS``
    positions whose draft token the target accepts (as a draft's first token, as the profile measures)."""
    rng = np.random.default_rng(seed)
    _, acc = draw_streams(
        model, n, SPREAD_POSITIONS, rng, shift=shift, continuation=continuation, applies_to=applies_to
    )
    first = acc if acc.dtype == bool else (acc & FIRST) != 0
    return float(first.mean(axis=1).std())


def _fit_scale(model, target_sd, shift, continuation, n, seed, applies_to) -> float:
    """Heterogeneity scale in [0, 3] giving the target spread (the nearer bound when out of reach)."""

    def gap(scale):
        return request_rate_sd(scaled(model, scale), shift, continuation, n, seed, applies_to) - target_sd

    lo, hi = SCALE_RANGE
    if gap(lo) >= 0:
        return lo
    if gap(hi) <= 0:
        return hi
    return float(optimize.brentq(gap, lo, hi, xtol=1e-3))


def rates_for_shift(
    model: dict,
    shift: float,
    lengths,
    n: int,
    t: int,
    seed: int,
    continuation: float = 0.0,
    applies_to: str = "acceptance",
) -> np.ndarray:
    """Acceptance rate at each of ``lengths`` on streams drawn with ``shift`` (seeded: common random numbers)."""
    rng = np.random.default_rng(seed)
    _, acc = draw_streams(model, n, t, rng, shift=shift, continuation=continuation, applies_to=applies_to)
    return acceptance_rates(acc, lengths)


def _fit_shift(model, target, n, t, seed, continuation, applies_to="acceptance") -> tuple[float, float]:
    """(shift, squared-error loss) at a given h."""
    lengths = sorted(target)
    goal = np.array([target[d] for d in lengths])

    def loss(shift):
        rates = rates_for_shift(model, shift, lengths, n, t, seed, continuation, applies_to)
        return float(((rates - goal) ** 2).sum())

    res = optimize.minimize_scalar(loss, bounds=SHIFT_RANGE, method="bounded", options={"xatol": 1e-3})
    return float(res.x), float(res.fun)


def _summary(model, target, shift, n, t, seed, continuation, applies_to="acceptance") -> dict:
    lengths = sorted(target)
    goal = np.array([target[d] for d in lengths])
    rates = rates_for_shift(model, shift, lengths, n, t, seed, continuation, applies_to)
    return {
        "shift": shift,
        "draft_continuation": continuation,
        "target_rates": {str(d): float(v) for d, v in zip(lengths, goal, strict=True)},
        "achieved_rates": {str(d): float(v) for d, v in zip(lengths, rates, strict=True)},
        "max_abs_error": float(np.max(np.abs(rates - goal))),
        "streams": n,
        "positions": t,
        "seed": seed,
    }


def calibrate_shift(
    model: dict, target: dict[int, float], n: int = 2000, t: int = 256, seed: int = 0, continuation: float = 0.0
) -> dict:
    """The shift (at a given h) that brings accepted/drafted at the target's draft lengths closest."""
    shift, _ = _fit_shift(model, target, n, t, seed, continuation)
    return _summary(model, target, shift, n, t, seed, continuation)


def calibrate_pair(
    models: dict[str, dict],
    targets: dict[str, dict[int, float]],
    n: int = 2000,
    t: int = 256,
    seed: int = 0,
    continuation: float | str = "fit",
    bounds: tuple[float, float] = (0.0, 8.0),
    applies_to: str = "confidence",
    spread_targets: dict[str, float] | None = None,
) -> dict[str, dict]:
    """Per-category calibrations sharing one h: fitted within ``bounds`` ("fit") or given (a number).
    ``spread_targets``: per category, the measured sd of per-request acceptance rates to keep (each
    category's heterogeneity scale and shift are then refitted twice in turn at the pair's h).
    Returns {category: calibration}; each carries the pair-level h and the joint loss."""
    if applies_to not in ("confidence", "acceptance"):
        raise ValueError(f"calibration applies_to must be 'confidence' or 'acceptance', got {applies_to!r}")
    cats = sorted(targets)

    def shifts(h):
        return {c: _fit_shift(models[c], targets[c], n, t, seed, h, applies_to) for c in cats}

    if continuation == "fit":
        res = optimize.minimize_scalar(
            lambda h: sum(v[1] for v in shifts(h).values()), bounds=bounds, method="bounded", options={"xatol": 1e-2}
        )
        h = float(res.x)
    else:
        h = float(continuation)
    fitted = shifts(h)
    scale = dict.fromkeys(cats, 1.0)
    for c in cats if spread_targets else []:
        for _ in range(2):  # the spread depends on the level and the level a little on the spread
            scale[c] = _fit_scale(models[c], spread_targets[c], fitted[c][0], h, n, seed, applies_to)
            fitted[c] = _fit_shift(scaled(models[c], scale[c]), targets[c], n, t, seed, h, applies_to)
    loss = sum(v[1] for v in fitted.values())
    out = {}
    for c in cats:
        m = scaled(models[c], scale[c])
        out[c] = {
            **_summary(m, targets[c], fitted[c][0], n, t, seed, h, applies_to),
            "pair_loss": loss,
            "draft_continuation_source": "fitted jointly to all categories" if continuation == "fit" else "given",
            "applies_to": applies_to,
            "heterogeneity_scale": scale[c],
            "request_rate_sd": {
                "measured": None if spread_targets is None else float(spread_targets[c]),
                "model": request_rate_sd(m, fitted[c][0], h, n, seed, applies_to),
                "unscaled_model": request_rate_sd(models[c], fitted[c][0], h, n, seed, applies_to),
            },
        }
    return out
