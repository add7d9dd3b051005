"""The workflow's compile job (``adsl.sim.warm``): what it compiles has the argument types the experiments
use, so no simulation job compiles a loop again."""

import dataclasses

from numba.core.registry import CPUDispatcher

from adsl.fitting import generator
from adsl.sim import loop, warm
from adsl.sim.experiment import Point, point_inputs, simulate_point


def _signatures():
    return {
        (m.__name__, name): len(f.signatures)
        for m in (loop, generator)
        for name, f in vars(m).items()
        if isinstance(f, CPUDispatcher)
    }


def test_warm_runs_every_loop_mode_and_leaves_nothing_to_compile_for_an_experiment(ws):
    """After ``warm``, points of every kind of system on flag and bool streams (other batches, continuous
    batching with prefill, the workspace's own settings) call only what it compiled; it reports each run."""
    runs = warm.warm(ws, "OPT-66B")
    assert [(s, k) for s, k, _ in runs] == [(s, "flags" if "calibration" in m else "bool") for s, m in warm.RUNS]
    assert all(sec > 0 for _, _, sec in runs)
    before = _signatures()
    assert all(before[("adsl.sim.loop", mode)] >= 1 for mode in ("micro_batch_loop", "pool_loop"))
    sim = dataclasses.replace(ws.settings.simulation, replicas=2)
    taus = dict.fromkeys(sim.categories, 0.5)
    for model in (warm.MODEL, warm.PLAIN):
        models = dict.fromkeys(sim.categories, model)
        for system in ("AD", "SD", "PIM-AD", "SADDLE-d", "SADDLE-s", "SADDLE"):
            point = Point("Llama3.1-70B", system, 8, 6, 96, "warn")
            simulate_point(point_inputs(ws, sim, point, models, taus))
    assert _signatures() == before
