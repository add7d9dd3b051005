"""A point's replicas grow in blocks until its throughput's 95 % interval meets ``simulation.precision``."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest

from adsl.config import load_config
from adsl.errors import ConfigError
from adsl.fitting.distributions import fit_confidence
from adsl.settings import Precision
from adsl.sim.experiment import Point, ci95, point_inputs, ratio_ci95, run_point, simulate_point

RNG = np.random.default_rng(1)
MODEL = {
    "confidence": fit_confidence(np.concatenate([RNG.beta(8, 1, 2000), RNG.beta(2, 2, 600)])),
    "joint": {"a": -0.3, "b": 0.9, "s": 0.6, "g": 0.5},
}
POINT = Point("OPT-66B", "SADDLE", 4, 8, 96, "warn")


@pytest.fixture(scope="module")
def setting(ws):
    cats = ws.settings.simulation.categories
    # replicas of 4 x batch requests, no minimum: short windows whose intervals need blocks to narrow
    over = {"prompt_len": 32, "replicas": 3, "search": {"knobs": []}, "precision": {"min_requests": 0}}
    sim = ws.settings.simulation.with_overrides(over)
    return sim, dict.fromkeys(cats, MODEL), dict.fromkeys(cats, 0.4)


def test_met():
    assert Precision(0.0, 4).met(np.inf, 1.0)  # off: one block is enough
    assert Precision(0.01, 4).met(1.0, 100.0)
    assert not Precision(0.01, 4).met(1.01, 100.0)
    assert not Precision(0.01, 4).met(0.0, 0.0)  # no throughput: nothing to be precise about
    assert Precision(0.01, 4).met(0.004, 0.5)  # a mean below 1 token/s is still a mean


def _with(sim, **precision):
    """``sim`` with the precision fields given, the others (min_requests) as configured."""
    return dataclasses.replace(sim, precision=dataclasses.replace(sim.precision, **precision))


def test_off_runs_one_block_as_before(ws, setting):
    sim, models, taus = setting
    row = run_point(ws, _with(sim, target=0.0, max_replicas=32), POINT, models, taus)
    p = point_inputs(ws, sim, POINT, models, taus)
    assert row["replicas"] == 3 and row["precision_met"]
    assert row["throughput_tok_s"] == float(simulate_point(p).throughput_tok_s.mean())


def test_blocks_are_added_until_the_cap_and_the_row_says_so(ws, setting):
    sim, models, taus = setting
    row = run_point(ws, _with(sim, target=1e-9, max_replicas=10), POINT, models, taus)
    assert row["replicas"] == 9  # whole blocks of 3, at most 10
    assert not row["precision_met"]
    # the blocks are the point's block 0, 1, 2 streams: the mean is theirs
    runs = [simulate_point(point_inputs(ws, sim, POINT, models, taus, block=b)) for b in range(3)]
    tput = np.concatenate([r.throughput_tok_s for r in runs])
    assert row["throughput_tok_s"] == pytest.approx(float(tput.mean()), rel=1e-12)
    assert len({float(r.throughput_tok_s.mean()) for r in runs}) == 3  # fresh streams per block


def test_a_loose_target_stops_after_the_first_block(ws, setting):
    sim, models, taus = setting
    row = run_point(ws, _with(sim, target=0.5, max_replicas=32), POINT, models, taus)
    assert row["replicas"] == 3 and row["precision_met"]
    assert row["throughput_ci95"] <= 0.5 * row["throughput_tok_s"]


def test_a_met_target_is_met_in_the_row(ws, setting):
    sim, models, taus = setting
    row = run_point(ws, _with(sim, target=0.05, max_replicas=63), POINT, models, taus)
    assert row["precision_met"] and 3 < row["replicas"] < 63
    assert row["throughput_ci95"] <= 0.05 * row["throughput_tok_s"]


def test_max_replicas_below_replicas_is_a_config_error(root):
    from adsl.config import read_yaml

    cfg = read_yaml(root / "config" / "config.yaml")
    cfg["simulation"]["precision"] = {"target": 0.01, "max_replicas": 3}
    with pytest.raises(ConfigError, match="simulation.precision.max_replicas"):
        load_config(cfg, "config.yaml")


def test_ci95_is_students_t_half_width_from_two_replicas_on():
    """Half-width t(0.975, n - 1) x s / sqrt(n): [1, 3] has s = sqrt 2, so t(0.975, 1) = 12.7062; one
    replica has no interval."""
    assert ci95(np.array([1.0, 3.0])) == pytest.approx(12.706204736174694, rel=1e-12)
    assert ci95(np.array([1.0, 2.0, 3.0])) == pytest.approx(4.302652729749462 / np.sqrt(3), rel=1e-12)
    assert np.isnan(ci95(np.array([5.0])))


def test_a_ratios_interval_comes_from_the_paired_replicas():
    """a = [3, 4, 8] over b = [1, 2, 3]: ratio 5 / 2, differences a - 2.5 b = [0.5, -1, 0.5] (s = sqrt 0.75),
    so t(0.975, 2) x s / sqrt 3 over mean(b) = 2. Replicas that move together give none; pairs are the first
    as many as both have, and one pair gives no interval."""
    expected = 4.302652729749462 * np.sqrt(0.75) / np.sqrt(3) / 2.0
    assert ratio_ci95([3.0, 4.0, 8.0], [1.0, 2.0, 3.0], 2.5) == pytest.approx(expected, rel=1e-12)
    assert ratio_ci95([3.0, 4.0, 8.0, 100.0], [1.0, 2.0, 3.0], 2.5) == pytest.approx(expected, rel=1e-12)
    assert ratio_ci95(np.array([2.0, 4.0, 6.0]), np.array([1.0, 2.0, 3.0]), 2.0) == 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no mean of an empty pair list
        assert np.isnan(ratio_ci95([3.0], [1.0, 2.0], 3.0)) and np.isnan(ratio_ci95([], [], 1.0))


def test_a_cap_of_one_block_runs_one_block_even_when_the_target_is_not_met(ws, setting):
    """max_replicas 3 or 5 over blocks of 3 replicas: one block, flagged as not precise enough."""
    sim, models, taus = setting
    for cap in (3, 5):
        row = run_point(ws, _with(sim, target=1e-9, max_replicas=cap), POINT, models, taus)
        assert row["replicas"] == 3 and not row["precision_met"], cap


def test_run_point_keeps_the_streams_it_draws_in_the_callers_dict(ws, setting):
    """``drawn`` (kept by run_experiment over a pair's points) gets the first block's streams, the same
    arrays point_inputs draws."""
    sim, models, taus = setting
    drawn = {}
    run_point(ws, _with(sim, target=0.0, max_replicas=3), POINT, models, taus, drawn)
    assert list(drawn) == [(POINT.pair, POINT.batch, POINT.seq_len, 0)]
    p = point_inputs(ws, sim, POINT, models, taus)
    for kept, fresh in zip(
        drawn[(POINT.pair, POINT.batch, POINT.seq_len, 0)], (p.confidence, p.confidence_later, p.accept), strict=True
    ):
        np.testing.assert_array_equal(kept, fresh)


def test_a_replica_serves_at_least_min_requests_under_continuous_batching():
    """A queue refills the slots: at least ``min_requests`` requests (requests_per_slot x batch where that is
    more); a static batch serves one request a slot whatever the minimum."""
    from adsl.settings import Batching

    continuous, static = Batching("continuous", 4), Batching("static")
    assert Precision(0.0, 4, 64).requests(continuous, 1) == 64
    assert Precision(0.0, 4, 64).requests(continuous, 16) == 64
    assert Precision(0.0, 4, 64).requests(continuous, 32) == 128
    assert Precision(0.0, 4).requests(continuous, 2) == 8  # no minimum by default
    assert Precision(0.0, 4, 64).requests(static, 2) == 2


def test_min_requests_lengthens_a_small_batchs_replicas_and_their_window(ws, setting):
    """At batch 4 with 3 requests a slot a replica serves 12 requests; with a minimum of 40 it serves 40, every
    one drawn, and its steady-state window holds more completions."""
    sim, models, taus = setting
    sim = dataclasses.replace(sim, batching=dataclasses.replace(sim.batching, requests_per_slot=3))
    short, long = (
        point_inputs(ws, _with(sim, target=0.0, max_replicas=3, min_requests=m), POINT, models, taus) for m in (0, 40)
    )
    assert short.out.shape == (3, 12) and long.out.shape == (3, 40)
    assert long.accept.shape[:2] == (3, 40) and long.lengths.shape[:2] == (3, 40)
    few, many = (simulate_point(p) for p in (short, long))
    assert (many.window["completed"] > few.window["completed"]).all()


@pytest.mark.parametrize("value", [-1, 8193, 1.5])
def test_min_requests_out_of_range_is_a_config_error(root, value):
    from adsl.config import read_yaml

    cfg = read_yaml(root / "config" / "config.yaml")
    cfg["simulation"]["precision"]["min_requests"] = value
    with pytest.raises(ConfigError, match="min_requests"):
        load_config(cfg, "config.yaml")
