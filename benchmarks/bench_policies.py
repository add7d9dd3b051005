"""The policy zoo's inputs: the compiled replay / running-product / run-length kernels and the one-term
calibration curve, timed side by side with the lockstep numpy forms they replaced (kept here as the
yardstick), on the sizes of the `policies` experiment (training streams of 256 x 256 positions, 19 grid
values per learned threshold); outputs compared element by element.

    python benchmarks/bench_policies.py
"""

from __future__ import annotations

import time

import numpy as np
from scipy import special

from adsl.fitting.generator import match_runs, replay_lengths
from adsl.fitting.joint_model import GH_NODES, calibration_curve
from adsl.sim.policies import leading_run, product_lengths

N, T, GRID, CAP = 256, 256, 19, 16
JOINT = {"a": -0.4, "b": 0.9, "s": 0.6, "g": 0.5}


def lockstep_replay(acc, lengths):
    n, t = acc.shape
    runs, pos, rows = match_runs(acc), np.zeros(n, dtype=np.int64), np.arange(n)
    out = {"drafted": [], "accepted": [], "valid": [], "start": []}
    while (pos < t).any():
        p = np.minimum(pos, t - 1)
        d = lengths[rows, p]
        ok = (pos < t) & (pos + d <= t)
        a = np.minimum(runs[rows, p], d)
        for key, v in (("drafted", np.where(ok, d, 0)), ("accepted", np.where(ok, a, 0)), ("valid", ok), ("start", p)):
            out[key].append(v)
        pos = np.where(ok, pos + a + 1, t)
    return {k: np.array(v) for k, v in out.items()}


def lockstep_product_lengths(log_first, log_later, log_tau, cap):
    t = log_first.shape[-1]
    flat_f, flat_l = log_first.reshape(-1, t).astype(np.float64), log_later.reshape(-1, t).astype(np.float64)
    csum = np.concatenate([np.zeros((flat_l.shape[0], 1)), np.cumsum(flat_l, axis=1)], axis=1)
    start = np.arange(t)
    out = np.minimum(cap, t - start)[None, :].repeat(flat_f.shape[0], axis=0)
    decided = np.zeros(out.shape, dtype=bool)
    for k in range(1, cap + 1):
        end = np.minimum(start + k, t)
        below = (flat_f + csum[:, end] - csum[:, np.minimum(start + 1, t)] < log_tau) & (start + k <= t) & ~decided
        out = np.where(below, k, out)
        decided |= below
    return out.reshape(log_first.shape)


def lockstep_leading_run(ok, cap):
    t = ok.shape[-1]
    flat = ok.reshape(-1, t)
    run, nxt = np.zeros(flat.shape, dtype=np.int64), np.zeros(flat.shape[0], dtype=np.int64)
    for k in range(t - 1, -1, -1):
        nxt = np.where(flat[:, k], nxt + 1, 0)
        run[:, k] = nxt
    return np.minimum(run, cap).reshape(ok.shape)


def two_term_curve(conf, prev_rate):
    nodes, weights = np.polynomial.hermite.hermgauss(GH_NODES)
    eta = (
        JOINT["a"]
        + JOINT["b"] * special.logit(np.clip(conf, 1e-6, 1 - 1e-6))[..., None]
        + np.sqrt(2.0) * JOINT["s"] * nodes
    )
    p = prev_rate * special.expit(eta + JOINT["g"]) + (1 - prev_rate) * special.expit(eta)
    return (p * weights / np.sqrt(np.pi)).sum(axis=-1)


def best_of(fn, repeats=3):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def same(a, b):
    if isinstance(a, dict):
        return all(a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]) for k in a)
    return a.dtype == b.dtype and np.array_equal(a, b)


def main() -> None:
    rng = np.random.default_rng(0)
    conf = rng.beta(6, 1.2, (N, T))
    acc = rng.random((N, T)) < conf
    lengths = rng.integers(0, CAP + 1, (N, T))
    logc = np.log(conf)
    ok = conf > 0.8
    cases = {
        f"replay x {GRID} (one learned threshold)": (
            lambda: [replay_lengths(acc, lengths) for _ in range(GRID)][-1],
            lambda: [lockstep_replay(acc, lengths) for _ in range(GRID)][-1],
        ),
        f"product lengths x {GRID}": (
            lambda: [product_lengths(logc, logc, np.log(0.3), CAP) for _ in range(GRID)][-1],
            lambda: [lockstep_product_lengths(logc, logc, np.log(0.3), CAP) for _ in range(GRID)][-1],
        ),
        f"leading runs x {GRID}": (
            lambda: [leading_run(ok, CAP) for _ in range(GRID)][-1],
            lambda: [lockstep_leading_run(ok, CAP) for _ in range(GRID)][-1],
        ),
        "calibration curve, first and later": (
            lambda: np.stack([calibration_curve(JOINT, conf, prev_rate=r) for r in (0.0, 1.0)]),
            lambda: np.stack([two_term_curve(conf, r) for r in (0.0, 1.0)]),
        ),
    }
    for fn, _ in cases.values():  # compile (or load the cache) outside the timing
        fn()
    print(f"{'':44s} {'compiled / one term':>20s} {'lockstep numpy':>15s} {'ratio':>7s}  identical")
    for name, (new, old) in cases.items():
        t_new, a = best_of(new)
        t_old, b = best_of(old)
        print(f"{name:44s} {t_new * 1e3:17.1f} ms {t_old * 1e3:12.1f} ms {t_old / t_new:6.1f}x  {same(a, b)}")


if __name__ == "__main__":
    main()
