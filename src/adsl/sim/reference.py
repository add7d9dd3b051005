"""Scalar reference engine: plain Python, one request at a time. Used only by tests and the benchmark to
check the vectorized engine (same streams -> same tokens, times and energies), static batches and
continuous batching alike."""

from __future__ import annotations

import numpy as np

from adsl.fitting.generator import CONTINUED, FIRST, as_flags
from adsl.sim.engine import Setup, cost_tables, needed_qs, prefill_cost, verify_cost, verify_tables


def simulate_one(
    setup: Setup, pair, prompt: list[float], out: list[int], accept=None, lengths=None, serving=None
) -> dict:
    """One replica: ``prompt``/``out`` per request; ``serving`` as in ``adsl.sim.engine.simulate``."""
    n_req = len(out)
    slots = n_req if serving is None else serving.slots
    flags = as_flags(np.asarray(accept)) if accept is not None else None
    d = setup.draft_length
    ctx_max = max(prompt) + max(out) + d
    tables = cost_tables(setup, pair, slots, ctx_max)
    holder = list(range(slots))  # request held by each slot (None: idle)
    queue = list(range(slots, n_req))
    gen, ctx, pos = [0] * n_req, list(map(float, prompt)), [0] * n_req
    iterations = []  # per iteration: {time, energy, emitted, busy slots, completions, admitted}
    verifies = []  # (iteration, n, ctx_mean, q_mean): verification costs need every q's table
    while any(h is not None for h in holder):
        act = [h for h in holder if h is not None]
        n = len(act)
        it = {"time": 0.0, "energy": 0.0, "emitted": 0, "busy": n, "done": 0, "admitted": 0}
        ctx_mean = sum(ctx[i] for i in act) / n
        if setup.decoding == "sd":
            length = {i: (min(int(lengths[i][pos[i]]), d) if lengths is not None else d) for i in act}
            for j in range(d):
                drafting = [i for i in act if length[i] > j]
                if drafting:
                    c = tables["draft"].lookup(len(drafting), sum(ctx[i] for i in drafting) / len(drafting) + j)
                    it["time"] += float(c.time_s)
                    it["energy"] += float(c.energy_j)
            verifies.append((len(iterations), n, ctx_mean, sum(length[i] + 1 for i in act) / n))
            for i in act:
                a = 0
                # a draft's first token and its later ones may have different outcomes (bit flags)
                while a < length[i] and flags[i][pos[i] + a] & (FIRST if a == 0 else CONTINUED):
                    a += 1
                e = min(a + 1, out[i] - gen[i])
                pos[i] += a + 1
                gen[i] += e
                ctx[i] += e
                it["emitted"] += e
        else:
            c = tables["decode"].lookup(n, ctx_mean)
            it["time"] += float(c.time_s)
            it["energy"] += float(c.energy_j)
            for i in act:
                gen[i] += 1
                ctx[i] += 1
                it["emitted"] += 1
        for s, i in enumerate(holder):  # finished requests leave; queued ones take their slots in order
            if i is not None and gen[i] >= out[i]:
                it["done"] += 1
                holder[s] = queue.pop(0) if queue else None
                it["admitted"] += holder[s] is not None
        if serving is not None and serving.prefill and it["admitted"]:
            c = prefill_cost(setup, pair, np.asarray(it["admitted"]), float(np.mean(prompt)))
            it["time"] += float(c.time_s)
            it["energy"] += float(c.energy_j)
        iterations.append(it)
    if verifies:
        vt = verify_tables(setup, pair, needed_qs([q for *_, q in verifies]), slots, ctx_max)
        for k, n, c_mean, q in verifies:
            c = verify_cost(vt, np.asarray(n), np.asarray(c_mean), np.asarray(q))
            iterations[k]["time"] += float(c.time_s)
            iterations[k]["energy"] += float(c.energy_j)
    done_before, measured = 0, []
    for it in iterations:
        if serving is None or (done_before >= serving.warmup and it["busy"] == slots):
            measured.append(it)
        done_before += it["done"]
    time_s = sum(it["time"] for it in measured)
    energy_j = sum(it["energy"] for it in measured)
    if setup.static_power:
        energy_j += setup.system.static_power_w * time_s
    return {"time_s": time_s, "energy_j": energy_j, "tokens": sum(it["emitted"] for it in measured)}
