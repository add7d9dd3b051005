"""SADDLE's verification pools: the Shared Pool (cross-micro-batch verification with capacity C) and
the Eager Pool (optimistic drafting during verification), as a round-based, vectorized engine.

One round is one verification pass of the target over the Shared Pool.

- Sequential (SADDLE-p): every active request drafts (running-product rule, at most d tokens), the
  pool admits at most C tokens (one query token per request plus draft tokens, highest running
  product first: the tokens most likely to pass), then one pooled target pass verifies them. Tokens
  that do not fit are not drafted. Round time = draft time + verification time.
- Asynchronous with the Eager Pool (SADDLE-s, SADDLE): while the target verifies the pool, verified
  requests whose running product is still >= tau keep drafting optimistically (at most d more). After
  the pass a request that had every verified token accepted, and whose first eager token equals the
  target's bonus token, keeps the rest of its eager and cut tokens as its next pool entry; any other
  request loses them (wasted drafting) and drafts again from the target's token. Requests drafting
  from a correction either hold the next pass until they are done (``pool_trigger: complete``) or
  catch the pass after it (``idle``: the pass starts as soon as the GPU is free). Round time = their
  drafting + the longer of the pass and the overlapped drafting, and no less than the work the two put
  on one device type.

Arrays are (replicas, requests) as in ``adsl.sim.engine``; costs come from the same cost tables. The
engine records rounds first and evaluates costs for all rounds at once afterwards.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from adsl.fitting.generator import match_runs
from adsl.sim.accounting import accumulate, finish
from adsl.sim.batching import Continuous, SlotLoop, steady_window, window_sum
from adsl.sim.engine import (
    Setup,
    SimError,
    cost_tables,
    dynamic_placement,
    needed_qs,
    prefill_cost,
    verify_cost,
    verify_tables,
)
from adsl.sim.timing import BatchCost


def pool_admit(want: np.ndarray, conf_window, queries: np.ndarray, capacity: int) -> np.ndarray:
    """Draft tokens admitted per request (X, R): the ``capacity - queries`` tokens with the highest
    running product H over all requests of a replica, never more than ``want``. H falls along a
    draft, so each request keeps a prefix (ties: earlier request first, stable). ``conf_window`` is
    (X, R, W >= want) confidences from each request's position on, or a function returning them."""
    room = np.maximum(capacity - queries, 0)
    out = want.copy()
    cut = want.sum(axis=1) > room  # replicas whose pool overflows: rank their tokens
    if not cut.any():
        return out
    if callable(conf_window):  # gathered only when some pool overflows
        conf_window = conf_window()
    x, r, w = conf_window.shape
    h = np.cumprod(conf_window[cut].astype(np.float64), axis=2)
    cand = np.arange(w)[None, None, :] < want[cut][..., None]
    k = int(cut.sum())
    score = np.where(cand, h, -1.0).reshape(k, r * w)
    flat_cand = cand.reshape(k, r * w)
    keep = np.zeros_like(flat_cand)
    for i, n_keep in enumerate(room[cut]):
        if n_keep <= 0:
            continue
        # the n_keep-th largest score; ties at it are admitted in request order (a stable ranking)
        v = np.partition(score[i], score.shape[1] - n_keep)[score.shape[1] - n_keep]
        above = score[i] > v
        tie = (score[i] == v) & flat_cand[i]
        keep[i] = above | (tie & (np.cumsum(tie) <= n_keep - above.sum()))
    keep &= flat_cand
    out[cut] = keep.reshape(k, r, w).sum(axis=2)
    return out


def simulate_pooled(
    setup: Setup,
    pair,
    prompt_len,
    output_len,
    accept,
    confidence,
    tau_lengths,
    serving: Continuous | None = None,
    confidence_later=None,
) -> dict:
    """``tau_lengths`` (X, N, T): draft length of the running-product rule from each position, capped
    at 2 d + 1 (an eager request may draft d + 1 tokens beyond a d-token pool entry). ``serving`` as in
    ``adsl.sim.engine.simulate`` (None: one static batch of the N requests). ``confidence_later``: the
    confidences of a draft's later tokens where a calibration moves them (default: ``confidence``)."""
    prompt = np.asarray(prompt_len, dtype=float)
    out = np.asarray(output_len, dtype=np.int64)
    x, n_req = out.shape
    r = n_req if serving is None else serving.slots
    d, cap, eager = setup.draft_length, setup.pool_tokens, setup.eager
    if cap < r + 1:
        raise SimError(f"{setup.name}: pool of {cap} tokens cannot hold one query token per request ({r}) plus a draft")
    if accept.shape[2] < out.max() + 4 * d + 4:
        raise SimError(f"acceptance streams of {accept.shape[2]} positions; need >= {out.max() + 4 * d + 4}")
    runs = match_runs(accept.reshape(x * n_req, -1)).reshape(x, n_req, -1)
    # kept eager tokens continue an accepted draft (differs from `runs` only for flagged streams)
    cont_runs = runs if accept.dtype == bool else match_runs(accept.reshape(x * n_req, -1), True).reshape(x, n_req, -1)
    continuing = np.zeros((x, r), dtype=bool)
    lengths = np.minimum(np.asarray(tau_lengths), 2 * d + 1)
    xi = np.arange(x)[:, None]
    win = np.arange(d)
    steps = np.arange(d + 1)  # an eager request drafts up to d + 1 tokens: the bonus position + d

    slots = SlotLoop(prompt, out, r)
    ready = np.zeros((x, r), dtype=bool)  # tokens drafted and waiting in the pool
    held = np.zeros((x, r), dtype=np.int64)  # drafted tokens from pos not yet verified
    rec = {k: [] for k in ("nv", "cv", "qv", "nd", "cd", "np", "cp", "drafted", "wasted", "pool")}
    zero = np.zeros((x, r), dtype=np.int64)
    while slots.active.any():
        active, ctx, req, pos = slots.active, slots.ctx, slots.req, slots.pos
        full_len = lengths[xi, req, pos]

        def conf_w(req=req, pos=pos):
            at = (xi[..., None], req[..., None], pos[..., None] + win)
            if confidence_later is None:
                return confidence[at]
            window = confidence_later[at]  # a draft's later tokens; its first at its own confidence
            window[..., 0] = confidence[xi, req, pos]
            return window

        if eager:
            fresh = np.where(active & ~ready, np.minimum(full_len, d), 0)
            if setup.pool_trigger == "complete":  # the pass waits for requests drafting from a correction
                verifying = active
                pre, offered = fresh, np.where(ready, held, fresh)
            else:  # "idle": the pass starts as soon as the GPU is free; drafters catch the next one
                # a request whose very first token falls below tau has nothing to draft: it joins the pass
                verifying = active & (ready | (fresh == 0))
                pre, offered = zero, np.where(verifying, held, 0)
            # eager drafting covers the bonus position and d tokens after it (a full next pool entry)
            extra = np.where(verifying, np.clip(np.minimum(full_len, offered + d + 1) - offered, 0, d + 1), 0)
            entry = np.minimum(offered, d)  # at most d tokens of a request per pass; the rest stay held
            lv = np.where(verifying, pool_admit(entry, conf_w, verifying.sum(axis=1), cap), 0)
            overlapped = [(extra, ctx + offered)] + ([(fresh, ctx)] if setup.pool_trigger == "idle" else [])
        else:
            verifying = active
            want = np.where(active, np.minimum(full_len, d), 0)
            lv = np.where(active, pool_admit(want, conf_w, active.sum(axis=1), cap), 0)
            pre, extra, offered, overlapped = lv, zero, lv, []
        _record(rec, "np", "cp", [(pre, ctx)], steps, (x, r))
        _record(rec, "nd", "cd", overlapped, steps, (x, r))
        nv = verifying.sum(axis=1)
        rec["nv"].append(nv)
        rec["cv"].append(np.where(nv > 0, (ctx * verifying).sum(axis=1) / np.maximum(nv, 1), 0.0))
        rec["qv"].append(np.where(nv > 0, ((lv + 1) * verifying).sum(axis=1) / np.maximum(nv, 1), 1.0))
        rec["pool"].append(((lv + 1) * verifying).sum(axis=1))
        rec["drafted"].append(pre.sum(axis=1) + sum(n.sum(axis=1) for n, _ in overlapped))

        run = np.where(continuing, cont_runs[xi, req, pos], runs[xi, req, pos])
        acc = np.where(verifying, np.minimum(run, lv), 0)
        complete = verifying & (acc == lv)
        advance = acc + 1
        if eager:
            # the pass also yields the target's token after the verified ones (the bonus): eager and cut
            # tokens stay in the pool only if the first of them equals it, else they are discarded
            left = offered + extra - lv
            bonus_match = complete & (run > lv) & (left > 0)
            keep = bonus_match & (left > 1)
            # drafted tokens that will never be emitted (the matched one is emitted as the bonus)
            lost = offered + extra - acc - bonus_match
            rec["wasted"].append(np.where(verifying & ~keep, lost, 0).sum(axis=1))
            new_held, new_ready = np.where(keep, left - 1, 0), keep
            continuing = keep
            if setup.pool_trigger == "idle":  # drafted from a correction during the pass: next pass
                drafted_now = active & ~ready & (fresh > 0)
                new_held = np.where(drafted_now, fresh, new_held)
                new_ready = new_ready | drafted_now
        else:
            rec["wasted"].append(np.zeros(x, dtype=np.int64))
            new_held, new_ready = held, ready
        emitted = np.where(verifying, np.minimum(advance, slots.left), 0)
        admitted = slots.step(emitted, advance, verifying)
        # an admitted request starts with nothing drafted
        held = np.where(admitted, 0, new_held)
        ready = new_ready & ~admitted & slots.active
        continuing = continuing & ~admitted
    return _costs(setup, pair, prompt, out, rec, slots, eager, serving)


def _record(rec: dict, n_key: str, c_key: str, groups, steps, shape) -> None:
    """Draft steps of one round: requests drafting at step j and their mean context, over groups of
    (draft lengths, context at the first drafted token)."""
    n_j = np.zeros((shape[0], steps.size), dtype=np.int64)
    c_sum = np.zeros((shape[0], steps.size))
    for n, c in groups:
        on = n[..., None] > steps
        n_j += on.sum(axis=1)
        c_sum += (on * (c[..., None] + steps)).sum(axis=1)
    rec[n_key].append(n_j)
    rec[c_key].append(np.where(n_j > 0, c_sum / np.maximum(n_j, 1), 0.0))


def _steps(c: BatchCost, sl: slice) -> BatchCost:
    return BatchCost(
        c.time_s[..., sl],
        c.energy_j[..., sl],
        {k: v[..., sl] for k, v in c.busy_s.items()},
        {k: v[..., sl] for k, v in c.by_class_s.items()},
    )


def _costs(setup, pair, prompt, out, rec, slots, eager, serving) -> dict:
    d = setup.draft_length
    n_v, c_v, q_v = (np.array(rec[k]) for k in ("nv", "cv", "qv"))
    # draft steps before the pass (sequential) and during it (overlapped), side by side on the last axis
    n_d = np.concatenate([np.array(rec["np"]), np.array(rec["nd"])], axis=2)
    c_d = np.concatenate([np.array(rec["cp"]), np.array(rec["cd"])], axis=2)
    r = slots.cur.shape[1]
    ctx_max = float(prompt.max() + out.max() + 4 * d + 4)
    draft = cost_tables(setup, pair, r, ctx_max)["draft"].lookup(n_d, c_d)
    # the pool is verified as one target pass, or in the system's micro-batches where that is faster
    # (a deep pipeline needs several micro-batches in flight once the pass is compute-bound)
    pooled = dataclasses.replace(setup, schedule=dataclasses.replace(setup.schedule, split="best"))
    verify = verify_cost(verify_tables(pooled, pair, needed_qs(q_v), r, ctx_max), n_v, c_v, q_v)
    placement: dict = {}
    if setup.dynamic:
        draft, verify = dynamic_placement(pooled, pair, n_d, c_d, n_v, c_v, q_v, draft, verify, placement)
    pre, over = _steps(draft, slice(0, d + 1)), _steps(draft, slice(d + 1, 2 * d + 2))
    t_pre, t_over = pre.time_s.sum(axis=2), over.time_s.sum(axis=2)  # (rounds, X)
    t_verify = verify.time_s
    if eager:
        stages = setup.system.pipeline_stages
        shared = np.zeros_like(t_verify)
        for k in set(over.busy_s) | set(verify.busy_s):
            dk = over.busy_s[k].sum(axis=2) if k in over.busy_s else 0.0
            shared = np.maximum(shared, dk + verify.busy_s.get(k, 0.0))
        t_round = t_pre + np.maximum(np.maximum(t_over, t_verify), shared / stages)
    else:
        t_round = t_pre + t_verify
    t_draft = t_pre + t_over
    log = slots.arrays()
    window = steady_window(log, serving)
    energy = window_sum(draft.energy_j, window, (0, 2)) + window_sum(verify.energy_j, window)
    stage = {"draft": window_sum(t_draft, window), "verify": window_sum(t_verify, window)}
    busy, cls = {}, {}
    if serving is not None and serving.prefill:  # admitted requests' prompts, before the next round
        fill = prefill_cost(setup, pair, log["admitted"], float(prompt.mean()))
        t_round = t_round + fill.time_s
        energy = energy + window_sum(fill.energy_j, window)
        stage["prefill"] = window_sum(fill.time_s, window)
        for k, v in fill.busy_s.items():
            accumulate(busy, k, window_sum(v, window))
        for k, v in fill.by_class_s.items():
            accumulate(cls, k, window_sum(v, window))
    res = {
        "time_s": window_sum(t_round, window),
        "energy_j": energy,
        "iterations": (n_v > 0).sum(axis=0) if window is None else window.sum(axis=0),
        "placement": placement,
        "tokens": slots.gen.sum(axis=1) if window is None else window_sum(log["emitted"], window),
        "pool": {
            "pool_max": np.array(rec["pool"]).max(axis=0),
            "drafted": window_sum(np.array(rec["drafted"]), window),
            "wasted": window_sum(np.array(rec["wasted"]), window),
            "capacity": setup.pool_tokens,
        },
    }
    res["drafted"] = res["pool"]["drafted"]
    stage["overlap"] = stage["draft"] + stage["verify"] + stage.get("prefill", 0.0) - res["time_s"]
    for c, axes in ((draft, (0, 2)), (verify, (0,))):
        for k, v in c.busy_s.items():
            accumulate(busy, k, window_sum(v, window, axes))
        for k, v in c.by_class_s.items():
            accumulate(cls, k, window_sum(v, window, axes))
    res.update(stage_s=stage, busy_s=busy, class_s=cls)
    return finish(setup, res, log, window, t_round)
