"""Vectorized draws of acceptance streams from an acceptance model, and vectorized replay.

``draw_streams`` returns, for N requests x T text positions, the draft's confidence and whether the
target accepts the draft token there, in one call with a seeded ``numpy.random.Generator``.

Acceptance is a bool array when acceptance depends on the text position only (as measured: greedy
decoding, teacher-forced). With a within-draft continuation term (``calibration.draft_continuation``,
h != 0) a token's acceptance also depends on whether it is the first of a draft, so each position
carries two outcomes as bit flags (uint8): FIRST (accepted as a draft's first token) and CONTINUED
(accepted when the previous token of the same draft was accepted). ``match_runs`` reads both forms.
``replay_fixed`` / ``replay_running_product`` walk those streams as greedy speculative decoding would.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from scipy import special

from adsl.fitting.distributions import confidence_ppf

QUANTILE_BITS = 12  # confidence is drawn from 4096 equiprobable quantiles of the fitted distribution
FIRST, CONTINUED = np.uint8(1), np.uint8(2)  # bit flags of two-outcome acceptance streams
LOGISTIC_BITS = 16  # acceptance compares log-odds with logistic noise from 65536 equiprobable quantiles
REQUEST_LEVELS = 16  # a request's confidence level: one of 16 equiprobable normal quantiles (small
# tables stay in cache; the levels are rescaled to unit variance so the marginal stays the fitted one)


def request_remap(rho: float) -> np.ndarray:
    """(levels, quantiles) table: a uniform quantile index -> the index of a request at that level
    of the Gaussian-copula random intercept (score sqrt(1 - rho) Z + sqrt(rho) W; marginal kept)."""
    size = 1 << QUANTILE_BITS
    z = special.ndtri((np.arange(size) + 0.5) / size)
    w = special.ndtri((np.arange(REQUEST_LEVELS) + 0.5) / REQUEST_LEVELS)
    w /= np.sqrt(np.mean(w**2))
    score = np.sqrt(1.0 - rho) * z[None, :] + np.sqrt(rho) * w[:, None]
    return np.minimum(special.ndtr(score) * size, size - 1).astype(np.uint16)


def logistic_table() -> np.ndarray:
    """Mid-point quantiles of the standard logistic: u < sigmoid(eta) is logit(u) < eta, so a table
    lookup replaces a uniform draw and a sigmoid per token (acceptance probability within 2^-16)."""
    size = 1 << LOGISTIC_BITS
    return special.logit((np.arange(size) + 0.5) / size).astype(np.float32)


def quantile_table(confidence: dict, warp: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Mid-point quantiles of the selected confidence distribution (values and their logits). ``warp``
    moves probability mass along the distribution: quantile u is read at expit(logit(u) + warp), so
    a positive warp gives more of the confident tokens and fewer of the unsure ones (values unchanged)."""
    size = 1 << QUANTILE_BITS
    u = (np.arange(size) + 0.5) / size
    if warp:
        u = special.expit(special.logit(u) + warp)
    sel = confidence["selected"]
    q = np.clip(confidence_ppf(sel, confidence["candidates"][sel]["params"], u), 1e-6, 1 - 1e-6)
    return q.astype(np.float32), special.logit(q).astype(np.float32)


def draw_streams(
    model: dict,
    n: int,
    t: int,
    rng: np.random.Generator,
    shift: float | None = None,
    continuation: float | None = None,
    applies_to: str | None = None,
):
    """(confidence, accepted) arrays of shape (n, t), float32 and bool (uint8 flags when the
    within-draft continuation term h is not 0), from one seeded generator.

    Confidence: inverse-CDF lookup of uniform 12-bit indices (raw generator bits, so it is cheap), in
    the distribution fitted after a match or after a miss when the model has both
    (``confidence_given_previous``), else in the overall one; with ``confidence_request_effect`` the
    indices of each request are first moved to its own level (``request_remap``).
    Accepted: Bernoulli(sigmoid(a + b logit(c) + g accepted_prev + z_request)), z ~ N(0, s^2), for a
    draft's first token, drawn as logistic noise < log-odds (``logistic_table``); a later token of a
    draft whose previous token was accepted compares the same noise with the log-odds + h (common
    random numbers, so h >= 0 only adds acceptances).

    The calibration's ``shift`` (``applies_to``, default from the model's calibration): ``confidence``
    moves the draft's confidence distribution (``quantile_table``'s warp: more confident tokens where the
    pair accepts more) and acceptance follows the measured curve P(accept | confidence); later tokens of
    a draft are then at logit + h / b (``continuation_boost``, applied by the consumers of confidences).
    ``acceptance`` adds the shift to the curve's intercept and leaves the measured confidences.
    """
    cal = model.get("calibration") or {}
    shift = cal.get("shift", 0.0) if shift is None else shift
    mode = applies_to or cal.get("applies_to", "acceptance")
    warp, shift = (shift, 0.0) if mode == "confidence" else (0.0, shift)
    cond = model.get("confidence_given_previous")
    if cond:
        q_m, lq_m = quantile_table(cond["after_match"], warp)
        q_x, lq_x = quantile_table(cond["after_miss"], warp)
    else:
        q_m, lq_m = quantile_table(model["confidence"], warp)
        q_x, lq_x = q_m, lq_m
    j = model["joint"]
    h = float(cal.get("draft_continuation", 0.0) if continuation is None else continuation)
    # a calibration may scale the request-level heterogeneity (adsl.fitting.paper_calibration.scaled)
    scale = float(cal.get("heterogeneity_scale", 1.0))
    rho = float(model.get("confidence_request_effect", {}).get("rho", 0.0))
    if scale != 1.0:
        j = {**j, "s": float(j["s"]) * scale}
        rho = min(rho * scale**2, 0.99)
    # one flat table per quantity: [request level][previous position missed][quantile index]
    remap = request_remap(rho) if rho > 0 else np.arange(1 << QUANTILE_BITS, dtype=np.uint16)[None, :]
    q = np.concatenate([q_m[remap], q_x[remap]], axis=1).ravel()
    g = np.float32(j["g"])
    # the text-level dependence g is folded into the after-match half (the first position: removed)
    lq = np.concatenate([lq_m[remap] * np.float32(j["b"]) + g, lq_x[remap] * np.float32(j["b"])], axis=1).ravel()
    level = rng.integers(0, REQUEST_LEVELS, n) if rho > 0 else np.zeros(n, dtype=np.int64)
    offset = level << (QUANTILE_BITS + 1)
    z = rng.normal(j["a"] + shift, j["s"], n).astype(np.float32)
    acc = np.empty((t, n), dtype=bool)
    cont = np.empty((t, n) if h != 0.0 else (1, 1), dtype=bool)  # a draft's later token (only with h)
    conf = np.empty((t, n), dtype=np.float32)
    logistic = logistic_table()
    words = (n + 1) // 2
    # One raw draw per row and position gives 16 bits for the confidence quantile and 16 for the logistic
    # noise; positions are drawn a chunk at a time (the generator's words in the order a position-by-
    # position draw takes them), so nothing (t, n) but the outputs is ever held.
    chunk = max(1, min(t, (1 << 22) // max(words, 1)))
    for k0 in range(0, t, chunk):
        k1 = min(t, k0 + chunk)
        bits = rng.bit_generator.random_raw(words * (k1 - k0)).reshape(k1 - k0, words).view(np.uint16)
        _positions(bits, k0, q, lq, offset, z, g, np.float32(h), h != 0.0, logistic, conf, acc, cont)
    if h == 0.0:
        return conf.T, acc.T
    flags = acc.view(np.uint8) * FIRST | cont.view(np.uint8) * CONTINUED
    return conf.T, flags.T


@njit(cache=True)
def _positions(bits, k0, q, lq, offset, z, g, h, continued, logistic, conf, acc, cont):
    """Positions k0.. of ``draw_streams`` from their raw bits (a row per position): the quantile index
    (its after-miss half when the previous position missed), the confidence, and acceptance as logistic
    noise below the log-odds (and below the log-odds + h for a draft's later token); float32 arithmetic in
    the order the vectorized form did it."""
    n = offset.size
    mask = (1 << QUANTILE_BITS) - 1
    for r in range(bits.shape[0]):
        k = k0 + r
        for i in range(n):
            idx = bits[r, i] & mask
            if k and not acc[k - 1, i]:
                idx |= 1 << QUANTILE_BITS
            at = offset[i] + idx
            eta = lq[at]
            conf[k, i] = q[at]
            if not k:
                eta -= g
            eta += z[i]
            noise = logistic[bits[r, n + i]]
            if continued:
                cont[k, i] = noise < eta + h
            acc[k, i] = noise < eta


def continuation_boost(model: dict) -> float:
    """Logit added to the confidence of a draft's later tokens (their predecessor in the same draft
    accepted): h / b when the calibration moves confidences with acceptance, else 0."""
    cal = model.get("calibration") or {}
    if cal.get("applies_to") != "confidence":
        return 0.0
    return float(cal.get("draft_continuation", 0.0)) / float(model["joint"]["b"])


def later_confidence(conf: np.ndarray, boost: float) -> np.ndarray:
    """Confidence of a draft's later tokens: logit moved by ``boost`` (the same array when 0)."""
    if not boost:
        return conf
    c = np.clip(conf.astype(np.float64), 1e-7, 1 - 1e-7)
    return special.expit(special.logit(c) + boost).astype(conf.dtype)


def as_flags(acc: np.ndarray) -> np.ndarray:
    """Bit-flag form of any acceptance stream (a bool stream's outcome holds for both)."""
    return acc * (FIRST | CONTINUED) if acc.dtype == bool else acc


def capped_dtype(cap: int) -> type:
    """The type of whole numbers 0 .. ``cap``: uint8 where ``cap`` fits in a byte, else int64 (a capped stream the
    event loop reads: ``match_runs``' capped runs, ``adsl.sim.core.narrow``'s draft lengths)."""
    return np.uint8 if cap <= np.iinfo(np.uint8).max else np.int64


def match_runs(acc: np.ndarray, continuing: bool = False, cap: int | None = None) -> np.ndarray:
    """runs[r, i] = tokens accepted from a draft of request r that starts at position i (for bool
    streams, the distance from i to the first rejected position at or after i). For flagged streams the
    first token must pass FIRST and later ones CONTINUED; ``continuing``: the draft continues an accepted
    one (every token uses CONTINUED). uint16 while the streams are shorter than 65,535 positions (a run is at
    most the stream's length; half the memory traffic of int32), else int32. ``cap``: every run at most
    ``cap`` (for a reader that takes at most ``cap`` tokens of a draft), of ``capped_dtype(cap)``."""
    n, t = acc.shape
    flagged = acc.dtype != bool
    dtype = np.uint16 if t < np.iinfo(np.uint16).max else np.int32
    if cap is not None:
        dtype = capped_dtype(cap)
    out = np.empty((n, t), dtype)
    _match_runs(np.ascontiguousarray(acc), flagged, continuing, t if cap is None else cap, out)
    return out


@njit(cache=True, nogil=True)
def _match_runs(acc, flagged, continuing, cap, out):
    """Each stream from its end: the run of CONTINUED (bool: accepted) positions after position i, one
    more where position i passes (FIRST for a flagged draft's first token), at most ``cap``."""
    n, t = acc.shape
    for r in range(n):
        after = 0  # tokens passing as later tokens of a draft, from position i + 1 on
        for i in range(t - 1, -1, -1):
            x = acc[r, i]
            if not flagged:
                after = after + 1 if x else 0
                out[r, i] = min(after, cap)
                continue
            here = after + 1 if x & CONTINUED else 0
            out[r, i] = min(here if continuing else (after + 1 if x & FIRST else 0), cap)
            after = here


def replay_lengths(acc: np.ndarray, lengths: np.ndarray) -> dict[str, np.ndarray]:
    """Greedy speculative decoding over every stream at once. ``lengths[r, i]`` is the draft length a
    request starting a draft at position i uses. Returns per-step arrays (steps x n) of drafted and
    accepted tokens and the start position, with steps whose draft window passes the end of the stream
    marked invalid (and, once a stream has ended, steps that draft nothing at its last position)."""
    n, t = acc.shape
    runs = match_runs(acc)
    if n == 0 or t == 0:
        empty = np.array([])
        return {"drafted": empty, "accepted": empty.copy(), "valid": empty.copy(), "start": empty.copy()}
    lengths = np.ascontiguousarray(lengths)
    out = _replay_arrays(0, n, t, runs.dtype, lengths.dtype)
    out = _replay_arrays(_replay(runs, lengths, *out)[0], n, t, runs.dtype, lengths.dtype)
    _replay(runs, lengths, *out)
    return dict(zip(("drafted", "accepted", "valid", "start"), out, strict=True))


def _replay_arrays(steps: int, n: int, t: int, runs_dtype, lengths_dtype) -> tuple[np.ndarray, ...]:
    """The (steps, n) outputs of ``_replay``: drafted, accepted, valid (zero-filled) and start (t - 1)."""
    return (
        np.zeros((steps, n), dtype=lengths_dtype),
        np.zeros((steps, n), dtype=np.result_type(runs_dtype, lengths_dtype)),
        np.zeros((steps, n), dtype=bool),
        np.full((steps, n), t - 1, dtype=np.int64),
    )


@njit(cache=True)
def _replay(runs, lengths, drafted, accepted, valid, start):
    """Each stream's steps into the (steps, n) outputs; returns the most steps a stream took and the
    accepted and drafted tokens of the valid steps (integer totals). With 0-row outputs it only counts
    (the first of the two calls ``replay_lengths`` makes, and ``acceptance_rates``)."""
    n, t = runs.shape
    write = drafted.shape[0] > 0
    most, total_accepted, total_drafted = 0, np.int64(0), np.int64(0)  # int64 uncompiled too (uint16 runs)
    for r in range(n):
        pos, k = 0, 0
        while pos < t:
            d = lengths[r, pos]
            if write:
                start[k, r] = pos
            if pos + d <= t:
                a = min(runs[r, pos], d)
                if write:
                    drafted[k, r] = d
                    accepted[k, r] = a
                    valid[k, r] = True
                total_accepted += a
                total_drafted += d
                pos = pos + a + 1
            else:
                pos = t
            k += 1
        most = max(most, k)
    return most, total_accepted, total_drafted


def fixed_lengths(shape, d: int) -> np.ndarray:
    """Draft length ``d`` at every position: the fixed-length policy as a lengths array for ``replay_lengths``."""
    return np.full(shape, d, dtype=np.int64)


def log_running_sums(conf: np.ndarray) -> np.ndarray:
    """(n, t + 1) cumulative sums of log confidence: log H of positions i..j-1 is csum[j] - csum[i]."""
    logc = np.log(np.clip(conf.astype(np.float64), 1e-300, 1.0))
    return np.concatenate([np.zeros((conf.shape[0], 1)), np.cumsum(logc, axis=1)], axis=1)


def running_sums(conf: np.ndarray, boost: float = 0.0) -> tuple[np.ndarray, np.ndarray | None]:
    """The ``log_running_sums`` of the confidences (a draft's first token) and of ``later_confidence``
    (its later tokens; None when ``boost`` is 0): what ``draft_log_products`` and
    ``running_product_lengths`` read, computed once for callers that ask many questions of one stream set."""
    return log_running_sums(conf), log_running_sums(later_confidence(conf, boost)) if boost else None


def draft_log_products(conf: np.ndarray, boost: float = 0.0, sums: tuple | None = None):
    """A function (start, k) -> log of the running product H over the first k tokens of drafts that
    start at ``start`` (a row vector for every stream, or one column per stream: (n, m)): the first
    token at its confidence, later ones at ``later_confidence``. ``sums``: ``running_sums(conf, boost)``."""
    n, t = conf.shape
    csum, later = sums or running_sums(conf, boost)

    def at(sums, idx):
        if np.ndim(idx) == 1:  # one start per column, the same for every stream: plain column indexing
            return sums[:, np.minimum(idx, t)]
        idx = np.minimum(idx, t)
        return np.take_along_axis(sums, np.broadcast_to(idx, (n, idx.shape[1])), axis=1)

    def log_h(start, k):
        if later is None:
            return at(csum, start + k) - at(csum, start)
        return at(csum, start + 1) - at(csum, start) + at(later, start + k) - at(later, start + 1)

    return log_h


def running_product_lengths(
    conf: np.ndarray, tau: float, d_max: int, boost: float = 0.0, sums: tuple | None = None
) -> np.ndarray:
    """Vectorized form of adsl.profiling.replay.running_product_lengths for (n, t) streams; ``boost``:
    the continuation term of a calibration that moves confidences (``continuation_boost``); ``sums``:
    ``running_sums(conf, boost)``."""
    csum, later = sums or running_sums(conf, boost)
    log_tau = np.log(tau) if tau > 0 else -np.inf
    return _first_below(csum, csum if later is None else later, log_tau, d_max, later is not None)


@njit(cache=True)
def _first_below(csum, later, log_tau, d_max, boosted):
    """Per stream and start, the first k <= d_max at which the draft's log running product (a difference of
    the running sums, in ``draft_log_products``' order of operations) falls below ``log_tau``; else as
    far as d_max or the stream's end. A loop rather than d_max whole-array passes: most drafts stop long
    before d_max."""
    n, t = csum.shape[0], csum.shape[1] - 1
    out = np.empty((n, t), np.int64)
    for i in range(n):
        for s in range(t):
            o = min(d_max, t - s)
            for k in range(1, min(d_max, t - s) + 1):
                if boosted:
                    h = csum[i, s + 1] - csum[i, s] + later[i, s + k] - later[i, s + 1]
                else:
                    h = csum[i, s + k] - csum[i, s]
                if h < log_tau:
                    o = k
                    break
            out[i, s] = o
    return out


def acceptance_rate(acc: np.ndarray, d: int) -> float:
    """Accepted / drafted tokens of fixed-``d`` speculative decoding replayed over the streams ``acc``."""
    return float(acceptance_rates(acc, [d])[0])


def acceptance_rates(acc: np.ndarray, lengths) -> np.ndarray:
    """``acceptance_rate`` at each fixed draft length of ``lengths``, from one ``match_runs`` of the streams:
    the integer totals of ``replay_lengths``' valid steps (its walk counting only, d read from a broadcast
    view rather than a (streams x positions) array), divided as numpy divides them."""
    runs = match_runs(acc)
    n, t = runs.shape
    out = np.empty(len(lengths))
    for k, d in enumerate(lengths):
        every = np.broadcast_to(np.int64(d), (n, t))
        _, accepted, drafted = _replay(runs, every, *_replay_arrays(0, n, t, runs.dtype, every.dtype))
        out[k] = np.int64(accepted) / np.int64(drafted)
    return out
