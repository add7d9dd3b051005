"""Compile the simulator's loops once, before the jobs that run them.

numba compiles a compiled function the first time a process calls it and keeps the machine code in its
cache beside the module (``cache=True``), so every later process loads it in about a second. In a
fresh clone the first simulation jobs would each compile the same loops at once (about 50 s of a core
each on the 2-core machines measured); the workflow's ``compile_simulator`` job does it once, beside the
fits, and the simulation jobs wait for it. ``warm`` runs a few points with a tiny workload through the
same entry points as the experiments (stream draws, the draft-length rules, every loop mode), so what it
compiles has the argument types the experiments use.
"""

from __future__ import annotations

import dataclasses
import time

from adsl.sim.experiment import Point, point_inputs, simulate_point

# A draft model with every part the generator reads: a Beta confidence distribution, a request effect,
# the joint acceptance curve and a calibration that moves confidences with a within-draft term (flag
# streams, as the calibrated pairs give); the values only need to be plausible.
MODEL = {
    "confidence": {"selected": "beta", "candidates": {"beta": {"params": {"a": 4.0, "b": 1.0}}}},
    "confidence_request_effect": {"rho": 0.2},
    "joint": {"a": -0.3, "b": 0.9, "s": 0.5, "g": 0.4},
    "calibration": {"shift": 0.3, "draft_continuation": 1.0, "applies_to": "confidence"},
    "match_rate": 0.6,
}
PLAIN = {k: v for k, v in MODEL.items() if k != "calibration"}  # as measured: bool streams
# systems whose setups reach every loop mode: decode passes, drafting and verification per micro-batch,
# the sequential pool and the asynchronous
# pool; then one on bool streams
RUNS = (("PIM-AD", MODEL), ("GPU-SD", MODEL), ("PIM-SD", MODEL), ("SADDLE-p", MODEL), ("SADDLE", MODEL))
RUNS += (("GPU-SD", PLAIN),)


def warm(ws, pair: str) -> list[tuple[str, str, float]]:
    """Run each of ``RUNS`` once at a tiny point of ``pair`` (one replica, batch 4, 48 tokens a request,
    timelines kept); returns (system, streams, seconds) of each: compilation, or loading the cache."""
    sim = ws.settings.simulation
    sim = dataclasses.replace(sim, replicas=1, prompt_len=16, precision=dataclasses.replace(sim.precision, target=0))
    taus = dict.fromkeys(sim.categories, 0.3)
    out = []
    for system, model in RUNS:
        t0 = time.perf_counter()
        point = Point(pair, system, 4, sim.draft_length, 48, "warn")
        simulate_point(point_inputs(ws, sim, point, dict.fromkeys(sim.categories, model), taus), timelines=True)
        out.append((system, "flags" if "calibration" in model else "bool", time.perf_counter() - t0))
    return out
