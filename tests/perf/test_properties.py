"""Invariants of the cost model, checked on random points (hypothesis)."""

import dataclasses

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from adsl.perf.cost import pass_cost

SYSTEMS = ["dgx-a100", "attacc-pim", "saddle", "motivation-4gpu"]
MODELS = ["OPT-1.3B", "OPT-66B", "Llama-3.1-70B", "Llama-3.2-1B", "OPT-175B"]
points = st.fixed_dictionaries(
    {
        "model": st.sampled_from(MODELS),
        "system": st.sampled_from(SYSTEMS),
        "batch": st.integers(1, 256),
        "tokens": st.integers(1, 16),
        "ctx": st.integers(0, 8192),
    }
)
COMMON = settings(max_examples=60, deadline=None)


def cost(models, hw, p, system=None, **kw):
    s = system or hw.system(p["system"])
    return pass_cost(models.model(p["model"]), s, p["batch"], p["tokens"], p["ctx"], **kw)


@COMMON
@given(points, st.floats(1.01, 4.0))
def test_more_bandwidth_never_slower(models, hw, p, factor):
    s = hw.system(p["system"])
    faster_gpu = dataclasses.replace(s.gpu, mem_bw_bytes_s=s.gpu.mem_bw_bytes_s * factor)
    faster = dataclasses.replace(s, gpu=faster_gpu)
    if s.pim is not None:
        faster = dataclasses.replace(
            faster, pim=dataclasses.replace(s.pim, external_bw_bytes_s=s.pim.external_bw_bytes_s * factor)
        )
    assert cost(models, hw, p, faster).total_time_s <= cost(models, hw, p).total_time_s * (1 + 1e-12)


@COMMON
@given(points, st.floats(1.01, 8.0))
def test_more_pes_never_slower(models, hw, p, factor):
    s = hw.system(p["system"])
    if s.pim is None:
        return
    pim = dataclasses.replace(s.pim, flop_per_internal_byte=s.pim.flop_per_internal_byte * factor)
    more = dataclasses.replace(s, pim=pim)
    for mapping in ({}, {"fc": "pim"} if s.weights_in == "pim" else {}):
        assert cost(models, hw, p, more, mapping=mapping).total_time_s <= cost(
            models, hw, p, mapping=mapping
        ).total_time_s * (1 + 1e-12)


@COMMON
@given(points, st.sampled_from(["batch", "tokens", "ctx"]), st.integers(1, 64))
def test_more_work_never_faster_and_energy_positive(models, hw, p, field, extra):
    base = cost(models, hw, p)
    more = cost(models, hw, {**p, field: p[field] + extra})
    assert more.total_time_s >= base.total_time_s * (1 - 1e-12)
    assert more.total_energy_j >= base.total_energy_j * (1 - 1e-12)
    assert base.total_energy_j > 0 and np.isfinite(base.total_time_s)


@COMMON
@given(points)
def test_time_is_sum_of_operators(models, hw, p):
    c = cost(models, hw, p)
    assert np.isclose(c.total_time_s, sum(c.time_by("device").values()))
    assert np.isclose(c.total_time_s, sum(c.time_by("cls").values()))
