import dataclasses

import numpy as np
import pytest

from adsl.settings import MicroBatching
from adsl.sim.core import simulate_core
from adsl.sim.scheduler import family_intensity, intensity_threshold, roofline_threshold
from adsl.sim.setup import Setup
from adsl.sim.timing import batch_pass
from adsl.sim.workload import Workload

TEN = MicroBatching(micro_batches=10)


def test_thresholds_come_from_the_cost_model(models, hw):
    s = hw.system("saddle")
    expected = (s.pim.pe_flops * 5) / (5 * 670.4e9 * s.gpu.eta_memory)
    assert roofline_threshold(s) == pytest.approx(expected, rel=1e-3)
    # fixed GPU kernel costs keep small draft passes on PIM somewhat beyond the roofline crossover
    assert intensity_threshold(models.model("OPT-1.3B"), s, "fc", TEN) >= roofline_threshold(s) * 0.9


def test_one_intensity_threshold_cannot_place_attention(models, hw):
    """Why the scheduler uses per-(requests, context) thresholds: at the same intensity the faster
    device for OPT-66B's verification attention changes with batch and context."""
    s = hw.system("saddle")
    m = models.model("OPT-66B")
    q = 6  # about 5.7 FLOP/B in both cases
    faster = []
    for n, ctx in ((2, 1024), (4, 1024)):
        t = {d: float(batch_pass(m, s, n, q, ctx, {"fc": "gpu", "attention": d}, TEN).time_s) for d in ("gpu", "pim")}
        faster.append(min(t, key=t.get))
    assert faster == ["gpu", "pim"]
    assert (
        abs(float(family_intensity(m, "attention", 2, q, 1024)) - float(family_intensity(m, "attention", 4, q, 1024)))
        < 0.1
    )


def test_dynamic_placement_beats_every_static_placement(models, hw):
    pair = models.pair("Llama3.1-70B")
    s = hw.system("saddle")
    rng = np.random.default_rng(1)
    acc = rng.random((2, 16, 300)) < 0.7
    base = Setup("x", s, "sd", 8, {"fc": "gpu", "attention": "pim"}, {"fc": "gpu", "attention": "pim"}, TEN)
    out, prompt = np.full((2, 16), 200), np.full((2, 16), 512.0)
    times = [
        simulate_core(
            dataclasses.replace(
                base, target_mapping={"fc": "gpu", "attention": a}, draft_mapping={"fc": f, "attention": "pim"}
            ),
            pair,
            Workload(prompt, out, acc),
        ).time_s
        for a in ("gpu", "pim")
        for f in ("gpu", "pim")
    ]
    dyn = simulate_core(dataclasses.replace(base, dynamic=True), pair, Workload(prompt, out, acc))
    # each pass takes the faster placement, so the run beats every static placement
    assert (dyn.time_s <= np.min(times, axis=0) * (1 + 1e-9)).all()
    assert 0.0 <= dyn.placement["target_attention_on_pim"] <= 1.0
    assert dyn.tokens.tolist() == [3200, 3200]


@pytest.mark.parametrize(("model", "family"), [("OPT-1.3B", "fc"), ("OPT-6.7B", "fc"), ("OPT-66B", "attention")])
def test_intensity_threshold_is_where_the_gpu_pass_stops_losing(models, hw, model, family):
    """The documented scan: FC over 1..1024 requests of one token (attention on PIM), attention over
    1..64 query tokens of 16 requests (FC on the GPU), 1024 cached tokens; the threshold is the
    intensity of the first point where the GPU pass is no slower, and PIM wins every point before it."""
    s, m = hw.system("saddle"), models.model(model)
    if family == "fc":
        n, q, other = np.arange(1, 1025, dtype=float), 1.0, {"attention": "pim"}
    else:
        n, q, other = 16.0, np.arange(1, 65, dtype=float), {"fc": "gpu"}
    t = {d: batch_pass(m, s, n, q, 1024.0, {family: d, **other}, TEN).time_s for d in ("gpu", "pim")}
    ai = family_intensity(m, family, n, q, 1024.0)
    gpu_wins = t["gpu"] <= t["pim"]
    assert gpu_wins.any() and not gpu_wins.all()  # a real crossing inside the scan
    first = int(np.argmax(gpu_wins))
    assert intensity_threshold(m, s, family, TEN) == pytest.approx(float(ai[first]), rel=1e-12)
    assert (t["gpu"][:first] > t["pim"][:first]).all()


def test_effective_rooflines_by_hand(hw):
    from adsl.sim.scheduler import effective_rooflines

    s = hw.system("saddle")
    roofs = effective_rooflines(s)
    assert list(roofs) == ["GPU", "PIM"]
    assert roofs["GPU"] == pytest.approx((s.gpu.peak_flops * s.gpu.eta_compute, s.weight_bw_bytes_s * s.gpu.eta_memory))
    k = s.stacks_per_gpu
    assert roofs["PIM"] == pytest.approx((s.pim.pe_flops * k, s.pim.internal_bw_bytes_s * k))
