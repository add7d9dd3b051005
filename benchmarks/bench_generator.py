"""Drawing acceptance streams: 1e6 requests x 64 positions in one vectorized call (issue 4 goal:
< 2 s on the 2-core development machine), measured next to the scalar per-request replay it feeds.

    python benchmarks/bench_generator.py
"""

from __future__ import annotations

import time

import numpy as np

from adsl.fitting.distributions import fit_confidence
from adsl.fitting.generator import draw_streams, fixed_lengths, replay_lengths
from adsl.profiling.replay import replay


def main() -> None:
    rng = np.random.default_rng(0)
    conf_fit = fit_confidence(np.concatenate([rng.beta(8, 1, 3000), rng.beta(2, 2, 1000)]))
    # every term a fitted model has: confidence after a match / a miss, a per-request confidence level
    model = {
        "confidence": conf_fit,
        "confidence_given_previous": {"after_match": conf_fit, "after_miss": fit_confidence(rng.beta(3, 2, 2000))},
        "confidence_request_effect": {"rho": 0.1},
        "joint": {"a": -0.5, "b": 0.9, "s": 0.6, "g": 0.5},
    }
    draw_streams(model, 1000, 64, np.random.default_rng(1))  # warm-up (quantile table, imports)
    times = []
    for seed in range(3):
        t0 = time.perf_counter()
        conf, acc = draw_streams(model, 1_000_000, 64, np.random.default_rng(seed))
        times.append(time.perf_counter() - t0)
    print(
        f"draw_streams 1e6 x 64: best {min(times):.2f} s, median {np.median(times):.2f} s "
        f"({conf.nbytes / 1e6:.0f} MB confidence + {acc.nbytes / 1e6:.0f} MB accepted)"
    )
    print(f"goal < 2 s: {'met' if min(times) < 2 else 'MISSED'}")

    sub = acc[:2000]
    t0 = time.perf_counter()
    vec = replay_lengths(sub, fixed_lengths(sub.shape, 8))
    t_vec = time.perf_counter() - t0
    t0 = time.perf_counter()
    ref = [replay(sub[r], np.full(64, 8)) for r in range(sub.shape[0])]
    t_ref = time.perf_counter() - t0
    same = all(vec["accepted"][vec["valid"][:, r], r].tolist() == ref[r].accepted.tolist() for r in range(len(ref)))
    print(
        f"replay of 2000 streams at d = 8: vectorized {t_vec * 1e3:.1f} ms, per-request {t_ref * 1e3:.0f} ms, "
        f"{t_ref / t_vec:.0f}x, identical: {same}"
    )


if __name__ == "__main__":
    main()
