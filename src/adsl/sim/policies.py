"""Draft-length policies: how many tokens a request drafts from each position of its streams.

A policy sees what a real serving system can observe when it decides (the draft's confidences and
entropies, the request's acceptance so far, the batch, the cost model's pass times); only ``oracle``
reads the acceptance streams, as the yardstick. Each returns an (X, N, T) integer array: the draft
length of a request that starts drafting at each position, in [0, cap]; 0 drafts nothing (the pass
verifies one token, a plain decode step for that request). Learned thresholds (``rejection_risk``,
``entropy_bound``) come from ``fit_threshold`` on training streams; ``running_product`` keeps the
paper's own tau procedure (``adsl.fitting.tau``).

Registry: ``POLICIES`` name -> function(PolicyInputs, cap) -> lengths; adding one is one function
plus one line.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from numba import njit

from adsl.fitting.generator import match_runs, running_product_lengths
from adsl.fitting.joint_model import calibration_curve

GOODPUT_PRIOR = 8.0  # prior strength (tokens) of a request's own acceptance estimate in ``goodput``


@dataclass(frozen=True)
class PolicyCosts:
    """The serial cost model a policy may use, per request of a batch: ``fixed`` seconds per
    verification step (the pass over one token a request) and ``per_token`` seconds per drafted token
    (one draft-pass share plus one more token in the verification)."""

    fixed: float
    per_token: float

    def step_time(self, drafted):
        """Seconds per request of a step that drafts ``drafted`` tokens."""
        return self.fixed + self.per_token * np.asarray(drafted, dtype=float)


@dataclass(frozen=True)
class PolicyInputs:
    """What a policy may read for one configuration point, arrays (X, N, T) over requests' positions."""

    confidence: np.ndarray  # a draft's first token's confidence at each position
    later: np.ndarray  # the confidence of a draft's later tokens (a calibration's continuation term)
    categories: np.ndarray  # (N,) category of each request
    batch: int  # slots of the point (the active batch in steady state)
    d: int  # the system's draft length d (fixed baselines; the cap of the adaptive rules)
    entropy: np.ndarray | None = None  # the draft distribution's entropy at each position (nats)
    accept: np.ndarray | None = None  # acceptance streams: the oracle only
    # predicted P(accept) of each position as a draft's first token and as a later one (``predicted``)
    accept_prob: tuple[np.ndarray, np.ndarray] | None = None
    costs: PolicyCosts | None = None
    taus: dict = field(default_factory=dict)  # running_product: tau per category
    boosts: dict = field(default_factory=dict)  # running_product: later-token logit term per category
    thresholds: dict = field(default_factory=dict)  # learned rules: threshold per category
    schedule: dict = field(default_factory=dict)  # batch_schedule: {batch at least: d}
    prior: dict = field(default_factory=dict)  # goodput: each category's mean acceptance (prior)


def _per_category(inputs: PolicyInputs, fn) -> np.ndarray:
    """``fn(category, index array)`` -> lengths of those requests, assembled into (X, N, T)."""
    out = np.empty(inputs.confidence.shape, dtype=np.int64)
    for c in np.unique(inputs.categories):
        idx = np.flatnonzero(inputs.categories == c)
        out[:, idx, :] = fn(str(c), idx)
    return out


def product_lengths(log_first: np.ndarray, log_later: np.ndarray, log_tau: float, cap: int) -> np.ndarray:
    """(..., T) lengths of a rule that drafts token after token while the running product of per-token
    values stays at or above tau, and drafts the token that crosses it (the rule sees a token's value only
    once it is drafted): the first token of a draft at ``log_first``, later ones at ``log_later``."""
    t = log_first.shape[-1]
    flat_f = np.ascontiguousarray(log_first.reshape(-1, t), dtype=np.float64)
    flat_l = np.ascontiguousarray(log_later.reshape(-1, t), dtype=np.float64)
    return _product_lengths(flat_f, flat_l, float(log_tau), int(cap)).reshape(log_first.shape)


@njit(cache=True)
def _product_lengths(flat_f, flat_l, log_tau, cap):
    """Per row and start s, the first k <= cap with first[s] + later[s+1] + ... + later[s+k-1] < log_tau
    (a difference of running sums, added in the order numpy's cumsum adds), else cap or the rest."""
    rows, t = flat_f.shape
    out = np.empty((rows, t), np.int64)
    csum = np.zeros(t + 1)
    for r in range(rows):
        for i in range(t):
            csum[i + 1] = csum[i] + flat_l[r, i]
        for s in range(t):
            length = min(cap, t - s)
            for k in range(1, min(cap, t - s) + 1):
                if flat_f[r, s] + csum[s + k] - csum[s + 1] < log_tau:
                    length = k
                    break
            out[r, s] = length
    return out


def fixed(inputs: PolicyInputs, cap: int) -> np.ndarray:
    """Draft d tokens every time: the paper's GPU-SD / PIM-SD baselines (Leviathan et al., ICML 2023).
    ``cap`` is d, or 2 d in a pipeline whose pool takes d-token entries and keeps drafting while one is
    verified (the next entry's d tokens are drafted eagerly)."""
    return np.full(inputs.confidence.shape, cap, dtype=np.int64)


def schedule_length(schedule: dict, batch: int) -> int:
    """The draft length a ``{batch at most: d}`` table gives ``batch``; 0 (no speculation) above its
    largest key (TensorRT-LLM's ``draft_len_schedule`` semantics)."""
    if not schedule:
        raise ValueError("batch_schedule needs a schedule {batch at most: d}")
    table = sorted((int(k), int(v)) for k, v in schedule.items())
    return next((d for most, d in table if batch <= most), 0)


def batch_schedule(inputs: PolicyInputs, cap: int) -> np.ndarray:
    """d as a function of the active batch from a {batch at most: d} table: TensorRT-LLM's
    ``draft_len_schedule`` (NVIDIA/TensorRT-LLM PR 10860; speculation off above the largest batch) and
    vLLM's batch-size-dependent speculation. The point's system runs with d set to the table's value
    (``adsl.sim.experiment.experiment_points``), so a draft is its full ``cap``, or nothing at d = 0."""
    d = schedule_length(inputs.schedule, inputs.batch)
    return np.full(inputs.confidence.shape, cap if d > 0 else 0, dtype=np.int64)


def running_product(inputs: PolicyInputs, cap: int) -> np.ndarray:
    """SADDLE (HPCA 2026): draft while the running product of the draft's confidences stays above tau,
    tau per category from the paper's offline procedure (``adsl.fitting.tau``)."""

    def one(c, idx):
        conf = inputs.confidence[:, idx, :].reshape(-1, inputs.confidence.shape[2])
        boost = inputs.boosts.get(c, 0.0)
        return running_product_lengths(conf, inputs.taus[c], cap, boost).reshape(inputs.confidence[:, idx, :].shape)

    return _per_category(inputs, one)


def rejection_risk(inputs: PolicyInputs, cap: int) -> np.ndarray:
    """SpecDec++ (Huang et al., 2024): stop once the predicted chance that some drafted token is rejected,
    1 - prod P(accept_i | confidence_i), exceeds a threshold; P is the fitted calibration curve (the
    acceptance model's P(accept | confidence), a draft's later tokens after an accepted predecessor)."""

    if inputs.accept_prob is None:
        raise ValueError("rejection_risk needs the predicted acceptance probabilities (``predicted``)")

    def one(c, idx):
        first = np.log(np.clip(inputs.accept_prob[0][:, idx, :], 1e-12, 1.0))
        later = np.log(np.clip(inputs.accept_prob[1][:, idx, :], 1e-12, 1.0))
        return product_lengths(first, later, np.log(max(1.0 - inputs.thresholds[c], 1e-12)), cap)

    return _per_category(inputs, one)


def entropy_bound(inputs: PolicyInputs, cap: int) -> np.ndarray:
    """AdaEDL (Agrawal et al., 2024): before drafting a token, bound its acceptance probability from below
    by 1 - sqrt(gamma H) with H the entropy of the draft's next-token distribution, and stop when the
    bound falls under lambda; with lambda fitted the rule is: draft while H <= threshold (the fitted
    (1 - lambda)^2 / gamma), so a draft holds the leading tokens of low entropy (possibly none)."""
    if inputs.entropy is None:
        raise ValueError("entropy_bound needs the draft's entropy streams")

    def one(c, idx):
        ok = inputs.entropy[:, idx, :] <= inputs.thresholds[c]
        return leading_run(ok, cap)

    return _per_category(inputs, one)


def leading_run(ok: np.ndarray, cap: int) -> np.ndarray:
    """(..., T) length of the run of True values starting at each position, capped at ``cap``."""
    t = ok.shape[-1]
    return _leading_run(np.ascontiguousarray(ok.reshape(-1, t)), int(cap)).reshape(ok.shape)


@njit(cache=True)
def _leading_run(flat, cap):
    """Per row, the run of True values from each position (counted from the row's end), capped."""
    rows, t = flat.shape
    out = np.empty((rows, t), np.int64)
    for r in range(rows):
        run = 0
        for k in range(t - 1, -1, -1):
            run = run + 1 if flat[r, k] else 0
            out[r, k] = min(run, cap)
    return out


def goodput(inputs: PolicyInputs, cap: int) -> np.ndarray:
    """SmartSpec (Liu et al., 2024) / TurboSpec: each step, the length k in 0..cap that maximises expected
    emitted tokens per second, (1 + a + a^2 + ... + a^k) / (fixed + k per_token), with a the request's
    acceptance estimate from its own history (its acceptance outcomes so far, with a prior of
    ``GOODPUT_PRIOR`` tokens at its category's mean) and the cost model's per-request pass times."""
    if inputs.costs is None or inputs.accept is None:
        raise ValueError("goodput needs the cost model and the request's acceptance history")
    first = _first_outcomes(inputs.accept)
    seen = np.concatenate([np.zeros(first.shape[:-1] + (1,)), np.cumsum(first, axis=-1)[..., :-1]], axis=-1)
    n_seen = np.arange(first.shape[-1], dtype=float)
    prior = np.array([inputs.prior[str(c)] for c in inputs.categories])[None, :, None]
    alpha = np.clip((seen + GOODPUT_PRIOR * prior) / (n_seen + GOODPUT_PRIOR), 1e-6, 1 - 1e-6)
    return best_lengths(alpha, inputs.costs, cap)


def best_lengths(alpha: np.ndarray, costs: PolicyCosts, cap: int) -> np.ndarray:
    """argmax over k in 0..cap of (1 + alpha + ... + alpha^k) / (fixed + k per_token), elementwise."""
    k = np.arange(cap + 1, dtype=float)
    emitted = (1 - alpha[..., None] ** (k + 1)) / (1 - alpha[..., None])
    rate = emitted / costs.step_time(k)
    return np.argmax(rate, axis=-1).astype(np.int64)


def _first_outcomes(accept: np.ndarray) -> np.ndarray:
    """Acceptance of each position as a draft's first token (bool; the FIRST bit of flag streams)."""
    return (accept & 1).astype(bool) if accept.dtype != bool else accept


def oracle(inputs: PolicyInputs, cap: int) -> np.ndarray:
    """Knows the acceptance streams: drafts exactly the run of tokens the target will accept from each
    position, capped (no wasted draft, no early stop). The bound no observable rule reaches on tokens
    emitted per verification."""
    if inputs.accept is None:
        raise ValueError("oracle needs the acceptance streams")
    x, n, t = inputs.accept.shape
    runs = match_runs(inputs.accept.reshape(x * n, t)).reshape(x, n, t)
    return np.minimum(runs, cap).astype(np.int64)


POLICIES: dict[str, Callable[[PolicyInputs, int], np.ndarray]] = {
    "fixed": fixed,
    "batch_schedule": batch_schedule,
    "running_product": running_product,
    "rejection_risk": rejection_risk,
    "entropy_bound": entropy_bound,
    "goodput": goodput,
    "oracle": oracle,
}
LEARNED = ("rejection_risk", "entropy_bound")  # policies whose threshold ``fit_threshold`` sets
COST_AWARE = ("goodput", *LEARNED)  # policies that read the system's costs (the others: only the streams)


def predicted(models: dict[str, dict], categories: np.ndarray, conf: np.ndarray, later: np.ndarray):
    """(first, later) arrays of P(accept) of each position as a draft's first and as a later token, from
    each request's category's model (``predictor_of``)."""
    predict = predictor_of(models)
    first, nxt = np.empty(conf.shape, dtype=np.float32), np.empty(conf.shape, dtype=np.float32)
    for c in np.unique(categories):
        idx = np.flatnonzero(categories == c)
        first[:, idx, :] = predict(str(c), conf[:, idx, :], False)
        nxt[:, idx, :] = predict(str(c), later[:, idx, :], True)
    return first, nxt


def predictor_of(models: dict[str, dict]) -> Callable:
    """P(accept | confidence) of each category's acceptance model (``calibration_curve``): a draft's first
    token after a miss, a later token after its accepted predecessor (with the model's continuation term
    when the calibration moves the curve rather than the confidences)."""

    def predict(category: str, conf: np.ndarray, later: bool) -> np.ndarray:
        m = models[category]
        cal = m.get("calibration") or {}
        shift = 0.0
        if cal.get("applies_to", "acceptance") != "confidence":
            shift = float(cal.get("shift", 0.0)) + (float(cal.get("draft_continuation", 0.0)) if later else 0.0)
        return calibration_curve(m["joint"], conf, shift=shift, prev_rate=1.0 if later else 0.0)

    return predict


def emitted_per_cost(lengths: np.ndarray, accept: np.ndarray, costs: PolicyCosts) -> float:
    """Tokens emitted per second of a replay of ``lengths`` over the streams (each request on its own,
    serial cost model): the objective ``fit_threshold`` maximises."""
    from adsl.fitting.generator import replay_lengths

    r = replay_lengths(accept, lengths)
    v = r["valid"]
    emitted = (r["accepted"][v] + 1).sum()
    return float(emitted / costs.step_time(r["drafted"][v]).sum())


def fit_threshold(policy: str, inputs: PolicyInputs, accept: np.ndarray, grid: np.ndarray, cap: int) -> float:
    """The offline procedure of the learned rules: on training streams (``inputs`` of one category and
    ``accept`` its acceptance, (n, t) each), the grid value with the most tokens emitted per second
    under the policy's own cost model (ties: the first)."""
    best, best_rate = None, -np.inf
    cat = str(inputs.categories[0])
    for thr in grid:
        trial = dataclasses.replace(inputs, thresholds={cat: float(thr)})
        lengths = POLICIES[policy](trial, cap)[0]
        rate = emitted_per_cost(lengths, accept, inputs.costs)
        if rate > best_rate:
            best, best_rate = float(thr), rate
    return best
