"""Simulator speed: the Fig. 3 sweeps plus 3 pairs x 4 batch sizes x 5 systems (with SADDLE) at 1024 tokens, and the
vectorized engine against the scalar reference on the same workload, measured side by side.

Acceptance streams come from a fixed synthetic acceptance model here (speed does not depend on the
fitted values), so the benchmark runs without the committed profile.

    python benchmarks/bench_sim.py
Goals: the vectorized engine >= 50x its scalar reference with continuous batching; < 0.2 s per AD / SD
configuration point at batch 128 (the configured batching: continuous, requests_per_slot x batch requests
per point); the event-driven core < 0.5 s per point at batch 128, and its time beside its scalar reference
(adsl.sim.reference.simulate_micro_batches) on one micro-batched workload.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np

from adsl.fitting.distributions import fit_confidence
from adsl.fitting.entropy import fit_entropy
from adsl.sim.experiment import Point, request_streams, run_point
from adsl.sim.reference import simulate_one
from adsl.sim.systems import Context, build
from adsl.workspace import load_workspace

ROOT = Path(__file__).resolve().parents[1]


def synthetic_models(categories):
    rng = np.random.default_rng(0)
    conf = fit_confidence(np.concatenate([rng.beta(8, 1, 3000), rng.beta(2, 2, 1000)]))
    c = np.linspace(0.01, 0.99, 2000)
    entropy = fit_entropy(c, 3.0 * (1 - c) ** 1.5)  # the policy zoo's entropy rule needs an entropy term
    joint = {"a": -0.3, "b": 0.9, "s": 0.6, "g": 0.5}
    return {k: {"confidence": conf, "joint": joint, "entropy": entropy, "match_rate": 0.6} for k in categories}


def bench_points() -> list[tuple]:
    """The Fig. 3 sweeps and 3 pairs x 5 systems x batch 16-128, as ``Point`` fields (76 points)."""
    points = [("OPT-66B", s, b, 8, 1024, "warn") for s in ("AD", "SD") for b in (8, 16, 32, 64, 128)]
    points += [("OPT-66B", s, 64, d, 1024, "warn") for s in ("SD",) for d in (2, 3, 4, 5, 6, 12)]
    points += [
        (p, s, b, 8, 1024, "warn")
        for p in ("OPT-66B", "Llama3.1-70B", "OPT-175B")
        for s in ("GPU-AD", "GPU-SD", "PIM-AD", "PIM-SD", "SADDLE")
        for b in (16, 32, 64, 128)
    ]
    return points


def booking_floor(ws, sim, models, taus, whole: dict[str, float]) -> None:
    """Per event-core point at batch 128: the passes it books on the machines, and what booking them
    alone costs in CPython (``Machines.run`` + ``advance`` on a pass of the same segment count): a floor
    for any per-event core that keeps first-fit booking in Python, beside the whole point's time
    (``whole``: system -> seconds, as measured by the sweep)."""
    import timeit

    from adsl.sim import resources

    plain = resources.Machines.run
    for system in ("AD", "SD", "PIM-SD", "SADDLE"):
        calls = []

        def counted(self, release, segments, kind, _calls=calls):
            _calls.append((self.layout, len(segments)))
            return plain(self, release, segments, kind)

        point = Point("OPT-66B", system, 128, 8, 1024, "warn")
        resources.Machines.run = counted
        try:
            run_point(ws, sim, point, models, taus)
        finally:
            resources.Machines.run = plain
        layout, segs = calls[-1][0], sum(c[1] for c in calls) / len(calls)
        machines, clock = resources.Machines(layout), [0.0]
        segments = layout.segments(0.01, 0.004)[: max(1, round(segs))]

        def book(m=machines, seg=segments, clock=clock):
            clock[0] = m.run(clock[0], seg, "")[1] - 0.004
            m.advance(clock[0])

        per = min(timeit.repeat(book, number=5000, repeat=3)) / 5000
        print(
            f"  {system:7s} {len(calls):6d} passes booked ({segs:.1f} segments each): booking alone "
            f"{len(calls) * per:.2f} s ({per * 1e6:.1f} us a pass) of {whole[system]:.2f} s for the point"
        )


def main() -> None:
    ws = load_workspace(ROOT / "config" / "config.yaml", base=ROOT)
    sim = ws.settings.simulation
    models = synthetic_models(sim.categories)
    points = bench_points()
    taus = dict.fromkeys(sim.categories, 0.3)  # speed does not depend on the calibrated tau
    t0 = time.perf_counter()
    tokens, at_128 = 0, {}
    for p, s, b, d, seq, mem in points:
        t1 = time.perf_counter()
        row = run_point(ws, sim, Point(p, s, b, d, seq, mem), models, taus)
        if b == 128:
            at_128.setdefault(s, {})[p] = time.perf_counter() - t1
        tokens += row["tokens"] * sim.replicas
    wall = time.perf_counter() - t0
    print(f"{len(points)} configuration points ({sim.replicas} replicas each): {wall:.1f} s wall")
    print(f"simulated generated tokens per second of wall time: {tokens / wall:,.0f}")
    # one micro-batch (the DGX, PIM-AD where splitting does not pay): the vectorized engine; several
    # (the pipelined motivation system, per-micro-batch verification, SADDLE's pools): the event loop
    vectorized = [t for s, ts in at_128.items() for t in ts.values() if s in ("GPU-AD", "GPU-SD", "PIM-AD")]
    events = {s: max(ts.values()) for s, ts in at_128.items() if s in ("AD", "SD", "PIM-SD", "SADDLE")}
    print(
        f"per GPU-AD / GPU-SD / PIM-AD point at batch 128 (one micro-batch: the vectorized engine): "
        f"max {max(vectorized):.3f} s "
        f"(goal < 0.2 s: {'met' if max(vectorized) < 0.2 else 'MISSED'})"
    )
    print(
        "per point at batch 128 on the event-driven core: "
        + ", ".join(f"{s} max {t:.2f} s" for s, t in events.items())
        + f" (goal < 0.5 s: {'met' if max(events.values()) < 0.5 else 'MISSED'})"
    )

    print("event core at batch 128, OPT-66B, the work a per-event core cannot avoid:")
    booking_floor(ws, sim, models, taus, {s: at_128[s]["OPT-66B"] for s in events})

    # the policy zoo (figure policies): every policy on both system styles at batch 16 and 128, OPT-66B
    zoo = sim.experiments["policies"].policies
    times = {}
    for system in ("GPU-SD", "SADDLE"):
        for b in (16, 128):
            for policy in zoo:
                t1 = time.perf_counter()
                run_point(ws, sim, Point("OPT-66B", system, b, 8, 1024, "warn", policy), models, taus)
                times[(system, b, policy)] = time.perf_counter() - t1
    print("policy sweep, time per configuration point (s), GPU-SD / SADDLE at batch 16 | 128:")
    for policy in zoo:
        cells = " | ".join(f"{times['GPU-SD', b, policy]:.2f} / {times['SADDLE', b, policy]:.2f}" for b in (16, 128))
        print(f"  {policy:16s} {cells}")
    print(f"  mean {np.mean(list(times.values())):.2f} s, max {max(times.values()):.2f} s per point")

    # the event core against its scalar reference: PIM-SD-style (2 micro-batches, each drafting d = 8 and
    # verifying on its own), batch 128, continuous batching, one replica, 1024 tokens
    from adsl.sim.core import simulate_core
    from adsl.sim.reference import simulate_micro_batches

    pair = ws.models.pair("OPT-66B")
    batching = dataclasses.replace(sim.batching, mode="continuous")
    n, serving = batching.requests(128), batching.serving(128)
    setup = build("PIM-SD", Context(ws.hardware, pair, 128, 1024, 8, sim.systems, draft_placement="best"))
    out = np.full((1, n), 1024 - 128)
    _, _, acc = request_streams(models, sim.categories, 1, n, 1024 + 65, 0)
    prompts = np.full((1, n), 128.0)
    t1 = time.perf_counter()
    ev = simulate_core(setup, pair, prompts, out, acc, serving=serving)
    t_ev = time.perf_counter() - t1
    t1 = time.perf_counter()
    ref = simulate_micro_batches(setup, pair, list(prompts[0]), list(out[0]), acc[0], serving=serving, groups=2)
    t_ref = time.perf_counter() - t1
    print(
        f"event core {t_ev * 1e3:.0f} ms vs its scalar reference {t_ref * 1e3:.0f} ms on one PIM-SD workload "
        f"({n} requests through 128 slots, 2 micro-batches): {t_ref / t_ev:.1f}x; "
        f"same tokens: {int(ev.window['total_tokens'][0]) == ref['tokens']}"
    )

    # same workload, vectorized vs scalar reference: SD d = 8, batch 128 with continuous batching
    # (the configured requests per slot and warm-up), 4 replicas, 1024 tokens
    pair = ws.models.pair("OPT-66B")
    setup = build("SD", Context(ws.hardware, pair, 128, 1024, 8, sim.systems))
    batching = dataclasses.replace(sim.batching, mode="continuous")
    x, b, prompt = 4, 128, 128
    n = batching.requests(b)
    serving = batching.serving(b)
    out = np.full((x, n), 1024 - prompt)
    _, _, acc = request_streams(models, sim.categories, x, n, 1024 + 65, 0)
    from adsl.sim.engine import simulate

    def best_of(fn, k=3):  # both engines timed the same way, best of k runs
        times = []
        for _ in range(k):
            t1 = time.perf_counter()
            result = fn()
            times.append(time.perf_counter() - t1)
        return result, min(times)

    vec, t_vec = best_of(lambda: simulate(setup, pair, np.full((x, n), float(prompt)), out, acc, serving=serving))
    ref, t_ref = best_of(
        lambda: [
            simulate_one(setup, pair, [float(prompt)] * n, list(out[i]), acc[i], serving=serving) for i in range(x)
        ]
    )
    same = all(abs(ref[i]["time_s"] / vec["time_s"][i] - 1) < 1e-9 for i in range(x))
    print(
        f"continuous batching, {n} requests through {b} slots, best of 3: vectorized engine {t_vec * 1e3:.0f} ms "
        f"vs scalar reference {t_ref * 1e3:.0f} ms on the same workload: {t_ref / t_vec:.0f}x "
        f"(goal >= 50x: {'met' if t_ref / t_vec >= 50 else 'MISSED'}); identical times: {same}"
    )


if __name__ == "__main__":
    main()
