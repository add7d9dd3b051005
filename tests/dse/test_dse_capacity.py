"""The capacity search: bisection against a brute-force rate grid, on a threshold and on the real
open-loop core."""

from __future__ import annotations

import numpy as np
import pytest

from adsl.dse.capacity import largest_within, meets, probe, system_capacity
from adsl.fitting.modelfile import read_model
from adsl.settings import DseCapacity, LengthDist
from adsl.sim.experiment import Point
from adsl.sim.openloop import LoadPoint
from tests.dse.helpers import sweep_workspace


@pytest.mark.parametrize("threshold", [0.0, 0.003, 0.37, 0.5, 0.999, 1.0, 1.5])
def test_bisection_lands_within_its_resolution_of_the_threshold(threshold):
    calls = []

    def ok(x):
        calls.append(x)
        return x <= threshold

    x, why = largest_within(ok, 1.0, 8)
    if threshold >= 1.0:
        assert (x, why, calls) == (1.0, "throughput", [1.0])
    elif threshold < 1 / 2**8:
        assert (x, why) == (0.0, "unreachable")
    else:
        assert len(calls) == 2 + 8
        assert why == "slo" and x <= threshold and threshold - 1 / 2**8 <= x


def test_a_run_meets_the_slo_only_with_both_bounds_and_finished_requests():
    spec = DseCapacity(4, 100, 10, 5, tpot_p99_s=0.05, ttft_p99_s=2.0)
    run = lambda tpot, ttft, done=10: LoadPoint(1.0, 1.0, done, 0, ttft, 0, tpot, 0, 0, 0)  # noqa: E731
    assert meets(run(0.05, 2.0), spec)
    assert not meets(run(0.051, 1.0), spec)
    assert not meets(run(0.01, 2.01), spec)
    assert not meets(run(0.01, 1.0, done=0), spec)
    assert not meets(run(float("nan"), 1.0), spec)
    assert meets(run(0.01, 99.0), DseCapacity(4, 100, 10, 5, tpot_p99_s=0.05, ttft_p99_s=None))


def test_the_capacity_search_agrees_with_a_brute_force_rate_grid(model_paths, taus):
    """On the real open-loop core (GPU-AD and PIM-SD, batch 8): the searched capacity is within one step of
    the largest rate of a 16-point grid that meets the SLO."""
    ws = sweep_workspace({}, replicas=1)
    models = {c: read_model(p) for c, p in model_paths["OPT-66B"].items()}
    spec = DseCapacity(1, 60, 6, 6, tpot_p99_s=0.05, ttft_p99_s=0.3)
    out = LengthDist(64.0, 0.5, 16)
    for system in ("GPU-AD", "PIM-SD"):
        point = Point("OPT-66B", system, 8, 8, 512, "warn")
        found = system_capacity(ws, point, models, taus["OPT-66B"], spec, 0, out)
        assert found["limited_by"] == "slo" and found["runs"] == 2 + spec.steps
        p = probe(ws, point, models, taus["OPT-66B"], spec, 0, out)
        assert p.saturation_req_s == found["saturation_req_s"]
        grid = np.linspace(p.saturation_req_s / 16, p.saturation_req_s, 16)
        passing = [meets(p.run(rate), spec) for rate in grid]
        best = grid[np.flatnonzero(passing)].max(initial=0.0)
        assert abs(found["capacity_req_s"] - best) <= p.saturation_req_s / 16 + 1e-9, (system, found, best)
