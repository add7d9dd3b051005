"""The ends of intensity_threshold's documented scan (FC over 1..1024 requests of one token, attention
over 1..64 query tokens of 16 requests): systems built so the GPU wins from the first point, from just
past the last one, or never."""

import dataclasses

import numpy as np
import pytest

from adsl.settings import MicroBatching
from adsl.sim.scheduler import family_intensity, intensity_threshold
from adsl.sim.timing import batch_pass

CTX = 1024.0
OTHER = {"fc": {"attention": "pim"}, "attention": {"fc": "gpu"}}


def gpu_kernel_cost(system, family, seconds):
    """The system with a fixed GPU cost per kernel of ``family`` (slower GPU passes)."""
    return dataclasses.replace(
        system, runtime=dataclasses.replace(system.runtime, fixed_s={**system.runtime.fixed_s, family: seconds})
    )


def first_gpu_win(model, system, family, points):
    """1-based scan point where the GPU pass is first no slower, over 1..points (None: never)."""
    x = np.arange(1, points + 1, dtype=float)
    n, q = (x, 1.0) if family == "fc" else (16.0, x)
    t = {
        d: batch_pass(model, system, n, q, CTX, {family: d, **OTHER[family]}, MicroBatching()).time_s
        for d in ("gpu", "pim")
    }
    wins = t["gpu"] <= t["pim"]
    return int(np.argmax(wins)) + 1 if wins.any() else None


@pytest.mark.parametrize("family", ["fc", "attention"])
def test_threshold_is_the_first_points_intensity_when_the_gpu_always_wins(models, hw, family):
    s, m = hw.system("saddle"), models.model("OPT-1.3B")
    slow_pim = dataclasses.replace(s, pim=dataclasses.replace(s.pim, call_fixed_s=1.0))
    assert first_gpu_win(m, slow_pim, family, 64) == 1
    n, q = (1.0, 1.0) if family == "fc" else (16.0, 1.0)
    want = float(family_intensity(m, family, n, q, CTX))
    assert intensity_threshold(m, slow_pim, family) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize(
    ("family", "last", "fixed_s"),
    [("fc", 1024, 0.002338), ("attention", 64, 0.00019), ("fc", 1024, 0.01), ("attention", 64, 0.001)],
)
def test_threshold_is_inf_when_the_gpu_first_wins_past_the_scan(models, hw, family, last, fixed_s):
    """GPU kernel costs that move the crossing to just past the scan (1025 requests, 65 query tokens) or
    beyond it: no threshold inside the scan, so inf (everything on PIM)."""
    s, m = hw.system("saddle"), models.model("OPT-1.3B")
    slow_gpu = gpu_kernel_cost(s, family, fixed_s)
    first = first_gpu_win(m, slow_gpu, family, last + 1)
    assert first is None or first == last + 1
    if fixed_s < 0.001:
        assert first == last + 1  # the crossing lies exactly one point past the scan
    assert intensity_threshold(m, slow_gpu, family) == float("inf")


@pytest.mark.parametrize("family", ["fc", "attention"])
def test_threshold_inside_the_scan_is_the_first_gpu_win(models, hw, family):
    """A crossing moved well inside the scan by a GPU kernel cost: the intensity of that point."""
    s, m = hw.system("saddle"), models.model("OPT-1.3B")
    system = gpu_kernel_cost(s, family, 1e-4)
    k = first_gpu_win(m, system, family, 1024 if family == "fc" else 64)
    assert k is not None and k > 1
    n, q = (float(k), 1.0) if family == "fc" else (16.0, float(k))
    want = float(family_intensity(m, family, n, q, CTX))
    assert intensity_threshold(m, system, family) == pytest.approx(want, rel=1e-12)
