"""Static batches of one micro-batch give the results of the round engines before continuous batching.

``static_golden.json`` holds time, energy and tokens of these runs computed at commit 4213aec (the last
engine without request slots) by the vectorized round engine; the runs below rebuild the same inputs from
the same seed and run them through ``simulate_core``. AD and SD (fixed and adaptive lengths) without a
pool and with one micro-batch are the same model in both: one micro-batch runs its passes back to back,
each as long as the round engine's pass, so the results agree to rounding (rtol 1e-9).

Entries dropped from the file: the pooled runs (SADDLE-p, SADDLE-s, SADDLE with the dynamic scheduler)
came from the round-based pools, which verified every micro-batch's drafts in lock-step rounds, a
different model from the event loop's pools; and the micro-batched AD / SD runs (motivation-4gpu with 5
micro-batches, saddle-tp with 2 overlapped ones) came from the round engine's closed-form micro-batch
overlap, where the event loop schedules each micro-batch's passes on the machines (up to 30 % apart)."""

import json
from pathlib import Path

import numpy as np

from adsl.fitting.generator import running_product_lengths
from adsl.settings import MicroBatching
from adsl.sim.core import simulate_core
from adsl.sim.setup import Setup
from adsl.sim.workload import Workload

GOLDEN = json.loads((Path(__file__).parent / "static_golden.json").read_text())
SCHEDULES = {"dgx-a100": MicroBatching()}


def _runs(hw, pair):
    rng = np.random.default_rng(7)
    x, r, t = 2, 6, 140
    conf = rng.beta(5, 1, (x, r, t)).astype(np.float32)
    acc = rng.random((x, r, t)) < conf
    flags = acc.astype(np.uint8) | ((rng.random((x, r, t)) < 0.9).astype(np.uint8) << 1)
    out = rng.integers(20, 90, (x, r))
    prompt = np.full((x, r), 64.0)
    for name, sched in SCHEDULES.items():
        s = hw.system(name)
        m = {"fc": "gpu", "attention": "pim" if s.pim else "gpu"}
        yield f"{name}/ad", simulate_core(Setup("t", s, "ad", 0, m, m, sched), pair, Workload(prompt, out))
        yield f"{name}/sd", simulate_core(Setup("t", s, "sd", 4, m, m, sched), pair, Workload(prompt, out, flags))
        lengths = np.stack([running_product_lengths(c, 0.5, 4) for c in conf])
        adaptive = Setup("t", s, "sd", 4, m, m, sched, policy="running_product")
        yield f"{name}/sd_adaptive", simulate_core(adaptive, pair, Workload(prompt, out, acc, lengths))


def test_static_batches_reproduce_the_round_engines_before_continuous_batching(models, hw):
    seen = set()
    for key, res in _runs(hw, models.pair("OPT-66B")):
        seen.add(key)
        assert res.placement["micro_batches"] == 1.0, key
        np.testing.assert_array_equal(res.tokens, GOLDEN[key]["tokens"], err_msg=key)
        for field in ("time_s", "energy_j"):
            np.testing.assert_allclose(getattr(res, field), GOLDEN[key][field], rtol=1e-9, err_msg=f"{key} {field}")
    assert seen == set(GOLDEN)
