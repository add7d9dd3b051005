"""Scalar reference engine: plain Python, one request at a time. Used only by tests to check the
vectorized engine (same streams -> same tokens, times and energies)."""

from __future__ import annotations

from adsl.sim.engine import Setup, cost_tables


def simulate_one(setup: Setup, pair, prompt: list[float], out: list[int], accept=None) -> dict:
    r = len(out)
    gen = [0] * r
    ctx = list(map(float, prompt))
    pos = [0] * r
    time_s = energy_j = 0.0
    d = setup.draft_length
    tables = cost_tables(setup, pair, r, max(prompt) + max(out) + d)
    while any(gen[i] < out[i] for i in range(r)):
        act = [i for i in range(r) if gen[i] < out[i]]
        n = len(act)
        ctx_mean = sum(ctx[i] for i in act) / n
        if setup.decoding == "sd":
            for j in range(d):
                c = tables["draft"].lookup(n, ctx_mean + j)
                time_s += float(c.time_s)
                energy_j += float(c.energy_j)
            c = tables["verify"].lookup(n, ctx_mean)
            time_s += float(c.time_s)
            energy_j += float(c.energy_j)
            for i in act:
                a = 0
                while a < d and accept[i][pos[i] + a]:
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
    return {"time_s": time_s, "energy_j": energy_j, "tokens": sum(gen)}
