"""Python side of the compiled event loop (``adsl.sim.loop``): inputs as flat arrays, logs into a RunResult."""

from __future__ import annotations

import dataclasses

import numpy as np

from adsl.fitting.generator import match_runs
from adsl.sim import loop
from adsl.sim.core import Layout, PassTables, _flip, micro_batches
from adsl.sim.engine import SimError, requests
from adsl.sim.resources import CTX_STEP
from adsl.sim.result import ReplicaLog, run_result


def _stack(tables, empty_shape):
    if not tables:
        return np.zeros(empty_shape), np.zeros(empty_shape)
    return np.stack([t.gpu_a for t in tables]), np.stack([t.pim_a for t in tables])


def flat_tables(setup, tables: PassTables) -> tuple:
    """Cost tables as arrays: draft (variant, n, ctx), verify (variant, q - 1, n, ctx), decode, prefill."""
    sd = setup.decoding == "sd"
    dg, dp = _stack(tables.draft, (0, 1, 2))
    if sd:
        vg = np.stack([np.stack([t.gpu_a for t in row]) for row in tables.verify])
        vp = np.stack([np.stack([t.pim_a for t in row]) for row in tables.verify])
        decg = decp = np.zeros((1, 2))
    else:
        vg = vp = np.zeros((0, 1, 1, 2))
        decg, decp = tables.decode.gpu_a, tables.decode.pim_a
    pg, pp = _stack(tables.prefill, (0, 1, 2))
    maps = [setup.draft_mapping, _flip(setup.draft_mapping, "fc")]
    fc_on_pim = np.array([m.get("fc") == "pim" for m in maps], np.int64)
    tmaps = [setup.target_mapping, _flip(setup.target_mapping, "attention")]
    attn_on_pim = np.array([m.get("attention") == "pim" for m in tmaps], np.int64)
    return (dg, dp, vg, vp, decg, decp, pg, pp, float(CTX_STEP), fc_on_pim, attn_on_pim)


def simulate_compiled(
    setup,
    pair,
    prompt_len,
    output_len,
    accept=None,
    draft_lengths=None,
    confidence=None,
    confidence_later=None,
    serving=None,
    timelines=False,
    arrivals=None,
):
    """``simulate_core`` through the compiled loop (every system, every replica)."""
    prompt, out = requests(prompt_len, output_len)
    x, n_req = out.shape
    slots = n_req if serving is None else serving.slots
    sd = setup.decoding == "sd"
    d = setup.draft_length
    if sd and (accept is None or accept.shape[:2] != (x, n_req)):
        raise SimError(f"SD needs acceptance streams of shape ({x}, {n_req}, T)")
    if sd and accept.shape[2] < out.max() + 4 * d + 4:
        raise SimError(f"acceptance streams of {accept.shape[2]} positions; need >= {out.max() + 4 * d + 4}")
    if setup.pool_tokens and setup.pool_tokens < slots + 1:
        raise SimError(f"{setup.name}: pool of {setup.pool_tokens} tokens cannot hold one query token per request")
    ctx_max = float(prompt.max() + out.max() + 4 * d + 4)
    tables = PassTables(setup, pair, slots, ctx_max, float(prompt.mean()))
    layout = Layout.of(setup.system)
    mb = micro_batches(setup, tables, layout, slots, float(prompt.mean() + out.mean() / 2))
    if arrivals is not None:
        arrivals = np.asarray(arrivals, dtype=float)
        if serving is None or arrivals.shape != out.shape or (np.diff(arrivals, axis=1) < 0).any():
            raise SimError("open loop needs serving slots and sorted arrival times of shape (replicas, requests)")
        if setup.pool_tokens and not setup.eager:
            raise SimError(f"{setup.name}: open-loop serving runs on the asynchronous pool only")
    mode = (
        loop.AD if not sd else loop.SD if not setup.pool_tokens else loop.ASYNC_POOL if setup.eager else loop.SEQ_POOL
    )
    none2 = np.zeros((1, 1), np.int64)
    runs = cont = None
    if sd:
        runs = match_runs(accept.reshape(x * n_req, -1)).reshape(x, n_req, -1)
        cont = runs if accept.dtype == bool else match_runs(accept.reshape(x * n_req, -1), True).reshape(runs.shape)
    later = confidence if confidence_later is None else confidence_later
    tab = flat_tables(setup, tables)
    lay = (layout.stages, layout.pim, layout.machines_per_stage, setup.draft_copies > 1)
    m = max(1, min(mb, slots))
    edges = np.linspace(0, slots, m + 1).round().astype(int)
    keep = edges[1:] > edges[:-1]
    starts, stops = edges[:-1][keep].astype(np.int64), edges[1:][keep].astype(np.int64)
    reps = []
    for r in range(x):
        rq = (
            prompt[r],
            out[r],
            np.zeros(1) if arrivals is None else arrivals[r],
            arrivals is not None,
            none2 if runs is None else runs[r].astype(np.int64),
            cont is not runs,
            none2 if cont is None or cont is runs else cont[r].astype(np.int64),
            none2 if draft_lengths is None else np.asarray(draft_lengths[r], np.int64),
            draft_lengths is not None,
            np.zeros((1, 1)) if confidence is None else np.asarray(confidence[r], np.float64),
            np.zeros((1, 1)) if later is None else np.asarray(later[r], np.float64),
        )
        res = loop.run_replica(
            mode,
            d,
            setup.pool_tokens,
            setup.pool_trigger == "complete",
            serving is not None and serving.prefill,
            timelines,
            tab,
            lay,
            len(layout.machines),
            rq,
            slots,
            starts,
            stops,
        )
        reps.append(ReplicaLog.of(res, out[r], slots, None if arrivals is None else arrivals[r]))
    result = run_result(setup, tables, reps, serving, timelines)
    return dataclasses.replace(result, placement={**result.placement, "micro_batches": float(mb)})
