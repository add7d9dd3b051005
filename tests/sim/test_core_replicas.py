"""Replicas are independent runs: every replica of a run gives exactly what it gives run alone."""

import numpy as np
import pytest

from adsl.settings import Continuous
from adsl.sim.core import simulate_core
from adsl.sim.workload import Workload
from tests.sim.builders import inputs, pooled

PAIR = "OPT-66B"


def _replica(arr, r):
    return None if arr is None else arr[r : r + 1]


@pytest.mark.parametrize("trigger", ["complete", "idle"])
@pytest.mark.parametrize("serving", ["static", "continuous", "open"])
@pytest.mark.parametrize("flagged", [False, True])
def test_each_replica_equals_its_run_alone(pair, hw, trigger, serving, flagged):
    """On the asynchronous pool, each replica's result (time,
    energy, tokens, device, class and stage times, pool counters, window, per-request times in the open
    loop) is exactly what it gives when run alone. Replicas share outputs and prompts (the cost tables
    depend on them) and differ in acceptance streams, running-product lengths and arrivals."""
    x, n, d, t = 3, 18, 4, 160
    rng = np.random.default_rng(11)
    conf, later, acc, out, lengths = inputs(11, x, n, t, flagged)
    out = np.broadcast_to(out[0], (x, n)).copy()
    prompt = np.full((x, n), 64.0)
    setup = pooled(hw, True, trigger, mb=2, d=d, pool=40)
    slots = 6
    srv = None if serving == "static" else Continuous(slots, 2, True)
    arrivals = np.cumsum(rng.exponential(0.02, (x, n)), axis=1) if serving == "open" else None
    if serving == "static":
        prompt, out = prompt[:, :slots], out[:, :slots].copy()
        acc, conf, later, lengths = acc[:, :slots], conf[:, :slots], later[:, :slots], lengths[:, :slots]
    run = lambda r=None: simulate_core(  # noqa: E731
        setup,
        pair,
        Workload(
            *(a if r is None else _replica(a, r) for a in (prompt, out, acc, lengths, conf, later)),
            arrivals=arrivals if r is None else _replica(arrivals, r),
        ),
        serving=srv,
    )
    together = run()
    assert together.pool["eager"].min() > 0 and len(set(together.time_s)) == x  # replicas differ
    for r in range(x):
        alone = run(r)
        for name in ("time_s", "energy_j", "tokens", "iterations", "drafted", "request_rounds"):
            assert getattr(together, name)[r] == getattr(alone, name)[0], name
        for name in ("busy_s", "class_s", "stage_s", "window", "pool"):
            for k, v in getattr(alone, name).items():
                assert getattr(together, name)[k][r] == v[0], (name, k)
        if serving == "open":
            mine = together.requests["replica"] == r
            for k, v in alone.requests.items():
                if k != "replica":
                    np.testing.assert_array_equal(together.requests[k][mine], v, err_msg=k)
