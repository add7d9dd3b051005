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
    tokens = sum(it["emitted"] for it in measured)
    return {"time_s": time_s, "energy_j": energy_j, "tokens": tokens, "iterations": len(measured)}


def simulate_micro_batches(setup: Setup, pair, prompt, out, accept=None, lengths=None, serving=None, groups=2):
    """Plain-Python reference of the event core's micro-batch loop without a pool (AD, or SD with
    per-micro-batch verification): one replica, request by request; the same machines and pass tables."""
    import heapq

    from adsl.sim.core import PassTables
    from adsl.sim.resources import Layout, Machines

    n_req, slots = len(out), (len(out) if serving is None else serving.slots)
    d = setup.draft_length
    flags = as_flags(np.asarray(accept)) if accept is not None else None
    tables = PassTables(setup, pair, slots, max(prompt) + max(out) + 4 * d + 4, float(np.mean(prompt)))
    layout = Layout.of(setup.system)
    machines = Machines(layout)
    bounds = [round(slots * k / groups) for k in range(groups + 1)]
    members = [list(range(bounds[k], bounds[k + 1])) for k in range(groups)]
    holder = list(range(slots))
    queue = list(range(slots, n_req))
    gen, ctx, pos = [0] * n_req, list(map(float, prompt)), [0] * n_req
    events = []  # (time, emitted, completed)
    energy_keys = []
    heap = [(0.0, k) for k in range(groups) if members[k]]
    while heap:
        t, k = heapq.heappop(heap)
        act = [holder[s] for s in members[k] if holder[s] is not None]
        if not act:
            continue
        if setup.decoding == "ad":
            c = sum(ctx[i] for i in act) / len(act)
            g, p = tables.decode.at(len(act), c)
            end = machines.run(t, layout.segments(g, p), "decode")[1]
            energy_keys.append(("decode", 0, len(act), c, 0, 0.0))
            steps = {i: 1 for i in act}
        else:
            length = {i: (min(int(lengths[i][pos[i]]), d) if lengths is not None else d) for i in act}
            g_sum = p_sum = 0.0
            for j in range(max(length.values())):
                drafting = [i for i in act if length[i] > j]
                c = sum(ctx[i] for i in drafting) / len(drafting) + j
                _, g, p = tables.draft_pass(len(drafting), c)
                g_sum, p_sum = g_sum + g, p_sum + p
                energy_keys.append(("draft", 0, len(drafting), c, 0, 0.0))
            t = machines.run(t, layout.segments(g_sum, p_sum), "draft")[1] if g_sum + p_sum > 0 else t
            q = sum(length[i] + 1 for i in act) / len(act)
            c = sum(ctx[i] for i in act) / len(act)
            v, q0, f, g, p = tables.verify_pass(len(act), c, q)
            end = machines.run(t, layout.segments(g, p), "verify")[1]
            energy_keys.append(("verify", v, len(act), c, q0, f))
            steps = {}
            for i in act:
                a = 0
                while a < length[i] and flags[i][pos[i] + a] & (FIRST if a == 0 else CONTINUED):
                    a += 1
                steps[i] = a + 1
        emitted = done = admitted = 0
        for i in act:
            e = min(steps[i], out[i] - gen[i])
            gen[i] += e
            ctx[i] += e
            pos[i] += steps[i]
            emitted += e
        for s in members[k]:
            i = holder[s]
            if i is not None and gen[i] >= out[i]:
                done += 1
                holder[s] = queue.pop(0) if queue else None
                admitted += holder[s] is not None
        events.append((end, emitted, done))
        if serving is not None and serving.prefill and admitted:
            for table in tables.prefill:
                g, p = table.at(admitted, 0.0)
                end = machines.run(end, layout.segments(g, p), "prefill")[1]
        heapq.heappush(heap, (end, k))
    return {"tokens": sum(e[1] for e in events), "end_s": max(e[0] for e in events), "events": events}
