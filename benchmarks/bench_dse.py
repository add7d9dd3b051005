"""The design-space sweep's cost per point: the first configurations of the default design (every system,
each searched), timed in one process, and what that projects for the whole default sweep on this machine
against the issue's 10-minute goal; beside it the same configurations' event-loop time alone.

    python benchmarks/bench_dse.py [configurations]      (default 16; needs tests/sim/golden's models)
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(n: int) -> None:
    from adsl.dse.design import design
    from adsl.dse.sweep import run_chunk
    from adsl.fitting.tau import read_taus
    from adsl.sim import loop
    from adsl.workspace import load_workspace
    from tests.dse.helpers import ACCEPTANCE  # the golden set's acceptance models

    ws = load_workspace(ROOT / "config" / "config.yaml", base=ROOT)
    paths: dict = {}
    for p in sorted(ACCEPTANCE.glob("*/*.json")):
        if p.parent.name != "measured":
            paths.setdefault(p.parent.name, {})[p.stem] = str(p)
    taus = read_taus(str(ACCEPTANCE / "tau.csv"))
    full = ws.settings.dse
    small = dataclasses.replace(full, chunk_points=n)
    ws = dataclasses.replace(ws, settings=dataclasses.replace(ws.settings, dse=small))
    run_chunk(ws, 1, paths, taus)  # compile, load caches and imports outside the timing
    spent = {"loop": 0.0}
    original = loop.run_replica

    def timed(*args):
        t0 = time.perf_counter()
        out = original(*args)
        spent["loop"] += time.perf_counter() - t0
        return out

    loop.run_replica = timed
    t0 = time.perf_counter()
    df = run_chunk(ws, 0, paths, taus)
    wall = time.perf_counter() - t0
    loop.run_replica = original
    configs, points = n, len(df)
    total = len(design(full))
    cores = len(os.sched_getaffinity(0))
    projected = wall / configs * total / cores
    print(f"{configs} configurations x {len(full.systems)} systems = {points} points in {wall:.1f} s")
    print(f"per configuration {wall / configs:.3f} s, per point {wall / points:.3f} s (search included)")
    print(f"event loop {spent['loop']:.1f} s of it ({spent['loop'] / wall:.0%}; replicas on threads: summed)")
    need = 600 * cores / (total * len(full.systems))
    print(f"default sweep: {total} configurations, {total * len(full.systems)} points: about {projected / 60:.1f} min")
    print(f"on {cores} cores (goal: the whole `snakemake dse` in 10 min: a point in <= {need:.3f} s)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 16)
