"""The sweep's design: a grid covers exactly its axes' product, a Sobol design is reproducible from its
seed and has Saltelli's structure, and bad settings stop with the field named."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from adsl.dse.design import ab_block, chunk, chunks, design, from_unit, grid_values
from adsl.errors import ConfigError
from adsl.settings import DseAxis
from tests.dse.helpers import sweep_workspace, with_dse

AXES = {
    "batch": {"values": [8, 32, 128]},
    "allreduce_step_s": {"low": 1e-6, "high": 1e-5, "log": True, "levels": 4},
    "pool_tokens": {"low": 256, "high": 1024, "integer": True, "levels": 3},
}


def test_a_grid_covers_exactly_the_product_of_its_axes():
    ws = sweep_workspace({"sampling": "grid", "axes": AXES, "winner_axes": ["batch", "pool_tokens"]})
    d = design(ws.settings.dse)
    levels = [grid_values(a) for a in ws.settings.dse.axes]
    assert levels[1] == pytest.approx([1e-6, 10**-5.666666666666667, 10**-5.333333333333333, 1e-5])
    assert levels[2] == [256, 640, 1024]
    got = sorted(map(tuple, d[["batch", "allreduce_step_s", "pool_tokens"]].itertuples(index=False)))
    assert got == sorted(itertools.product(*levels))
    assert list(d.configuration) == list(range(36)) and set(d.block) == {"grid"}


def test_a_sobol_design_is_reproducible_from_its_seed_and_has_saltelli_blocks():
    base = {"base_points": 32, "axes": AXES, "winner_axes": ["batch", "pool_tokens"]}
    a = design(sweep_workspace({**base, "seed": 7}).settings.dse)
    b = design(sweep_workspace({**base, "seed": 7}).settings.dse)
    c = design(sweep_workspace({**base, "seed": 8}).settings.dse)
    assert a.equals(b) and not a.equals(c)
    assert len(a) == 32 * (3 + 2)
    names = list(AXES)
    blk = {k: g.sort_values("sample")[names].reset_index(drop=True) for k, g in a.groupby("block")}
    for i, name in enumerate(names):
        ab = blk[ab_block(name)]
        for j, other in enumerate(names):
            source = blk["B"] if i == j else blk["A"]
            assert ab[other].equals(source[other]), (name, other)
    # every listed value is drawn, a range stays inside its bounds, integers stay whole
    assert set(a.batch) == {8, 32, 128}
    assert a.allreduce_step_s.between(1e-6, 1e-5).all()
    assert (a.pool_tokens == a.pool_tokens.round()).all()


def test_unit_points_map_to_equal_cells_and_ranges():
    listed = DseAxis("batch", values=(1, 2, 4, 8))
    assert from_unit(listed, np.array([0.0, 0.249, 0.25, 0.99, 1.0])) == [1, 1, 2, 8, 8]
    log = DseAxis("x", low=1.0, high=100.0, log=True)
    assert from_unit(log, np.array([0.0, 0.5, 1.0])) == pytest.approx([1.0, 10.0, 100.0])
    whole = DseAxis("x", low=0.0, high=10.0, integer=True)
    assert from_unit(whole, np.array([0.04, 0.06])) == [0, 1]


def test_chunks_partition_the_design():
    ws = sweep_workspace(
        {"sampling": "grid", "axes": AXES, "chunk_points": 10, "winner_axes": ["batch", "pool_tokens"]}
    )
    dse = ws.settings.dse
    parts = [chunk(dse, k) for k in range(chunks(dse))]
    assert chunks(dse) == 4 and [len(p) for p in parts] == [10, 10, 10, 6]
    assert sorted(c for p in parts for c in p.configuration) == list(range(36))
    with pytest.raises(ValueError, match="outside 0..3"):
        chunk(dse, 4)


@pytest.mark.parametrize(
    ("dse", "field", "message"),
    [
        ({"base_points": 100}, "dse.base_points", "not a power of 2"),
        (
            {"axes": {"batch": {"low": 64, "high": 8}}, "winner_axes": ["batch", "batch"]},
            "dse.axes.batch",
            "must be below",
        ),
        (
            {"axes": {"tau_scale": {"low": 0.0, "high": 2.0, "log": True}}, "winner_axes": ["tau_scale", "tau_scale"]},
            "dse.axes.tau_scale",
            "low > 0",
        ),
        ({"winner_axes": ["batch", "gpus"]}, "dse.winner_axes", "'gpus' is not an axis"),
        ({"systems": ["GPU-AD", "SADDLE", "NOPE"]}, "dse.systems", "unknown system 'NOPE'"),
        ({"systems": ["GPU-AD", "SADDLE"]}, "dse.gain", "must both be among"),
        ({"base": {"pair": "GPT-5"}}, "dse", "unknown pair 'GPT-5'"),
        ({"simulation": {"replicas": 0}}, "simulation.replicas", "minimum"),
        (
            {"axes": {"batch": {"values": [8, 2048]}}, "winner_axes": ["batch", "batch"]},
            "dse.axes.batch",
            "2048 is not a whole number in 1..1024",
        ),
        (
            {"axes": {"gpus": {"values": [0, 8]}}, "winner_axes": ["gpus", "gpus"]},
            "dse.axes.gpus",
            "0 gives an invalid configuration",
        ),
        (
            {"axes": {"pool_tokens": {"low": 64, "high": 1e6}}, "winner_axes": ["pool_tokens", "pool_tokens"]},
            "dse.axes.pool_tokens",
            "1000000.0 gives",
        ),
        (
            {"axes": {"category": {"values": ["poetry"]}}, "winner_axes": ["category", "category"]},
            "dse.axes.category",
            "unknown category 'poetry'",
        ),
        (
            {"axes": {"policy": {"values": ["magic"]}}, "winner_axes": ["policy", "policy"]},
            "dse.axes.policy",
            "unknown policy 'magic'",
        ),
        (
            {"axes": {"pair": {"values": ["OPT-66B", "nope"]}}, "winner_axes": ["pair", "pair"]},
            "dse",
            "unknown pair 'nope'",
        ),
    ],
)
def test_bad_sweep_settings_stop_before_any_work_with_the_field_named(dse, field, message):
    with pytest.raises(ConfigError) as err:
        sweep_workspace(dse)
    assert field in str(err.value) and message in str(err.value)


def test_with_dse_changes_only_the_sweep():
    ws = sweep_workspace({})
    assert with_dse(ws, chunk_points=3).settings.dse.chunk_points == 3
