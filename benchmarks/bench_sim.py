"""Simulator speed, measured side by side in one run: the compiled event loop against the same loop run
uncompiled (``NUMBA_DISABLE_JIT=1``: the scalar reference), numba's compile time cold and cached, and
the 76 configuration points of the Fig. 3 sweeps plus 3 pairs x 5 systems x batch 16-128.

Acceptance streams come from a fixed synthetic acceptance model here (speed does not depend on the
fitted values), so the benchmark runs without the committed profile.

    python benchmarks/bench_sim.py [--quick]

Goals (issue 24): <= 0.05 s per point at batch 128 (OPT-66B; AD and SD on the motivation pipeline,
PIM-SD, SADDLE; 4 replicas of 4 x batch requests), compiled >= 50x uncompiled, cold compile <= 20 s,
cached <= 1 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
AT_128 = ("AD", "SD", "PIM-SD", "SADDLE")


def synthetic_models(categories):
    from adsl.fitting.distributions import fit_confidence
    from adsl.fitting.entropy import fit_entropy

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


def _context():
    from adsl.workspace import load_workspace

    ws = load_workspace(ROOT / "config" / "config.yaml", base=ROOT)
    sim = ws.settings.simulation
    return ws, sim, synthetic_models(sim.categories), dict.fromkeys(sim.categories, 0.3)


def time_points(
    systems, replicas: int | None = None, loop_only: bool = False, workers: int | None = None
) -> dict[str, float]:
    """Seconds of ``simulate_point`` (the simulator alone: its inputs are drawn beforehand) per system at
    batch 128, OPT-66B, the best of three runs, its replicas ``workers`` at once (default: one thread per
    CPU); ``loop_only``: of its calls of the event loop alone (without building the cost tables and the
    result), summed over the replicas."""
    import dataclasses

    from adsl.sim import core
    from adsl.sim.experiment import Point, point_inputs, simulate_point

    ws, sim, models, taus = _context()
    if replicas is not None:
        sim = dataclasses.replace(sim, replicas=replicas)
    loop, spent = core.loop.run_replica, [0.0]

    def timed(*args):
        t0 = time.perf_counter()
        try:
            return loop(*args)
        finally:
            spent[0] += time.perf_counter() - t0

    out = {}
    for system in systems:
        inputs = point_inputs(ws, sim, Point("OPT-66B", system, 128, 8, 1024, "warn"), models, taus)
        times = []
        for _ in range(3):
            spent[0] = 0.0
            core.loop.run_replica = timed
            t0 = time.perf_counter()
            try:
                simulate_point(inputs, workers=workers)
            finally:
                core.loop.run_replica = loop
            times.append(spent[0] if loop_only else time.perf_counter() - t0)
        out[system] = min(times)
    return out


def _child(code: str, env: dict) -> dict:
    """Run ``code`` in a fresh interpreter (numba's JIT and cache are per process); it prints JSON."""
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env}, cwd=ROOT
    )
    if res.returncode:
        raise SystemExit(f"benchmark child failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


FIRST_RUN = """
import json, sys, time
t0 = time.perf_counter()
sys.path.insert(0, "benchmarks")
from bench_sim import time_points
import adsl.sim.experiment, adsl.workspace
t1 = time.perf_counter()
time_points(["AD", "SD", "SADDLE-p", "SADDLE"], replicas=1)
t2 = time.perf_counter()
time_points(["AD", "SD", "SADDLE-p", "SADDLE"], replicas=1)
t3 = time.perf_counter()
print(json.dumps({"imports_s": t1 - t0, "first_s": t2 - t1, "again_s": t3 - t2}))
"""


def compile_times() -> tuple[dict, dict]:
    """A first run of every loop mode in a fresh process (imports timed apart), with an empty numba cache
    and then with the cache it left, each followed by the same run again in that process: what the first
    run takes beyond the second is compilation (or loading compiled code from the cache)."""
    with tempfile.TemporaryDirectory() as cache:
        env = {"NUMBA_CACHE_DIR": cache}
        cold = _child(FIRST_RUN, env)
        cached = _child(FIRST_RUN, env)
    return cold, cached


def sweep() -> tuple[float, int]:
    """The 76 points through ``run_point`` (inputs included): seconds and points."""
    from adsl.sim.experiment import Point, run_point

    ws, sim, models, taus = _context()
    t0 = time.perf_counter()
    for p in bench_points():
        run_point(ws, sim, Point(*p), models, taus)
    return time.perf_counter() - t0, len(bench_points())


def main(quick: bool = False) -> None:
    compiled = time_points(AT_128)  # compiles (or loads the cache) first: the first run is not timed
    one_thread = time_points(AT_128, workers=1)
    loop_4 = time_points(AT_128, loop_only=True, workers=1)
    reps = 1  # the uncompiled loop is slow: one replica each, against the compiled loop's one replica
    loop_1 = time_points(AT_128, replicas=reps, loop_only=True)
    code = "import json, sys; sys.path.insert(0, 'benchmarks'); from bench_sim import time_points; "
    code += f"print(json.dumps(time_points({list(AT_128)!r}, replicas={reps}, loop_only=True)))"
    plain = _child(code, {"NUMBA_DISABLE_JIT": "1"})
    from adsl.sim.core import cpus

    cpus = cpus()
    print(
        "per point at batch 128, OPT-66B (inputs drawn beforehand; 4 replicas of 4 x 128 requests), "
        f"replicas on {cpus} threads and on 1:"
    )
    head = (f"{cpus} threads", "1 thread", "its loop", "loop, 1 replica", "uncompiled", "ratio")
    print(f"  {'system':8s} " + " ".join(f"{h:>{w}s}" for h, w in zip(head, (10, 9, 9, 16, 11, 6), strict=True)))
    for s in AT_128:
        ratio = plain[s] / loop_1[s]
        print(
            f"  {s:8s} {compiled[s]:9.3f}s {one_thread[s]:8.3f}s {loop_4[s]:8.3f}s {loop_1[s]:15.4f}s "
            f"{plain[s]:10.2f}s {ratio:5.0f}x"
        )
    worst = max(compiled.values())
    print(
        f"  worst {worst:.3f} s a point (goal <= 0.05 s: {'met' if worst <= 0.05 else 'MISSED'}); the loop compiled vs "
        f"uncompiled {min(plain[s] / loop_1[s] for s in AT_128):.0f}x at least (goal >= 50x)"
    )
    cold, cached = compile_times()
    c_cold, c_cached = (max(0.0, r["first_s"] - r["again_s"]) for r in (cold, cached))
    print(
        f"first run of every loop mode in a fresh process (imports {cold['imports_s']:.1f} s apart): "
        f"{cold['first_s']:.1f} s with an empty numba cache, {cached['first_s']:.1f} s with the cache, "
        f"{cold['again_s']:.1f} / {cached['again_s']:.1f} s again in the same process: compile {c_cold:.1f} s cold "
        f"(goal <= 20 s), {c_cached:.1f} s cached (goal <= 1 s)"
    )
    if not quick:
        wall, n = sweep()
        print(f"{n} configuration points (run_point: inputs, simulation, row), 4 replicas each: {wall:.1f} s")


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
