"""Scalar reference engine: plain Python, one request at a time. Used only by tests to check the
vectorized engine (same streams -> same tokens, times and energies)."""

from __future__ import annotations

import numpy as np

from adsl.fitting.generator import CONTINUED, FIRST, as_flags
from adsl.sim.engine import Setup, cost_tables, needed_qs, verify_cost, verify_tables


def simulate_one(setup: Setup, pair, prompt: list[float], out: list[int], accept=None, lengths=None) -> dict:
    r = len(out)
    flags = as_flags(np.asarray(accept)) if accept is not None else None
    gen = [0] * r
    ctx = list(map(float, prompt))
    pos = [0] * r
    d = setup.draft_length
    ctx_max = max(prompt) + max(out) + d
    tables = cost_tables(setup, pair, r, ctx_max)
    time_s = energy_j = 0.0
    verifies = []  # (n, ctx_mean, q_mean): verification costs need every q's table, read at the end
    while any(gen[i] < out[i] for i in range(r)):
        act = [i for i in range(r) if gen[i] < out[i]]
        n = len(act)
        ctx_mean = sum(ctx[i] for i in act) / n
        if setup.decoding == "sd":
            length = {i: (min(int(lengths[i][pos[i]]), d) if lengths is not None else d) for i in act}
            for j in range(d):
                drafting = [i for i in act if length[i] > j]
                if drafting:
                    c = tables["draft"].lookup(len(drafting), sum(ctx[i] for i in drafting) / len(drafting) + j)
                    time_s += float(c.time_s)
                    energy_j += float(c.energy_j)
            verifies.append((n, ctx_mean, sum(length[i] + 1 for i in act) / n))
            for i in act:
                a = 0
                # a draft's first token and its later ones may have different outcomes (bit flags)
                while a < length[i] and flags[i][pos[i] + a] & (FIRST if a == 0 else CONTINUED):
                    a += 1
                e = min(a + 1, out[i] - gen[i])
                pos[i] += a + 1
                gen[i] += e
                ctx[i] += e
        else:
            c = tables["decode"].lookup(n, ctx_mean)
            time_s += float(c.time_s)
            energy_j += float(c.energy_j)
            for i in act:
                gen[i] += 1
                ctx[i] += 1
    if verifies:
        vt = verify_tables(setup, pair, needed_qs([q for _, _, q in verifies]), r, ctx_max)
        for n, c_mean, q in verifies:
            c = verify_cost(vt, np.asarray(n), np.asarray(c_mean), np.asarray(q))
            time_s += float(c.time_s)
            energy_j += float(c.energy_j)
    return {"time_s": time_s, "energy_j": energy_j, "tokens": sum(gen)}
