"""Vectorized engine: a static batch of requests decoded autoregressively or speculatively.

Arrays are (replicas, requests); every replica is an independent Monte-Carlo run of the same batch.
Each iteration charges one batch pass per model from the cost model (``timing.batch_pass``):

- AD: one target pass over the requests still decoding, one token each;
- SD: ``d`` draft passes, then one target pass over d + 1 tokens per request; a request accepts the
  run of accepted stream positions from where it stands, capped at d, and emits accepted + 1 tokens
  (the correction or the bonus token), never more than its remaining output.

KV caches grow by the emitted tokens; batch passes see the mean context of the requests in them.
Requests leave the batch when their output is complete. A static batch ends when its last request does;
with continuous batching (``adsl.sim.batching``) a queued request takes a finished one's slot at the next
iteration and results cover the steady-state window. The engine is pure: arrays in, a dict of arrays out.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from adsl.errors import AdslError
from adsl.fitting.generator import match_runs
from adsl.perf.hardware import SystemSpec
from adsl.perf.models import Pair
from adsl.sim.accounting import accumulate, finish
from adsl.sim.batching import Continuous, SlotLoop, steady_window, window_sum
from adsl.sim.timing import BatchCost, CostTable, Schedule

# Prefill runs on the GPUs: a prompt of many tokens per request is compute-bound (AttAcc and SpecPIM
# keep the summarisation stage on the GPU too).
PREFILL_MAPPING = {"fc": "gpu", "attention": "gpu"}


class SimError(AdslError, ValueError):
    """Raised for an unusable setup or run: unknown policy or decoding, wrongly shaped arrays, too little memory."""

    pass


@dataclass(frozen=True)
class Setup:
    name: str
    system: SystemSpec
    decoding: str  # "ad" | "sd"
    draft_length: int = 0  # fixed d, or the cap d_max of an adaptive policy
    target_mapping: dict = field(default_factory=dict)
    draft_mapping: dict = field(default_factory=dict)
    schedule: Schedule = Schedule()
    policy: str = "fixed"  # fixed | running_product (stop when the product of confidences < tau)
    dynamic: bool = False  # place DLM FC and TLM attention per pass on the faster device (cost tables)
    pool_tokens: int = 0  # Shared Pool capacity C in tokens (0: no pool, per-iteration verification)
    eager: bool = False  # Eager Pool: draft during verification (asynchronous pipeline); needs a pool
    pool_trigger: str = "complete"  # verify when every request has tokens in the pool, or when GPU idle
    # draft placement: 1 = sharded like the target (tensor parallel / pipeline stages); k > 1 = one copy
    # on each of k devices, requests spread over the copies (adsl.sim.placement)
    draft_copies: int = 1
    draft_placement: str = "tensor_parallel"  # the name of that choice, for reports
    draft_split: str | None = None  # micro-batch split of draft passes; None: as ``schedule.split``
    static_power: bool = False  # charge the system's static (board idle + stack background) power

    @property
    def draft_schedule(self) -> Schedule:
        return self.schedule if self.draft_split is None else dataclasses.replace(self.schedule, split=self.draft_split)

    def __post_init__(self):
        from adsl.sim.policies import POLICIES

        if self.policy not in POLICIES:
            raise SimError(f"{self.name}: unknown draft policy {self.policy!r}; known: {sorted(POLICIES)}")
        if self.decoding not in ("ad", "sd"):
            raise SimError(f"{self.name}: decoding must be 'ad' or 'sd', got {self.decoding!r}")
        if self.pool_trigger not in ("complete", "idle"):
            raise SimError(f"{self.name}: pool_trigger must be 'complete' or 'idle', got {self.pool_trigger!r}")
        if self.eager and not self.pool_tokens:
            raise SimError(f"{self.name}: the Eager Pool needs a Shared Pool (pool_tokens > 0)")
        if self.decoding == "sd" and self.draft_length < 1:
            raise SimError(f"{self.name}: draft length d must be >= 1, got {self.draft_length}")


def memory_need(setup: Setup, pair: Pair, batch: int, max_seq_len: int) -> tuple[float, float]:
    """(bytes needed for weights + full-length KV caches of every model run, bytes the system has)."""
    need = pair.target.weight_bytes + batch * max_seq_len * pair.target.kv_bytes_per_token
    if setup.decoding == "sd":  # a replicated draft keeps a copy of its weights on every device it uses
        need += setup.draft_copies * pair.draft.weight_bytes + batch * max_seq_len * pair.draft.kv_bytes_per_token
    return float(need), float(setup.system.memory_capacity_bytes)


def check_memory(setup: Setup, pair: Pair, batch: int, max_seq_len: int) -> None:
    """Raise SimError when weights + full-length KV caches of ``batch`` requests exceed the system's memory."""
    need, have = memory_need(setup, pair, batch, max_seq_len)
    if need > have:
        raise SimError(
            f"{setup.name} on {setup.system.name}: batch {batch} x {max_seq_len} tokens needs "
            f"{need / 1e9:.0f} GB for weights + KV, the system has {have / 1e9:.0f} GB"
        )


def cost_tables(setup: Setup, pair: Pair, n_max: int, ctx_max: float) -> dict[str, CostTable]:
    """The pass costs a run needs, for 0..n_max requests and contexts up to ctx_max."""
    s, sch = setup.system, setup.schedule
    if setup.decoding == "ad":
        return {"decode": CostTable.build(pair.target, s, 1, setup.target_mapping, sch, n_max, ctx_max)}
    draft = CostTable.build(
        pair.draft, s, 1, setup.draft_mapping, setup.draft_schedule, n_max, ctx_max, setup.draft_copies
    )
    return {"draft": draft}


def prefill_cost(setup: Setup, pair: Pair, n_join, prompt: float) -> BatchCost:
    """Prefill of ``n_join`` admitted requests' prompts (``prompt`` tokens each) on the GPUs: the target,
    and the draft (with its placement) for speculative systems."""
    q, s, one = max(1, int(round(prompt))), setup.system, Schedule()
    n_max = int(np.max(n_join))
    cost = CostTable.build(pair.target, s, q, PREFILL_MAPPING, one, n_max, 0.0).lookup(n_join, 0.0)
    if setup.decoding == "sd":
        draft = CostTable.build(pair.draft, s, q, PREFILL_MAPPING, one, n_max, 0.0, setup.draft_copies)
        cost = cost.add(draft.lookup(n_join, 0.0))
    return cost


def verify_tables(setup: Setup, pair: Pair, qs, n_max: int, ctx_max: float) -> dict[int, CostTable]:
    """Target passes with q tokens per request, for every integer q the run needs."""
    s, sch = setup.system, setup.schedule
    return {int(q): CostTable.build(pair.target, s, int(q), setup.target_mapping, sch, n_max, ctx_max) for q in qs}


def verify_cost(tables: dict[int, CostTable], n, ctx, q):
    """Verification of n requests with q tokens each on average: linear between integer q tables."""
    q = np.asarray(q, dtype=float)
    lo = np.floor(q).astype(np.int64)
    f = q - lo
    out = None
    for k in np.unique(lo):
        sel = lo == k
        a = tables[int(k)].lookup(n, ctx)
        b = tables[int(k) + 1].lookup(n, ctx) if (f[sel] > 0).any() else a
        part = a.combine(b, np.where(sel, f, 0.0), np.where(sel, 1.0, 0.0))
        out = part if out is None else out.add(part)
    return out


def needed_qs(q) -> list[int]:
    """Integer q values ``verify_cost`` needs tables for at ``q``: each floor, and its ceil when fractional."""
    q = np.asarray(q, dtype=float)
    lo = np.floor(q).astype(np.int64)
    return sorted(set(lo.ravel().tolist()) | set((lo[q > lo] + 1).ravel().tolist()))


def dynamic_placement(setup, pair, n_d, c_d, n_it, ctx_it, q_it, draft_cost, verify, placement):
    """Place draft FC and target attention, pass by pass, on the device that is faster for that pass
    under the cost model (thresholds pre-characterised per request count and context: the cost tables).
    A single intensity threshold is not enough here: PIM load balance (heads over stacks) and per-call
    costs move the crossover with batch and context (see adsl.sim.scheduler)."""
    import dataclasses

    ctx_max = float(max(c_d.max(), ctx_it.max()) + 1)
    r = int(n_it.max())
    other = draft_cost
    if setup.system.weights_in == "pim":
        flip = {**setup.draft_mapping, "fc": "pim" if setup.draft_mapping.get("fc") == "gpu" else "gpu"}
        alt = dataclasses.replace(setup, draft_mapping=flip)
        other = cost_tables(alt, pair, r, ctx_max)["draft"].lookup(n_d, c_d)
        use_other = other.time_s < draft_cost.time_s
        to_pim = (use_other if flip["fc"] == "pim" else ~use_other) & (n_d > 0)
        draft_cost = draft_cost.select(other, use_other)
        placement["draft_fc_on_pim"] = float(to_pim[n_d > 0].mean()) if (n_d > 0).any() else 0.0
    flip_t = {**setup.target_mapping, "attention": "pim" if setup.target_mapping.get("attention") == "gpu" else "gpu"}
    alt_t = dataclasses.replace(setup, target_mapping=flip_t)
    vt_alt = verify_tables(alt_t, pair, needed_qs(q_it), r, ctx_max)
    other_v = verify_cost(vt_alt, n_it, ctx_it, q_it)
    use_other_t = other_v.time_s < verify.time_s
    to_pim_t = use_other_t if flip_t["attention"] == "pim" else ~use_other_t
    placement["target_attention_on_pim"] = float(to_pim_t[n_it > 0].mean())
    return draft_cost, verify.select(other_v, use_other_t)


def requests(prompt_len, output_len) -> tuple[np.ndarray, np.ndarray]:
    """Prompt and output lengths as (replicas, requests) float and int arrays, checked alike for every
    engine: equal 2-D shapes, and at least one output token a request (one without output never completes
    a window)."""
    prompt = np.asarray(prompt_len, dtype=float)
    out = np.asarray(output_len, dtype=np.int64)
    if prompt.shape != out.shape or prompt.ndim != 2:
        raise SimError(f"prompt_len and output_len must both be (replicas, requests), got {prompt.shape}, {out.shape}")
    if (out < 1).any():
        raise SimError("every request needs an output length >= 1")
    return prompt, out


def simulate(
    setup: Setup,
    pair: Pair,
    prompt_len,
    output_len,
    accept: np.ndarray | None = None,
    draft_lengths=None,
    serving: Continuous | None = None,
) -> dict:
    """Run the requests. ``prompt_len`` and ``output_len`` are (X, N) per request; ``accept`` is
    (X, N, T) bool acceptance streams (SD only), T >= max output + d + 1. ``draft_lengths`` (X, N, T), for
    an adaptive policy, is the draft length a request uses when it starts drafting at each position
    (capped at ``setup.draft_length``); without it every draft has the fixed length. ``serving``: None
    runs the N requests as one static batch; else ``serving.slots`` are kept full from the queue and
    results cover the steady-state window (``adsl.sim.batching``)."""
    prompt, out = requests(prompt_len, output_len)
    x, n_req = out.shape
    r = n_req if serving is None else serving.slots
    if r > n_req:
        raise SimError(f"{r} slots but only {n_req} requests")
    sd = setup.decoding == "sd"
    d = setup.draft_length
    if sd:
        if accept is None or accept.shape[:2] != (x, n_req):
            raise SimError(f"SD needs acceptance streams of shape ({x}, {n_req}, T)")
        # a request that ends on a full run stands at out + d, and its idle slot is read once more
        if accept.shape[2] < out.max() + d + 1:
            raise SimError(f"acceptance streams of {accept.shape[2]} positions; need >= {out.max() + d + 1}")
        # a request drafts from positions below its output length, and no draft reads more than d
        # positions on: runs capped at d only need the streams up to out + d
        horizon = int(out.max()) + d + 1  # a finished request may stand d past its output (ignored)
        runs = match_runs(accept[..., :horizon].reshape(x * n_req, -1)).reshape(x, n_req, -1)
        fixed_advance = np.minimum(runs, d) + 1 if draft_lengths is None else None
        if draft_lengths is not None:
            draft_lengths = np.minimum(np.asarray(draft_lengths), d)
            if draft_lengths.shape != accept.shape or (draft_lengths < 0).any():
                raise SimError("draft_lengths must match the streams' shape and be >= 0 (0: no draft)")
    ctx_max = float(prompt.max() + out.max() + d)
    tables = cost_tables(setup, pair, r, ctx_max)
    slots = SlotLoop(prompt, out, r)
    # The decoding loop only tracks who is active and where; costs depend on (requests, mean context)
    # per iteration, so they are read from the cost tables for all iterations at once afterwards.
    xi = np.arange(x)[:, None]
    cs, dn, dc, qs, drafted = [], [], [], [], []
    steps = np.arange(d)
    while slots.active.any():
        active, ctx, n = slots.active, slots.ctx, slots.n_active
        cs.append((ctx * active).sum(axis=1))  # divided by the requests after the loop
        if sd:
            req, pos = slots.req, slots.pos
            if draft_lengths is None:  # every active request drafts d tokens: accepted + 1, read off
                advance = fixed_advance[xi, req, pos]
            else:
                length = np.where(active, draft_lengths[xi, req, pos], 0)
                drafting = length[..., None] > steps  # (X, R, d): still drafting at step j
                n_j = drafting.sum(axis=1)
                dn.append(n_j)
                mean = (ctx[..., None] * drafting).sum(axis=1) / np.maximum(n_j, 1)
                dc.append(np.where(n_j > 0, mean, 0.0) + steps)
                qs.append(np.where(n > 0, ((length + 1) * active).sum(axis=1) / np.maximum(n, 1), 1.0))
                drafted.append(length.sum(axis=1))
                advance = np.minimum(runs[xi, req, pos], length) + 1
            slots.step(np.minimum(advance, slots.left), advance, active)  # idle slots have nothing left
        else:
            slots.step(active.astype(np.int64), 1, active)
    log = slots.arrays()
    n_it = log["n"]  # (iterations, replicas)
    ctx_it = np.where(n_it > 0, np.array(cs) / np.maximum(n_it, 1), 0.0)  # mean context of the active
    if sd and draft_lengths is None:
        drafted = n_it * d
    res_place: dict = {}
    if sd:
        if draft_lengths is None:  # every active request drafted d tokens in every iteration
            dn = np.repeat(n_it[..., None], d, axis=2)
            dc = ctx_it[..., None] + steps
            qs = np.full(n_it.shape, d + 1.0)
        q_it = np.array(qs)
        vt = verify_tables(setup, pair, needed_qs(q_it), r, ctx_max)
        n_d, c_d = np.array(dn), np.array(dc)
        draft_cost = tables["draft"].lookup(n_d, c_d)
        verify = verify_cost(vt, n_it, ctx_it, q_it)
        if setup.dynamic:
            draft_cost, verify = dynamic_placement(
                setup, pair, n_d, c_d, n_it, ctx_it, q_it, draft_cost, verify, res_place
            )
        passes = [("draft", draft_cost, (0, 2)), ("verify", verify, (0,))]
    else:
        passes = [("decode", tables["decode"].lookup(n_it, ctx_it), (0,))]
    window = steady_window(log, serving)
    if serving is not None and serving.prefill:
        passes.append(("prefill", prefill_cost(setup, pair, log["admitted"], float(prompt.mean())), (0,)))
    res = {"time_s": np.zeros(x), "energy_j": np.zeros(x)}
    res["iterations"] = (n_it > 0).sum(axis=0) if window is None else window.sum(axis=0)
    stage, busy, cls = {}, {}, {}
    per_iteration = np.zeros(n_it.shape)
    for name, c, axes in passes:
        t = window_sum(c.time_s, window, axes)
        res["time_s"] += t
        res["energy_j"] += window_sum(c.energy_j, window, axes)
        per_iteration += c.time_s.sum(axis=axes[1:]) if len(axes) > 1 else c.time_s
        accumulate(stage, name, t)
        for k, v in c.busy_s.items():
            accumulate(busy, k, window_sum(v, window, axes))
        for k, v in c.by_class_s.items():
            accumulate(cls, k, window_sum(v, window, axes))
    res["placement"] = res_place
    res["tokens"] = slots.gen.sum(axis=1) if window is None else window_sum(log["emitted"], window)
    res["stage_s"] = stage
    res["busy_s"] = busy
    res["class_s"] = cls
    res["drafted"] = window_sum(np.array(drafted), window) if sd else np.zeros(x)
    return finish(setup, res, log, window, per_iteration)
