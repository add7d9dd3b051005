"""Scalar reference engine: plain Python, one request at a time. Used only by tests to check the
vectorized engine (same streams -> same tokens, times and energies)."""

from __future__ import annotations

from adsl.sim.engine import Setup
from adsl.sim.timing import batch_pass


def simulate_one(setup: Setup, pair, prompt: list[float], out: list[int], accept=None) -> dict:
    r = len(out)
    gen = [0] * r
    ctx = list(map(float, prompt))
    pos = [0] * r
    time_s = energy_j = 0.0
    d = setup.draft_length
    while any(gen[i] < out[i] for i in range(r)):
        act = [i for i in range(r) if gen[i] < out[i]]
        n = len(act)
        ctx_mean = sum(ctx[i] for i in act) / n
        if setup.decoding == "sd":
            for j in range(d):
                c = batch_pass(pair.draft, setup.system, n, 1, ctx_mean + j, setup.draft_mapping, setup.schedule)
                time_s += float(c.time_s)
                energy_j += float(c.energy_j)
            c = batch_pass(pair.target, setup.system, n, d + 1, ctx_mean, setup.target_mapping, setup.schedule)
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
            c = batch_pass(pair.target, setup.system, n, 1, ctx_mean, setup.target_mapping, setup.schedule)
            time_s += float(c.time_s)
            energy_j += float(c.energy_j)
            for i in act:
                gen[i] += 1
                ctx[i] += 1
    return {"time_s": time_s, "energy_j": energy_j, "tokens": sum(gen)}
