"""Vectorized engine: a static batch of requests decoded autoregressively or speculatively.

Arrays are (replicas, requests); every replica is an independent Monte-Carlo run of the same batch.
Each iteration charges one batch pass per model from the cost model (``timing.batch_pass``):

- AD: one target pass over the requests still decoding, one token each;
- SD: ``d`` draft passes, then one target pass over d + 1 tokens per request; a request accepts the
  run of accepted stream positions from where it stands, capped at d, and emits accepted + 1 tokens
  (the correction or the bonus token), never more than its remaining output.

KV caches grow by the emitted tokens; batch passes see the mean context of the requests in them.
Requests leave the batch when their output is complete (no refill: a static batch, as the paper's
per-batch-size evaluation). The engine is pure: arrays in, a dict of arrays out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from adsl.fitting.generator import match_runs
from adsl.perf.hardware import SystemSpec
from adsl.perf.models import Pair
from adsl.sim.timing import CostTable, Schedule


class SimError(ValueError):
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

    def __post_init__(self):
        if self.policy not in ("fixed", "running_product"):
            raise SimError(f"{self.name}: unknown draft policy {self.policy!r}")
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
    models = [pair.target] + ([pair.draft] if setup.decoding == "sd" else [])
    need = sum(m.weight_bytes + batch * max_seq_len * m.kv_bytes_per_token for m in models)
    return float(need), float(setup.system.memory_capacity_bytes)


def check_memory(setup: Setup, pair: Pair, batch: int, max_seq_len: int) -> None:
    need, have = memory_need(setup, pair, batch, max_seq_len)
    if need > have:
        raise SimError(
            f"{setup.name} on {setup.system.name}: batch {batch} x {max_seq_len} tokens needs "
            f"{need / 1e9:.0f} GB for weights + KV, the system has {have / 1e9:.0f} GB"
        )


def _add(acc: dict, key: str, value) -> None:
    acc[key] = acc.get(key, 0.0) + value


def cost_tables(setup: Setup, pair: Pair, n_max: int, ctx_max: float) -> dict[str, CostTable]:
    """The pass costs a run needs, for 0..n_max requests and contexts up to ctx_max."""
    s, sch = setup.system, setup.schedule
    if setup.decoding == "ad":
        return {"decode": CostTable.build(pair.target, s, 1, setup.target_mapping, sch, n_max, ctx_max)}
    return {"draft": CostTable.build(pair.draft, s, 1, setup.draft_mapping, sch, n_max, ctx_max)}


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
    q = np.asarray(q, dtype=float)
    lo = np.floor(q).astype(np.int64)
    return sorted(set(lo.ravel().tolist()) | set((lo[q > lo] + 1).ravel().tolist()))


def _dynamic(setup, pair, n_d, c_d, n_it, ctx_it, q_it, draft_cost, verify, placement):
    """Place draft FC and target attention, pass by pass, on the device that is faster for that pass
    under the cost model (thresholds pre-characterised per request count and context: the cost tables).
    A single intensity threshold is not enough here: PIM load balance (heads over stacks) and per-call
    costs move the crossover with batch and context (see adsl.sim.scheduler)."""
    import dataclasses

    ctx_max = float(max(c_d.max(), ctx_it.max()) + 1)
    r = int(n_it.max())
    other = draft_cost
    if setup.system.weights_in in ("pim", "both"):
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


def simulate(
    setup: Setup, pair: Pair, prompt_len, output_len, accept: np.ndarray | None = None, draft_lengths=None
) -> dict:
    """Run the batch to completion. ``prompt_len`` and ``output_len`` are (X, R); ``accept`` is
    (X, R, T) bool acceptance streams (SD only), T >= max output + d. ``draft_lengths`` (X, R, T), for
    an adaptive policy, is the draft length a request uses when it starts drafting at each position
    (capped at ``setup.draft_length``); without it every draft has the fixed length."""
    prompt = np.asarray(prompt_len, dtype=float)
    out = np.asarray(output_len, dtype=np.int64)
    if prompt.shape != out.shape or prompt.ndim != 2:
        raise SimError(f"prompt_len and output_len must both be (replicas, requests), got {prompt.shape}, {out.shape}")
    if (out < 1).any():
        raise SimError("every request needs an output length >= 1")
    x, r = out.shape
    sd = setup.decoding == "sd"
    d = setup.draft_length
    if sd:
        if accept is None or accept.shape[:2] != (x, r):
            raise SimError(f"SD needs acceptance streams of shape ({x}, {r}, T)")
        if accept.shape[2] < out.max() + d:
            raise SimError(f"acceptance streams of {accept.shape[2]} positions; need >= {out.max() + d}")
        runs = match_runs(accept.reshape(x * r, -1)).reshape(x, r, -1)
        if draft_lengths is not None:
            draft_lengths = np.minimum(np.asarray(draft_lengths), d)
            if draft_lengths.shape != accept.shape or (draft_lengths < 1).any():
                raise SimError("draft_lengths must match the streams' shape and be >= 1")
    tables = cost_tables(setup, pair, r, float(prompt.max() + out.max() + d))
    gen = np.zeros((x, r), dtype=np.int64)
    ctx = prompt.copy()
    pos = np.zeros((x, r), dtype=np.int64)
    # The decoding loop only tracks who is active and where; costs depend on (requests, mean context)
    # per iteration, so they are read from the cost tables for all iterations at once afterwards.
    xi, ri = np.arange(x)[:, None], np.arange(r)[None, :]
    active = gen < out
    ns, cs, dn, dc, qs = [], [], [], [], []
    steps = np.arange(d)
    while active.any():
        n = active.sum(axis=1)
        ns.append(n)
        cs.append(np.where(n > 0, (ctx * active).sum(axis=1) / np.maximum(n, 1), 0.0))
        if sd:
            if draft_lengths is None:  # every active request drafts d tokens
                length = d
            else:
                length = np.where(active, draft_lengths[xi, ri, pos], 0)
                drafting = length[..., None] > steps  # (X, R, d): still drafting at step j
                n_j = drafting.sum(axis=1)
                dn.append(n_j)
                mean = (ctx[..., None] * drafting).sum(axis=1) / np.maximum(n_j, 1)
                dc.append(np.where(n_j > 0, mean, 0.0) + steps)
                qs.append(np.where(n > 0, ((length + 1) * active).sum(axis=1) / np.maximum(n, 1), 1.0))
            acc = np.minimum(runs[xi, ri, pos], length)
            emitted = np.where(active, np.minimum(acc + 1, out - gen), 0)
            pos = pos + np.where(active, acc + 1, 0)
        else:
            emitted = active.astype(np.int64)
        gen += emitted
        ctx += emitted
        active = gen < out
    n_it, ctx_it = np.array(ns), np.array(cs)  # (iterations, replicas)
    res_place: dict = {}
    if sd:
        if draft_lengths is None:  # every active request drafted d tokens in every iteration
            dn = np.repeat(n_it[..., None], d, axis=2)
            dc = ctx_it[..., None] + steps
            qs = np.full(n_it.shape, d + 1.0)
        q_it = np.array(qs)
        vt = verify_tables(setup, pair, needed_qs(q_it), r, float(prompt.max() + out.max() + d))
        n_d, c_d = np.array(dn), np.array(dc)
        draft_cost = tables["draft"].lookup(n_d, c_d)
        verify = verify_cost(vt, n_it, ctx_it, q_it)
        if setup.dynamic:
            draft_cost, verify = _dynamic(setup, pair, n_d, c_d, n_it, ctx_it, q_it, draft_cost, verify, res_place)
        passes = [("draft", draft_cost, (0, 2)), ("verify", verify, (0,))]
    else:
        passes = [("decode", tables["decode"].lookup(n_it, ctx_it), (0,))]
    res = {"time_s": np.zeros(x), "energy_j": np.zeros(x), "iterations": (n_it > 0).sum(axis=0)}
    stage, busy, cls = {}, {}, {}
    for name, c, axes in passes:
        t = c.time_s.sum(axis=axes)
        res["time_s"] += t
        res["energy_j"] += c.energy_j.sum(axis=axes)
        _add(stage, name, t)
        for k, v in c.busy_s.items():
            _add(busy, k, v.sum(axis=axes))
        for k, v in c.by_class_s.items():
            _add(cls, k, v.sum(axis=axes))
    res["placement"] = res_place
    res["tokens"] = gen.sum(axis=1)
    res["throughput_tok_s"] = res["tokens"] / res["time_s"]
    res["tokens_per_j"] = res["tokens"] / res["energy_j"]
    res["stage_s"] = stage
    res["busy_s"] = busy
    res["class_s"] = cls
    return res
