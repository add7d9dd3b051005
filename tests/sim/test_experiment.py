"""A configuration point's inputs and table row (``adsl.sim.experiment``): the serial costs a policy plans
with, the taus an adaptive system needs, and the row read off a run result built by hand, each column
derived from its arrays."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from adsl.fitting.distributions import fit_confidence
from adsl.fitting.entropy import draw_entropy, fit_entropy
from adsl.fitting.generator import CONTINUED, FIRST, continuation_boost, draw_streams, later_confidence
from adsl.fitting.modelfile import read_model, write_model
from adsl.sim.core import replica_logs
from adsl.sim.experiment import (
    Point,
    check_experiments,
    experiment_points,
    first_replicas,
    point_inputs,
    point_requests,
    point_row,
    point_setup,
    policy_costs,
    policy_lengths,
    request_categories,
    request_entropy,
    request_streams,
    run_experiment,
    run_point,
    search_point,
    simulate_point,
    with_setup,
)
from adsl.sim.policies import POLICIES, PolicyInputs, fit_threshold, predicted
from adsl.sim.result import RunResult
from adsl.sim.search import Configuration, legal_set
from adsl.sim.systems import SYSTEMS
from adsl.sim.timing import batch_pass

RNG = np.random.default_rng(1)
MODEL = {
    "confidence": fit_confidence(np.concatenate([RNG.beta(8, 1, 2000), RNG.beta(2, 2, 600)])),
    "joint": {"a": -0.3, "b": 0.9, "s": 0.6, "g": 0.5},
}


def _small(ws, **more):
    """The simulation settings of these points: prompts of 32 tokens, 2 replicas, no configuration search."""
    return ws.settings.simulation.with_overrides({"prompt_len": 32, "replicas": 2, "search": {"knobs": []}, **more})


@pytest.fixture(scope="module")
def saddle(ws):
    sim = _small(ws)
    cats = sim.categories
    return point_inputs(
        ws, sim, Point("OPT-66B", "SADDLE", 4, 8, 96, "warn"), dict.fromkeys(cats, MODEL), dict.fromkeys(cats, 0.4)
    )


def _result(**fields) -> RunResult:
    """Two replicas: 100 and 300 tokens in 2 s and 4 s (50 and 75 tok/s), 10 and 30 J."""
    base = dict(
        time_s=np.array([2.0, 4.0]),
        energy_j=np.array([10.0, 30.0]),
        tokens=np.array([100.0, 300.0]),
        iterations=np.array([5.0, 7.0]),
        busy_s={"gpu": np.array([1.0, 2.0]), "pim": np.array([0.5, 4.0])},
        class_s={"fc": np.array([1.0, 3.0])},
        stage_s={"draft": np.array([0.5, 1.5]), "verify": np.array([2.0, 4.0])},
        drafted=np.array([3.0, 8.0]),
        request_rounds=np.array([1.0, 4.0]),
        window={
            "start_s": np.array([0.1, 0.3]),
            "end_s": np.array([2.1, 4.3]),
            "completed": np.array([4.0, 6.0]),
            "total_s": np.array([3.0, 5.0]),
        },
        pool={"eager": np.array([2.0, 4.0]), "migrated": np.array([1.0, 3.0]), "discarded": np.array([0.0, 2.0])},
        placement={},
    )
    return RunResult(**(base | fields))


def test_the_row_reads_each_column_off_the_run(saddle):
    """Means over the two replicas (each replica's throughput kept, in order); the interval t(0.975, 1) x s / sqrt 2
    = 12.7062 x 12.5; utilisation
    busy / time (gpu 1/2 and 2/4, pim 1/4 and 4/4); draft length per request round 3/1 and 8/4."""
    row = point_row(saddle, _result(), "pair x", "system y", 8)
    expected = {
        "system": "system y",
        "pair": "pair x",
        "batch": 4,
        "draft_length": 8,
        "policy": "running_product",
        "seq_len": 96,
        "hardware": "saddle-tp",
        "batching": "continuous",
        "throughput_tok_s": 62.5,
        "throughput_std": 12.5,
        "replicas": 2,
        "tokens_per_j": 10.0,
        "tokens_per_j_ci95": 0.0,
        "time_s": 3.0,
        "tokens": 100,
        "window_tokens": 200.0,
        "micro_batches": 2.0,
        "eager_drafted": 3.0,
        "eager_migrated": 2.0,
        "eager_discarded": 1.0,
        "iterations": 6.0,
        "window_start_s": 0.2,
        "window_end_s": 3.2,
        "window_completed": 5.0,
        "run_time_s": 4.0,
        "gpu_util": 0.5,
        "pim_util": 0.625,
        "mean_draft_length": 2.5,
        "static_power_w": 592.0,
        "draft_placement": "tensor_parallel",
        "pool_trigger": "complete",
        "draft_fc_on_pim": 0.0,
        "target_attention_on_pim": 1.0,
        "target_fc": "gpu",
        "target_attention": "pim",
        "draft_fc": "gpu",
        "draft_attention": "pim",
        "stage_draft_s": 1.0,
        "stage_verify_s": 3.0,
        "class_fc_s": 2.0,
    }
    for k, v in expected.items():
        assert row[k] == pytest.approx(v, rel=1e-12) if isinstance(v, float) else row[k] == v, k
    assert row["throughput_ci95"] == pytest.approx(12.706204736174694 * 12.5, rel=1e-12)
    assert row["throughput_replicas"] == [50.0, 75.0]  # in replica order
    assert row["tokens_per_j_replicas"] == [10.0, 10.0]
    need, have = saddle.memory
    assert (row["memory_needed_gb"], row["memory_available_gb"]) == (need / 1e9, have / 1e9)


def test_the_row_divides_busy_time_by_the_stages_and_counts_a_replica_without_rounds_as_one(saddle):
    """Two pipeline stages halve each device's utilisation; a replica with no request round counts its
    drafts over one round (0 / 1), and one with one round counts them whole."""
    system = dataclasses.replace(saddle.setup.system, pipeline_stages=2)
    p = dataclasses.replace(saddle, setup=dataclasses.replace(saddle.setup, system=system))
    res = _result(drafted=np.array([0.0, 3.0]), request_rounds=np.array([0.0, 1.0]))
    row = point_row(p, res, "OPT-66B", "SADDLE", 8)
    assert (row["gpu_util"], row["pim_util"]) == pytest.approx((0.25, 0.3125), rel=1e-12)
    assert row["mean_draft_length"] == pytest.approx(1.5, rel=1e-12)


def test_the_row_takes_the_runs_placement_shares_and_flags_memory_at_the_limit(saddle):
    """The run's measured shares win over the mapping's; needed == available still fits."""
    res = _result(placement={"micro_batches": 1.5, "draft_fc_on_pim": 0.25, "target_attention_on_pim": 0.75})
    row = point_row(dataclasses.replace(saddle, memory=(2e9, 2e9)), res, "OPT-66B", "SADDLE", 8)
    assert (row["micro_batches"], row["draft_fc_on_pim"], row["target_attention_on_pim"]) == (1.5, 0.25, 0.75)
    assert row["fits_memory"] and (row["memory_needed_gb"], row["memory_available_gb"]) == (2.0, 2.0)
    row = point_row(dataclasses.replace(saddle, memory=(3e9, 2e9)), _result(), "OPT-66B", "SADDLE", 8)
    assert not row["fits_memory"]


def test_the_row_reads_the_mappings_where_the_run_measured_no_share_and_no_static_power_where_it_is_off(ws):
    """SD (the motivation system: FC of both models on PIM, attention on the GPU) with static power off, and
    a run without placement shares or GPU busy time: the draft FC on PIM as its mapping puts it (1.0),
    target attention off PIM (0.0), each family's device as the mappings give it, 0 W of static power (not
    the system's 296 W) and GPU utilisation 0.0."""
    sim = _small(ws, static_power=False)
    p = point_inputs(ws, sim, Point("OPT-66B", "SD", 4, 8, 96, "warn"), dict.fromkeys(sim.categories, MODEL))
    target, draft = p.setup.target_mapping, p.setup.draft_mapping
    assert (target, draft) == ({"fc": "pim", "attention": "gpu"},) * 2 and p.setup.system.static_power_w == 296.0
    row = point_row(p, _result(busy_s={"pim": np.array([1.0, 2.0])}), "OPT-66B", "SD", 8)
    assert (row["draft_fc_on_pim"], row["target_attention_on_pim"]) == (1.0, 0.0)
    devices = ("target_fc", "target_attention", "draft_fc", "draft_attention")
    assert [row[k] for k in devices] == ["pim", "gpu", "pim", "gpu"]
    assert (row["static_power_w"], row["gpu_util"]) == (0.0, 0.0)


def test_an_ad_row_has_no_draft_columns_and_no_missing_device(ws):
    """GPU-AD: draft length 0, no mean draft length, no placement or trigger, no PIM busy time (0.0),
    no pool counters (0.0), static batching without serving."""
    sim = _small(ws)
    p = dataclasses.replace(point_inputs(ws, sim, Point("OPT-66B", "GPU-AD", 4, 8, 96, "warn"), {}), serving=None)
    res = _result(busy_s={"gpu": np.array([1.0, 2.0])}, pool={})
    row = point_row(p, res, "OPT-66B", "GPU-AD", 8)
    assert (row["draft_length"], row["draft_placement"], row["pool_trigger"], row["batching"]) == (0, "", "", "static")
    assert np.isnan(row["mean_draft_length"])
    assert (row["pim_util"], row["eager_drafted"], row["eager_migrated"], row["eager_discarded"]) == (0.0,) * 4
    assert (row["target_attention"], row["draft_fc_on_pim"], row["target_attention_on_pim"]) == ("gpu", 0.0, 0.0)


@pytest.mark.parametrize(
    ("system", "configuration", "copies"),
    [
        ("PIM-SD", None, 1),
        ("PIM-SD", Configuration("pim", 1), 8),
        ("SADDLE", Configuration("replicated", 1, "complete"), 8),
    ],
)
def test_policy_costs_are_a_one_token_verify_step_and_a_drafted_tokens_share_per_request(
    ws, system, configuration, copies
):
    """fixed: the target's pass over one token a request at the batch, / batch; per token: the draft's
    one-token pass (its own mapping, micro-batching and copies) plus the target's second token, / batch.
    PIM-SD maps attention to the GPU (and its PIM draft FC to PIM), not as the PIM system's default."""
    sim = _small(ws)
    setup = point_setup(ws, sim, Point("OPT-66B", system, 8, 4, 96, "warn", configuration=configuration))
    pair = ws.models.pair("OPT-66B")
    assert setup.draft_copies == copies

    def t(model, q, mapping, mb, copies=1):
        return float(np.asarray(batch_pass(model, setup.system, 8, q, 64.0, mapping, mb, copies).time_s))

    v1, v2 = (t(pair.target, q, setup.target_mapping, setup.micro_batching) for q in (1, 2))
    d = t(pair.draft, 1, setup.draft_mapping, setup.draft_micro_batching, setup.draft_copies)
    costs = policy_costs(setup, pair, 8, 64.0)
    assert costs.fixed == pytest.approx(v1 / 8, rel=1e-12)
    assert costs.per_token == pytest.approx((d + v2 - v1) / 8, rel=1e-12)
    assert 0 < v1 < v2 and d > 0


def test_an_adaptive_point_without_taus_is_refused_naming_the_system_and_the_file(ws):
    sim = _small(ws)
    models = dict.fromkeys(sim.categories, MODEL)
    with pytest.raises(
        ValueError, match=r"^SADDLE drafts adaptively and needs tau per category \(results/acceptance/tau.csv\)$"
    ):
        point_inputs(ws, sim, Point("OPT-66B", "SADDLE", 4, 8, 96, "warn"), models, None)


@pytest.mark.parametrize(
    ("factor", "at_most", "policy", "lowered"),
    [(0.5, 1, None, True), (1.0, 1, None, False), (0.5, 0, None, False), (0.5, 1, "goodput", False)],
)
def test_light_load_lengths_are_the_running_product_at_the_lowered_tau_only_where_it_is_lowered(
    ws, factor, at_most, policy, lowered
):
    """SADDLE with tau 0.4 lowered to 0.5 x 0.4 while at most one request runs: its light-load lengths
    are its lengths at tau 0.2 (a model whose later tokens' confidences differ from the first's: the
    product reads the first's); none with factor 1, with no request count to lower at, or under a policy
    without tau (goodput)."""
    light = {"tau_light_load": {"active_at_most": at_most, "factor": factor}}
    sim = _small(ws, **light)
    boosted = MODEL | {"calibration": {"applies_to": "confidence", "draft_continuation": 1.0}}
    models, cats = dict.fromkeys(sim.categories, boosted), sim.categories
    point = Point("OPT-66B", "SADDLE", 4, 8, 96, "warn", policy)
    p = point_inputs(ws, sim, point, models, dict.fromkeys(cats, 0.4))
    assert p.light_at_most == at_most
    if not lowered:
        assert p.light_lengths is None
        return
    low = point_inputs(ws, sim, point, models, dict.fromkeys(cats, 0.2))
    np.testing.assert_array_equal(p.light_lengths, low.lengths)
    assert not np.array_equal(p.light_lengths, p.lengths)
    assert not np.array_equal(p.confidence, p.confidence_later)


ENTROPY_MODEL = MODEL | {
    "match_rate": 0.7,
    "entropy": fit_entropy(np.linspace(0.01, 0.99, 2000), 3.0 * (1 - np.linspace(0.01, 0.99, 2000)) ** 1.5),
}


def _spied(monkeypatch, policy):
    """The PolicyInputs and cap each call of ``policy`` gets (the policy still runs)."""
    calls, inner = [], POLICIES[policy]
    monkeypatch.setitem(POLICIES, policy, lambda inputs, cap: calls.append((inputs, cap)) or inner(inputs, cap))
    return calls


@pytest.mark.parametrize(("system", "cap"), [("GPU-SD", 8), ("SADDLE", 16)])
def test_policy_lengths_give_a_policy_the_points_costs_streams_and_categories(ws, monkeypatch, system, cap):
    """goodput at batch 4, d 8, prompt 32 of 96 tokens: planned at the mean context 32 + 64 / 2 = 64, capped
    at d (2 d where a pool takes d-token entries: SADDLE), reading the acceptance streams, the categories
    in turn, each model's match rate (0.7) as its prior (0.5 without one) and the configured schedule; no
    tau, entropy or predicted acceptance."""
    sim = _small(ws)
    cats = list(sim.categories)
    models = {c: ENTROPY_MODEL if i == 0 else MODEL for i, c in enumerate(cats)}  # the others: no match rate
    calls = _spied(monkeypatch, "goodput")
    point = Point("OPT-66B", system, 4, 8, 96, "warn", "goodput")
    p = point_inputs(ws, sim, point, models, dict.fromkeys(cats, 0.4))
    (inputs, got_cap), *_ = calls
    assert got_cap == cap and p.lengths.max() <= cap
    assert inputs.costs == policy_costs(p.setup, p.pair, 4, 64.0)
    assert inputs.batch == 4 and list(inputs.categories) == [cats[i % len(cats)] for i in range(p.out.shape[1])]
    assert inputs.confidence is p.confidence and inputs.accept is p.accept
    assert inputs.prior == {c: 0.7 if i == 0 else 0.5 for i, c in enumerate(cats)}
    assert inputs.schedule == {4: 4, 8: 2, 32: 1}
    assert inputs.taus == {} and inputs.entropy is None and inputs.accept_prob is None


def test_policy_lengths_give_running_product_the_taus_and_boosts_and_entropy_bound_the_blocks_entropy(ws, monkeypatch):
    """running_product reads tau and each category's continuation boost, never the acceptance streams;
    entropy_bound the entropy drawn for the point's block (block 0 where none is given, as the open loop
    calls it)."""
    sim = _small(ws)
    cats = list(sim.categories)
    boosted = ENTROPY_MODEL | {"calibration": {"applies_to": "confidence", "draft_continuation": 0.9}}
    models, taus = dict.fromkeys(cats, boosted), dict.fromkeys(cats, 0.4)
    calls = _spied(monkeypatch, "running_product")
    p = point_inputs(ws, sim, Point("OPT-66B", "SADDLE", 4, 8, 96, "warn"), models, taus)
    inputs, cap = calls[0]
    assert (cap, inputs.taus, inputs.accept) == (16, taus, None)
    assert inputs.boosts == dict.fromkeys(cats, pytest.approx(0.9 / MODEL["joint"]["b"], rel=1e-12))
    point = Point("OPT-66B", "SADDLE", 4, 8, 96, "warn", "entropy_bound")
    p = point_inputs(ws, sim, point, models, taus)
    seed = ws.settings.seed + 4
    calls = _spied(monkeypatch, "entropy_bound")
    args = (ws, sim, point, p.setup, p.pair, models, taus, p.confidence, p.confidence_later, p.accept)
    policy_lengths(*args)
    policy_lengths(*args, 1)
    first, second = (i.entropy for i, _ in calls if i.confidence is p.confidence)  # not the threshold's training
    np.testing.assert_array_equal(first, request_entropy(models, cats, p.confidence, seed, 0))
    np.testing.assert_array_equal(second, request_entropy(models, cats, p.confidence, seed, 1))
    assert not np.array_equal(first, second)


def test_request_streams_are_float32_confidences_and_bool_or_bit_flag_acceptances():
    """Bool acceptances while no category's model has a within-draft continuation term; bit flags as
    soon as one has: a bool category's outcome then holds for both bits (0 or FIRST | CONTINUED), the
    continuing category's bits differ somewhere."""
    flagged = MODEL | {"calibration": {"applies_to": "confidence", "draft_continuation": 1.5}}
    cats = ["a", "b"]
    conf, later, acc = request_streams(dict.fromkeys(cats, MODEL), cats, 2, 4, 50, 7)
    assert (conf.dtype, later.dtype, acc.dtype, acc.shape) == (np.float32, np.float32, np.bool_, (2, 4, 50))
    conf, later, acc = request_streams({"a": MODEL, "b": flagged}, cats, 2, 4, 50, 7)
    assert (conf.dtype, later.dtype, acc.dtype) == (np.float32, np.float32, np.uint8)
    assert set(np.unique(acc[:, 0::2])) <= {0, FIRST | CONTINUED}
    assert not set(np.unique(acc[:, 1::2])) <= {0, FIRST | CONTINUED}
    np.testing.assert_array_equal(later[:, 0::2], conf[:, 0::2])  # no boost: the first token's
    assert (later[:, 1::2] > conf[:, 1::2]).any()  # logit + 1.5 / 0.9


def test_request_categories_take_turns_and_leave_out_a_category_without_requests():
    got = request_categories(["a", "b", "c"], 5)
    assert list(got) == ["a", "b", "c"] and [list(v) for v in got.values()] == [[0, 3], [1, 4], [2]]
    assert {k: list(v) for k, v in request_categories(["a", "b", "c"], 2).items()} == {"a": [0], "b": [1]}
    assert {k: list(v) for k, v in request_categories(["a"], 3).items()} == {"a": [0, 1, 2]}


def test_point_requests_leave_at_least_one_output_token(ws):
    """Prompt 32 clipped to seq_len - 1: 32 + 1 tokens at seq_len 33, 19 + 1 at 20, 32 + 64 at 96; one
    row per replica (2) and batch_size x requests_per_slot requests, at least ``precision.min_requests``."""
    sim = _small(ws)
    n = max(4 * sim.batching.requests_per_slot, sim.precision.min_requests)
    for seq, prompt in ((33, 32), (20, 19), (96, 32)):
        p, out = point_requests(sim, Point("OPT-66B", "GPU-AD", 4, 8, seq))
        assert p.shape == out.shape == (2, n)
        assert (p == float(prompt)).all() and (out == seq - prompt).all() and p.dtype == float


def test_point_inputs_reuse_the_streams_a_caller_keeps_and_refuse_drafts_past_the_slack(ws):
    """Two systems of one (pair, batch, sequence length) given one ``drawn`` dict: the second takes the
    first's stream arrays themselves; d = 64 (STREAM_SLACK) is the longest draft the streams hold."""
    sim = _small(ws)
    models, drawn = dict.fromkeys(sim.categories, MODEL), {}
    a = point_inputs(ws, sim, Point("OPT-66B", "GPU-SD", 4, 8, 96, "warn"), models, drawn=drawn)
    b = point_inputs(ws, sim, Point("OPT-66B", "PIM-SD", 4, 8, 96, "warn"), models, drawn=drawn)
    assert list(drawn) == [("OPT-66B", 4, 96, 0)]
    assert b.accept is a.accept and b.confidence is a.confidence and b.confidence_later is a.confidence_later
    assert point_inputs(ws, sim, Point("OPT-66B", "GPU-SD", 4, 64, 96, "warn"), models).accept.shape[2] == 64 + 64 + 1
    with pytest.raises(ValueError, match=r"^draft length 65 > 64 is not supported$"):
        point_inputs(ws, sim, Point("OPT-66B", "GPU-SD", 4, 65, 96, "warn"), models)


def test_a_further_block_draws_its_own_streams_and_entropy(ws, monkeypatch):
    """Block 1 of an entropy_bound point: the streams of generator [seed + batch, 3, 1] (the first block's
    are seed + batch's), and the policy reads the entropy drawn for block 1."""
    sim = _small(ws)
    cats = list(sim.categories)
    models, taus = dict.fromkeys(cats, ENTROPY_MODEL), dict.fromkeys(cats, 0.4)
    point, seed = Point("OPT-66B", "SADDLE", 4, 8, 96, "warn", "entropy_bound"), ws.settings.seed + 4
    calls = _spied(monkeypatch, "entropy_bound")
    p = point_inputs(ws, sim, point, models, taus, block=1)
    n, t = p.out.shape[1], 64 + 64 + 1
    for got, want in zip(
        (p.confidence, p.confidence_later, p.accept), request_streams(models, cats, 2, n, t, [seed, 3, 1]), strict=True
    ):
        np.testing.assert_array_equal(got, want)
    (entropy,) = (i.entropy for i, _ in calls if i.confidence is p.confidence)
    np.testing.assert_array_equal(entropy, request_entropy(models, cats, p.confidence, seed, 1))


def test_with_setup_gives_lengths_to_adaptive_or_pooled_systems_only_and_reads_block_0_by_default(ws):
    """The fixed SD baselines (GPU-SD, PIM-SD) and AD draft no lengths table (None: d, or nothing, a
    pass); without a block (the search's candidates) the entropy is block 0's, as point_inputs' own."""
    sim = _small(ws)
    cats = list(sim.categories)
    models, taus = dict.fromkeys(cats, ENTROPY_MODEL), dict.fromkeys(cats, 0.4)
    for system in ("GPU-SD", "PIM-SD", "GPU-AD", "PIM-AD"):
        p = point_inputs(ws, sim, Point("OPT-66B", system, 4, 8, 96, "warn"), models, taus)
        assert p.lengths is None and p.light_lengths is None, system
    point = Point("OPT-66B", "SADDLE", 4, 8, 96, "warn", "entropy_bound")
    p = point_inputs(ws, sim, point, models, taus)
    streams = (p.confidence, p.confidence_later, p.accept)
    again = with_setup(ws, sim, point, p.setup, p.prompts, p.out, streams, models, taus)
    np.testing.assert_array_equal(again.lengths, p.lengths)


def test_request_entropy_draws_each_category_from_its_blocks_own_generator():
    """Block 0 from default_rng([seed, 1]), block b from default_rng([seed, 1, b]), categories in turn, float32;
    a model without an entropy term is refused by name."""
    cats = ["a", "b"]
    conf = np.random.default_rng(3).random((2, 5, 7)).astype(np.float32)
    models = dict.fromkeys(cats, ENTROPY_MODEL)
    for block, key in ((0, [11, 1]), (2, [11, 1, 2])):
        rng, want = np.random.default_rng(key), np.empty(conf.shape, np.float32)
        for idx in request_categories(cats, conf.shape[1]).values():
            want[:, idx, :] = draw_entropy(ENTROPY_MODEL["entropy"], conf[:, idx, :], rng)
        got = request_entropy(models, cats, conf, 11, block) if block else request_entropy(models, cats, conf, 11)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match=r"^acceptance model of 'b' has no entropy term: refit it \(adsl\.fitting"):
        request_entropy({"a": ENTROPY_MODEL, "b": MODEL}, cats, conf, 11)


def test_experiment_points_give_policies_to_speculative_systems_only_and_keep_their_draft_length(ws):
    """An autoregressive system runs once, without a policy; only batch_schedule takes the table's length."""
    sim = ws.settings.simulation
    exp = dataclasses.replace(
        sim.experiments["policies"], systems=("GPU-AD", "SADDLE"), batches=(8,), policies=("fixed", "batch_schedule")
    )
    pts = experiment_points(sim, exp)
    ad = [p for p in pts if p.system == "GPU-AD"]
    assert [(p.policy, p.draft_length) for p in ad] == [(None, sim.draft_length)] * len(exp.pairs)
    saddle = [(p.policy, p.draft_length) for p in pts if p.system == "SADDLE"]
    assert saddle == [("fixed", sim.draft_length), ("batch_schedule", 2)] * len(exp.pairs)


def test_check_experiments_counts_every_point_it_builds(ws):
    """The points of the experiments whose memory_check is error, each built once."""
    sim = ws.settings.simulation
    want = sum(
        len(experiment_points(sim.for_experiment(name), exp))
        for name, exp in sim.experiments.items()
        if exp.memory_check == "error"
    )
    assert want > 1 and check_experiments(ws) == want


def test_simulate_point_passes_every_argument_to_the_core(saddle, monkeypatch):
    """Timelines off unless asked; the workers, tables and replicas already run go through unchanged."""
    seen = []
    monkeypatch.setattr("adsl.sim.experiment.simulate_core", lambda *a, **k: seen.append((a, k)))
    simulate_point(saddle)
    simulate_point(saddle, True, 3, "tables", ("log",))
    p = saddle
    head = (p.setup, p.pair, p.workload, p.serving)
    assert seen == [
        ((*head, False), {"workers": None, "tables": None, "done": ()}),
        ((*head, True), {"workers": 3, "tables": "tables", "done": ("log",)}),
    ]


def _model_files(tmp_path, cats) -> dict[str, dict[str, str]]:
    """``MODEL`` written as each category's acceptance-model file of OPT-66B: run_experiment's model paths."""
    paths = {"OPT-66B": {}}
    for c in cats:
        write_model({"pair": "OPT-66B", "category": c} | MODEL, tmp_path / f"{c}.json")
        paths["OPT-66B"][c] = str(tmp_path / f"{c}.json")
    return paths


def test_the_zoo_runs_every_policy_on_the_configuration_its_systems_own_policy_found(ws, tmp_path):
    """One search per configured system, under its own policy; every other policy runs what it found, AD once."""
    cats = ws.settings.simulation.categories
    paths = _model_files(tmp_path, cats)
    taus = dict.fromkeys(cats, 0.3)
    exp = {
        "pairs": ["OPT-66B"],
        "systems": ["SADDLE", "GPU-AD"],
        "batches": [4],
        "policies": ["fixed", "running_product"],
    }
    small = ws.with_overrides(simulation={"replicas": 1, "max_seq_len": 160, "experiments": {"policies": exp}})
    df = run_experiment(small, "policies", paths, {"OPT-66B": taus})
    sim = small.settings.simulation.for_experiment("policies")
    pts = experiment_points(sim, small.settings.simulation.experiments["policies"])
    models = {c: read_model(p) for c, p in paths["OPT-66B"].items()}
    found = search_point(small, sim, dataclasses.replace(pts[0], policy=None), models, taus, {})
    assert list(df.system) == ["SADDLE", "SADDLE", "GPU-AD"] and list(df.policy[:2]) == ["fixed", "running_product"]
    for i, pt in enumerate(pts[:2]):
        want = run_point(small, sim, dataclasses.replace(pt, configuration=found.point.configuration), models, taus)
        assert df.configuration[i] == found.point.configuration.label
        assert df.throughput_tok_s[i] == want["throughput_tok_s"], pt.policy


def _fit_by_hand(policy, models, sim, costs, seed, cap):
    """Each category's threshold fitted here as learned_thresholds documents it: train_streams x
    train_positions streams of the category's model from default_rng([seed, 2, k]) (k: its place among the
    categories sorted), its later tokens' confidences moved by its continuation boost, the entropy drawn
    after the streams from the same generator (entropy_bound), and fit_threshold over the grid: p.grid
    points of [0.02, 0.98], or the drawn entropy's quantiles at those levels."""
    p = sim.policies
    levels = np.linspace(0.02, 0.98, p.grid)
    out = {}
    for k, c in enumerate(sorted(models)):
        rng = np.random.default_rng([seed, 2, k])
        conf, acc = draw_streams(models[c], p.train_streams, p.train_positions, rng)
        later = later_confidence(conf, continuation_boost(models[c]))
        cats = np.array([c] * p.train_streams)
        train = PolicyInputs(confidence=conf[None], later=later[None], categories=cats, batch=4, d=8, costs=costs)
        if policy == "entropy_bound":
            entropy = draw_entropy(models[c]["entropy"], conf, rng)
            train, grid = dataclasses.replace(train, entropy=entropy[None]), np.quantile(entropy, levels)
        else:
            prob = predicted(models, cats, conf[None], later[None])
            train, grid = dataclasses.replace(train, accept_prob=prob), levels
        out[c] = fit_threshold(policy, train, acc, grid, cap)
    return out


BOOSTED = MODEL | {"calibration": {"applies_to": "confidence", "draft_continuation": 2.0}}


@pytest.mark.parametrize("policy", ["rejection_risk", "entropy_bound"])
def test_a_learned_policy_runs_on_the_thresholds_fitted_on_training_streams_of_its_own(ws, monkeypatch, policy):
    """SADDLE at batch 4, d 8 (cap 16), 16 training streams of 64 positions a category, a grid of 19: the
    thresholds the policy runs with are those fitted by hand (``_fit_by_hand``) with the point's cost model;
    rejection_risk on a model with a continuation boost of 2.0 / 0.9 and no entropy term (it needs none),
    its thresholds inside the grid, so another grid or unboosted later tokens would move them."""
    sim = _small(ws, policies={"train_streams": 16, "train_positions": 64, "grid": 19})
    cats = list(sim.categories)
    models = dict.fromkeys(cats, BOOSTED if policy == "rejection_risk" else ENTROPY_MODEL)
    calls = _spied(monkeypatch, policy)
    p = point_inputs(ws, sim, Point("OPT-66B", "SADDLE", 4, 8, 96, "warn", policy), models, dict.fromkeys(cats, 0.4))
    (inputs,) = (i for i, _ in calls if i.confidence is p.confidence)  # the others: the fit's trials
    want = _fit_by_hand(policy, models, sim, policy_costs(p.setup, p.pair, 4, 64.0), ws.settings.seed + 4, 16)
    assert inputs.thresholds == want
    if policy == "rejection_risk":
        assert all(0.02 < t < 0.98 for t in want.values()), want


def test_a_zoo_of_several_points_searches_each_configured_system_once_and_draws_the_streams_once(
    ws, tmp_path, monkeypatch, capsys
):
    """SADDLE and GPU-SD at d 4 and 8 under fixed and running_product, GPU-AD beside them, batch 4: one full
    search per (system, d) under the system's own policy (AD: its own point's); the own policy's row is the
    point run with its search (run_point), the other policy's runs that search's configuration alone (one
    candidate, gain 1); AD's rows at d 4 and 8 are one row (AD reads no d); every row names its experiment,
    the index is the rows' order; the batch's streams are drawn once for every system and d; the progress
    lines name the experiment. An experiment without policies runs each system's search at its own point."""
    cats = ws.settings.simulation.categories
    paths = _model_files(tmp_path, cats)
    models, taus = {c: read_model(p) for c, p in paths["OPT-66B"].items()}, dict.fromkeys(cats, 0.3)
    zoo = {"pairs": ["OPT-66B"], "systems": ["SADDLE", "GPU-SD", "GPU-AD"], "batches": [4], "draft_lengths": [4, 8]}
    experiments = {"zoo": zoo | {"policies": ["fixed", "running_product"]}, "plain": zoo | {"systems": ["SADDLE"]}}
    small = ws.with_overrides(simulation={"replicas": 1, "max_seq_len": 160, "experiments": experiments})
    searched, seeds = [], []
    search, draw = search_point, request_streams
    monkeypatch.setattr(
        "adsl.sim.experiment.search_point", lambda w, s, pt, *a, **k: searched.append(pt) or search(w, s, pt, *a, **k)
    )
    monkeypatch.setattr("adsl.sim.experiment.request_streams", lambda *a: seeds.append(a[-1]) or draw(*a))
    capsys.readouterr()
    df = run_experiment(small, "zoo", paths, {"OPT-66B": taus})
    lines = capsys.readouterr().out.splitlines()
    full = [(pt.system, pt.draft_length, pt.policy) for pt in searched if pt.configuration is None]
    assert full == [(s, d, None) for s in ("SADDLE", "GPU-SD", "GPU-AD") for d in (4, 8)]
    assert seeds == [small.settings.seed + 4]
    assert [ln.rsplit(": ", 1)[0] for ln in lines] == [
        f"experiment zoo: configuration point {i} of 10" for i in range(1, 11)
    ]
    monkeypatch.undo()
    sim = small.settings.simulation.for_experiment("zoo")
    want = []
    for pt in experiment_points(sim, small.settings.simulation.experiments["zoo"]):
        if pt.system == "GPU-AD":
            if pt.draft_length == 4:
                want.append(run_point(small, sim, pt, models, taus))
        elif pt.policy == SYSTEMS[pt.system].policy:
            want.append(run_point(small, sim, pt, models, taus))
        else:
            found = search_point(small, sim, dataclasses.replace(pt, policy=None), models, taus)
            want.append(
                run_point(small, sim, dataclasses.replace(pt, configuration=found.point.configuration), models, taus)
            )
    # the own policy's rows (SADDLE: running_product, GPU-SD: fixed) searched several candidates
    assert [r["search_candidates"] > 1 for r in want] == [False, True] * 2 + [True, False] * 2 + [False]
    pd.testing.assert_frame_equal(df, pd.DataFrame([r | {"experiment": "zoo"} for r in want]))
    plain = run_experiment(small, "plain", paths, {"OPT-66B": taus})
    sim = small.settings.simulation.for_experiment("plain")
    pts = experiment_points(sim, small.settings.simulation.experiments["plain"])
    want = [run_point(small, sim, pt, models, taus) | {"experiment": "plain"} for pt in pts]
    assert [r["search_candidates"] > 1 for r in want] == [True, True]
    pd.testing.assert_frame_equal(plain, pd.DataFrame(want))


KNOBS = {"knobs": ["draft_placement", "micro_batches", "pool_trigger"], "screen_replicas": 1}


def test_the_search_hands_the_tables_it_builds_to_built_and_runs_on_them(ws, monkeypatch):
    """One list ``built`` over four points of one workload: SADDLE at a given configuration builds one set of
    pass tables, runs on it (one candidate, gain 1) and adds it; SADDLE searched adds one set per (draft
    placement, micro-batches) of its 12 candidates (the pool trigger changes no table), each taking the
    first set's prefill table (``PassTables``' reuse, which needs the serving slots: continuous batching),
    screens every candidate on them and runs the kept one's second replica on its set; GPU-AD (one
    candidate, nothing to screen) adds the set it runs on; a configured point after them takes the first
    set's prefill table too."""
    sim = _small(ws, search=KNOBS)
    cats = list(sim.categories)
    models, taus = dict.fromkeys(cats, MODEL), dict.fromkeys(cats, 0.4)
    runs, screens = [], []
    monkeypatch.setattr(
        "adsl.sim.experiment.simulate_point", lambda p, **k: runs.append(k.get("tables")) or simulate_point(p, **k)
    )
    monkeypatch.setattr(
        "adsl.sim.experiment.replica_logs", lambda *a, **k: screens.append(k.get("tables")) or replica_logs(*a, **k)
    )
    built, point = [], Point("OPT-66B", "SADDLE", 4, 8, 96, "warn")
    conf = Configuration("replicated", 1, "complete")
    a = search_point(ws, sim, dataclasses.replace(point, configuration=conf), models, taus, built=built)
    assert (a.candidates, a.gain, len(built)) == (1, 1.0, 1) and runs[0] is built[0]
    assert sim.batching.serving(4).slots < a.inputs.out.shape[1]  # the slots, not the requests
    b = search_point(ws, sim, point, models, taus, built=built)
    assert (b.candidates, len(built), len(runs)) == (12, 7, 2)
    assert all(t.prefill[0] is built[0].prefill[0] for t in built[1:])
    assert all(any(s is t for t in built[1:]) for s in screens) and any(runs[1] is t for t in built[1:])
    search_point(ws, sim, Point("OPT-66B", "GPU-AD", 4, 8, 96, "warn"), models, taus, built=built)
    assert len(built) == 8 and runs[2] is built[7]
    search_point(ws, sim, dataclasses.replace(point, configuration=conf), models, taus, built=built)
    assert len(built) == 9 and runs[3] is built[8] and built[8].prefill[0] is built[0].prefill[0]


def test_a_cost_aware_search_screens_each_candidate_on_lengths_planned_with_its_own_costs(ws):
    """goodput on SADDLE at batch 8: each of the 12 legal configurations run by hand on its own inputs
    (point_inputs at that configuration: lengths planned with its own pass costs, which differ between
    configurations) over the screening replica; the search keeps the first fastest, its gain over the own
    configuration, its inputs, and its run over both replicas."""
    sim = _small(ws, search=KNOBS)
    cats = list(sim.categories)
    models, taus = dict.fromkeys(cats, MODEL), dict.fromkeys(cats, 0.4)
    point = Point("OPT-66B", "SADDLE", 8, 8, 96, "warn", "goodput")
    found = search_point(ws, sim, point, models, taus)
    legal = legal_set(point_inputs(ws, sim, point, models, taus).setup, KNOBS["knobs"])
    each = [point_inputs(ws, sim, dataclasses.replace(point, configuration=c), models, taus) for c in legal]
    assert len({p.lengths.tobytes() for p in each}) > 1
    tput = [simulate_point(first_replicas(p, 1)).throughput_tok_s.mean() for p in each]
    best = tput.index(max(tput))
    assert (found.point.configuration, found.candidates) == (legal[best], 12) and best > 0
    assert found.gain == pytest.approx(tput[best] / tput[0], rel=1e-12)
    np.testing.assert_array_equal(found.inputs.lengths, each[best].lengths)
    np.testing.assert_array_equal(found.result.throughput_tok_s, simulate_point(each[best]).throughput_tok_s)


def test_a_point_that_must_fit_leaves_out_the_candidates_that_do_not_instead_of_stopping(ws):
    """SADDLE's 40 PIM stacks cut to 3.6 GB each (144 GB): its own configuration (one draft copy, 136 GB)
    fits, a draft copy per GPU (8 copies, 156 GB) does not; a point whose memory_check is error searches
    the 4 one-copy candidates and runs, rather than stopping at the first that does not fit."""
    small = ws.with_overrides(hardware={"pim_stacks": {"HBM3-PIM": {"capacity_bytes": 3.6e9}}})
    sim = _small(small, search=KNOBS)
    cats = list(sim.categories)
    models, taus = dict.fromkeys(cats, MODEL), dict.fromkeys(cats, 0.4)
    point = Point("OPT-66B", "SADDLE", 4, 8, 96, "error")
    own = point_inputs(small, sim, point, models, taus).memory
    wide = dataclasses.replace(point, memory_check="warn", configuration=Configuration("replicated", 2, "complete"))
    assert own[0] <= own[1] == 40 * 3.6e9 < point_inputs(small, sim, wide, models, taus).memory[0]
    found = search_point(small, sim, point, models, taus)
    assert found.candidates == 4 and found.point.configuration.draft_placement == "tensor_parallel"
