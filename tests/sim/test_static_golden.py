"""Static batches give the results of the engines before continuous batching, bit for bit.

``static_golden.json`` holds time, energy and tokens of these runs computed at commit 4213aec (the last
engine without request slots); the runs below rebuild the same inputs from the same seed."""

import json
from pathlib import Path

import numpy as np

from adsl.fitting.generator import running_product_lengths
from adsl.sim.engine import Setup, simulate
from adsl.sim.pools import simulate_pooled
from adsl.sim.timing import Schedule

GOLDEN = json.loads((Path(__file__).parent / "static_golden.json").read_text())
SCHEDULES = {
    "motivation-4gpu": Schedule(5, split="always"),
    "saddle-tp": Schedule(2, overlap=True, split="always"),
    "dgx-a100": Schedule(),
}


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
        yield f"{name}/ad", simulate(Setup("t", s, "ad", 0, m, m, sched), pair, prompt, out)
        yield f"{name}/sd", simulate(Setup("t", s, "sd", 4, m, m, sched), pair, prompt, out, flags)
        lengths = np.stack([running_product_lengths(c, 0.5, 4) for c in conf])
        adaptive = Setup("t", s, "sd", 4, m, m, sched, policy="running_product")
        yield f"{name}/sd_adaptive", simulate(adaptive, pair, prompt, out, acc, lengths)
        if s.pim:
            lengths = np.stack([running_product_lengths(c, 0.5, 8) for c in conf])
            for kind, kw in (
                ("p", dict(pool_tokens=24)),
                ("s", dict(pool_tokens=24, eager=True)),
                ("dyn", dict(pool_tokens=24, eager=True, dynamic=True)),
            ):
                st = Setup("t", s, "sd", 4, m, m, sched, policy="running_product", **kw)
                yield f"{name}/pool_{kind}", simulate_pooled(st, pair, prompt, out, flags, conf, lengths)


def test_static_batches_reproduce_the_engines_before_continuous_batching(models, hw):
    seen = set()
    for key, res in _runs(hw, models.pair("OPT-66B")):
        seen.add(key)
        for field in ("time_s", "energy_j", "tokens"):
            assert [float(v) for v in np.atleast_1d(res[field])] == GOLDEN[key][field], (key, field)
    assert seen == set(GOLDEN)
