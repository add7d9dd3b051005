"""Cost of one speculative-decoding iteration (d draft passes + one verification of d + 1 tokens) over
3 pairs x 8 batch sizes x 16 draft lengths x 64 context lengths x 3 systems, vectorized (one call per
pair and system) vs a plain per-point loop over the same functions, measured side by side.

    python benchmarks/bench_costmodel.py [--loop-points N]

Goal (issue 2): >= 1e5 points/s vectorized and >= 50x over the loop.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from adsl.perf.cost import pass_cost
from adsl.workspace import load_workspace

ROOT = Path(__file__).resolve().parents[1]
PAIRS = ("OPT-66B", "Llama3.1-70B", "OPT-175B")
SYSTEMS = ("dgx-a100", "attacc-pim", "saddle")
BATCH = np.array([1, 2, 4, 8, 16, 32, 64, 128])
DRAFT = np.arange(1, 17)
CONTEXT = np.linspace(64, 8192, 64).round()


def iteration_time(pair, system, b, d, c):
    draft = pass_cost(pair.draft, system, b, 1, c).total_time_s
    verify = pass_cost(pair.target, system, b, d + 1, c).total_time_s
    return d * draft + verify


def vectorized(ws):
    b, d, c = BATCH[:, None, None], DRAFT[None, :, None], CONTEXT[None, None, :]
    out = {}
    for p in PAIRS:
        for s in SYSTEMS:
            out[p, s] = iteration_time(ws.models.pair(p), ws.hardware.system(s), b, d, c)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loop-points", type=int, default=1500, help="points timed in the plain loop")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    ws = load_workspace(ROOT / "config" / "config.yaml", base=ROOT)
    n_points = len(PAIRS) * len(SYSTEMS) * BATCH.size * DRAFT.size * CONTEXT.size

    best = float("inf")
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        grid = vectorized(ws)
        best = min(best, time.perf_counter() - t0)
    vec_rate = n_points / best

    rng = np.random.default_rng(0)
    idx = [
        (PAIRS[rng.integers(3)], SYSTEMS[rng.integers(3)], *(rng.integers(n) for n in (8, 16, 64)))
        for _ in range(args.loop_points)
    ]
    t0 = time.perf_counter()
    worst = 0.0
    for p, s, i, j, k in idx:
        t = iteration_time(ws.models.pair(p), ws.hardware.system(s), int(BATCH[i]), int(DRAFT[j]), float(CONTEXT[k]))
        worst = max(worst, abs(float(t) / grid[p, s][i, j, k] - 1))
    loop_rate = args.loop_points / (time.perf_counter() - t0)

    print(f"grid points: {n_points} (3 pairs x 8 batch x 16 draft lengths x 64 contexts x 3 systems)")
    print(f"vectorized: {best * 1e3:.1f} ms for the grid (best of {args.repeats}) = {vec_rate:,.0f} points/s")
    print(f"plain loop: {args.loop_points} random points = {loop_rate:,.0f} points/s")
    print(f"speedup vectorized / loop: {vec_rate / loop_rate:,.0f}x")
    print(f"max relative difference loop vs vectorized: {worst:.2e}")
    met = {True: "met", False: "MISSED"}
    print(f"goals: >= 1e5 points/s {met[vec_rate >= 1e5]}; >= 50x {met[vec_rate / loop_rate >= 50]}")


if __name__ == "__main__":
    main()
