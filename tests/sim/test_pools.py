"""Mechanism tests of the Shared and Eager Pools (adsl.sim.pools), not paper numbers."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adsl.fitting.generator import CONTINUED, FIRST, running_product_lengths
from adsl.sim.engine import Setup, SimError, simulate
from adsl.sim.pools import pool_admit, simulate_pooled
from adsl.sim.timing import Schedule

PIM_MAP = {"fc": "gpu", "attention": "pim"}


def pooled_setup(hw, d=4, pool=512, eager=False, trigger="complete", dynamic=False, system="saddle"):
    return Setup(
        "pooled",
        hw.system(system),
        "sd",
        d,
        PIM_MAP,
        PIM_MAP,
        Schedule(micro_batches=1),
        policy="running_product",
        dynamic=dynamic,
        pool_tokens=pool,
        eager=eager,
        pool_trigger=trigger,
    )


def streams(seed, batch, t, p=0.7, flagged=False):
    rng = np.random.default_rng(seed)
    conf = rng.beta(4, 1, (1, batch, t)).astype(np.float32)
    acc = rng.random((1, batch, t)) < p
    if flagged:  # first-token and continuation outcomes (a within-draft term)
        acc = acc.astype(np.uint8) | (rng.random((1, batch, t)) < 0.9).astype(np.uint8) << 1
    return conf, acc


def run(models, st_, out, conf, acc, tau):
    out = np.asarray(out)[None, :]
    lengths = running_product_lengths(conf[0], tau, 2 * st_.draft_length + 1)[None]
    return simulate_pooled(st_, models.pair("OPT-66B"), np.full(out.shape, 64.0), out, acc, conf, lengths)


def test_pool_admits_highest_running_products_first():
    conf = np.array([[[0.9, 0.9, 0.9], [0.5, 0.5, 0.5], [0.99, 0.2, 0.95]]])
    want = np.array([[3, 3, 3]])
    # 3 query tokens + 4 draft tokens: H = .9 .81 .729 | .5 .25 .125 | .99 .198 .188 (ranking the raw
    # confidences instead would admit .99 and .95 of the last request: [2, 0, 2])
    kept = pool_admit(want, conf, np.array([3]), 7)
    assert kept.tolist() == [[3, 0, 1]]
    assert pool_admit(want, conf, np.array([3]), 3).tolist() == [[0, 0, 0]]
    assert pool_admit(want, conf, np.array([3]), 100).tolist() == [[3, 3, 3]]


@settings(max_examples=20, deadline=None)
@given(
    st.integers(1, 12),
    st.integers(1, 6),
    st.integers(0, 60),
    st.booleans(),
    st.sampled_from(["complete", "idle"]),
    st.floats(0.0, 0.9),
    st.integers(0, 2**31 - 1),
)
def test_pool_capacity_and_token_conservation(models, hw, batch, d, extra_room, eager, trigger, tau, seed):
    pool = batch + 1 + extra_room
    out = np.random.default_rng(seed).integers(1, 40, batch)
    conf, acc = streams(seed, batch, 40 + 4 * d + 4)
    res = run(models, pooled_setup(hw, d, pool, eager, trigger), out, conf, acc, tau)
    assert res["pool"]["pool_max"][0] <= pool
    assert res["tokens"][0] == out.sum()
    assert res["time_s"][0] > 0 and np.isfinite(res["energy_j"][0])


def test_eager_tokens_discarded_on_rejection_and_kept_on_full_acceptance(models, hw):
    d = 3
    st_ = pooled_setup(hw, d, pool=1 + d, eager=True)  # one request, pool holds exactly its d tokens
    conf = np.ones((1, 1, 80), dtype=np.float32)  # tau never stops a draft: always 2 d available
    all_acc = np.ones((1, 1, 80), dtype=bool)
    res = run(models, st_, [40], conf, all_acc, 0.5)
    assert res["pool"]["wasted"][0] == 0  # every eager token migrated and was accepted
    none_acc = np.zeros((1, 1, 80), dtype=bool)
    res = run(models, st_, [10], conf, none_acc, 0.5)
    # every pass rejects the first token: the d verified and d + 1 eager tokens of each pass are lost
    assert res["iterations"][0] == 10
    assert res["pool"]["drafted"][0] == 10 * (2 * d + 1)
    assert res["pool"]["wasted"][0] == res["pool"]["drafted"][0]


def test_kept_eager_tokens_continue_their_draft(models, hw):
    """With a within-draft term, tokens kept from the Eager Pool continue an accepted draft (CONTINUED
    outcomes), while fixed-length SD starts every draft afresh (FIRST outcomes)."""
    d, out = 3, 40
    st_ = pooled_setup(hw, d, pool=1 + d, eager=True)
    conf = np.ones((1, 1, 80), dtype=np.float32)
    flags = np.full((1, 1, 80), CONTINUED, dtype=np.uint8)
    flags[0, 0, 0] |= FIRST  # only the very first draft's first token passes as a first token
    saddle = run(models, st_, [out], conf, flags, 0.0)
    assert saddle["iterations"][0] == -(-out // (d + 1)) and saddle["pool"]["wasted"][0] == 0
    fixed = dataclasses.replace(st_, policy="fixed", pool_tokens=0, eager=False)
    ref = simulate(fixed, models.pair("OPT-66B"), np.full((1, 1), 64.0), np.array([[out]]), flags)
    assert ref["iterations"][0] == 1 + (out - (d + 1))  # one full draft, then one token per pass


@pytest.mark.parametrize("flagged", [False, True])
def test_tau_zero_and_ample_pool_is_fixed_length_sd(models, hw, flagged):
    """SADDLE-p with tau = 0 (never stop early) and a pool that never binds = fixed-d SD with one pooled
    verification pass per iteration (also with a within-draft term: both start every draft afresh)."""
    d, batch = 4, 6
    conf, acc = streams(3, batch, 60 + 4 * d + 4, flagged=flagged)
    out = np.full(batch, 60)
    st_ = pooled_setup(hw, d, pool=batch * (d + 1))
    pooled = run(models, st_, out, conf, acc, 0.0)
    fixed = dataclasses.replace(st_, policy="fixed", pool_tokens=0)
    ref = simulate(fixed, models.pair("OPT-66B"), np.full((1, batch), 64.0), out[None], acc)
    assert pooled["tokens"][0] == ref["tokens"][0]
    assert pooled["iterations"][0] == ref["iterations"][0]
    assert pooled["time_s"][0] == pytest.approx(ref["time_s"][0], rel=1e-9)
    assert pooled["energy_j"][0] == pytest.approx(ref["energy_j"][0], rel=1e-9)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 6), st.floats(0.0, 1.0), st.integers(0, 2**31 - 1), st.sampled_from(["complete", "idle"]))
def test_saddle_with_tau_zero_and_a_one_request_pool_is_fixed_length_sd(models, hw, d, p, seed, trigger):
    """One request, tau = 0 (never stop early), a pool of d + 1 tokens: the Eager Pool keeps exactly
    the next d-token draft when the bonus matches, so verification windows and emitted tokens are
    those of fixed-length SD; only the time differs (drafting overlaps verification)."""
    conf, acc = streams(seed, 1, 50 + 4 * d + 4, p)
    st_ = pooled_setup(hw, d, pool=d + 1, eager=True, trigger=trigger)
    saddle = run(models, st_, [50], conf, acc, 0.0)
    fixed = dataclasses.replace(st_, policy="fixed", pool_tokens=0, eager=False)
    ref = simulate(fixed, models.pair("OPT-66B"), np.full((1, 1), 64.0), np.array([[50]]), acc)
    assert saddle["tokens"][0] == ref["tokens"][0] == 50
    # one request: the verifier has nobody else's tokens to start on, so both triggers wait for the
    # same complete draft and verify the same windows as fixed-length SD
    assert saddle["iterations"][0] == ref["iterations"][0]
    other = run(
        models,
        dataclasses.replace(st_, pool_trigger="idle" if trigger == "complete" else "complete"),
        [50],
        conf,
        acc,
        0.0,
    )
    assert other["time_s"][0] == pytest.approx(saddle["time_s"][0], rel=1e-12)


def test_idle_trigger_verifies_partial_drafts_of_several_requests(models, hw):
    """Several requests, d = 2: the idle trigger starts a pass on whatever the pool holds instead of
    waiting for every draft, so it verifies more often than the complete trigger, with the same tokens."""
    conf, acc = streams(1, 8, 60 + 12, 0.7)
    res = {}
    for trigger in ("complete", "idle"):
        st_ = pooled_setup(hw, 2, pool=8 * 3, eager=True, trigger=trigger)
        res[trigger] = run(models, st_, np.full(8, 60), conf, acc, 0.3)
    assert res["idle"]["tokens"][0] == res["complete"]["tokens"][0] == 8 * 60
    assert res["idle"]["iterations"][0] > 1.2 * res["complete"]["iterations"][0]


def test_async_overlap_never_slower_than_its_parts(models, hw):
    conf, acc = streams(5, 16, 200 + 36)
    st_ = pooled_setup(hw, 8, pool=512, eager=True, dynamic=True)
    res = run(models, st_, np.full(16, 200), conf, acc, 0.3)
    stage = {k: v[0] for k, v in res["stage_s"].items()}
    assert res["time_s"][0] == pytest.approx(stage["draft"] + stage["verify"] - stage["overlap"], rel=1e-9)
    # the Eager Pool drafts during verification: a real share of the drafting is hidden
    assert stage["overlap"] > 0.05 * stage["draft"]
    lazy = run(models, dataclasses.replace(st_, eager=False), np.full(16, 200), conf, acc, 0.3)
    assert lazy["stage_s"]["overlap"][0] == 0.0
    assert lazy["time_s"][0] == pytest.approx(lazy["stage_s"]["draft"][0] + lazy["stage_s"]["verify"][0], rel=1e-9)
    assert res["time_s"][0] < lazy["time_s"][0]


def test_invalid_pool_settings(models, hw):
    with pytest.raises(SimError, match="Eager Pool needs a Shared Pool"):
        pooled_setup(hw, pool=0, eager=True)
    with pytest.raises(SimError, match="pool_trigger"):
        pooled_setup(hw, trigger="sometimes")
    conf, acc = streams(0, 8, 100)
    with pytest.raises(SimError, match="cannot hold one query token per request"):
        run(models, pooled_setup(hw, pool=8), np.full(8, 10), conf, acc, 0.3)


def _admit_by_sorting(want, conf, queries, capacity):
    x, r, w = conf.shape
    h = np.cumprod(conf.astype(np.float64), axis=2)
    cand = np.arange(w)[None, None, :] < want[..., None]
    score = np.where(cand, h, -1.0).reshape(x, r * w)
    order = np.argsort(-score, axis=1, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(r * w)[None, :].repeat(x, axis=0), axis=1)
    keep = (rank < np.maximum(capacity - queries, 0)[:, None]) & cand.reshape(x, r * w)
    return keep.reshape(x, r, w).sum(axis=2)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3), st.integers(1, 9), st.integers(1, 6), st.integers(0, 40), st.integers(0, 2**31 - 1))
def test_pool_admission_equals_a_stable_ranking(x, r, w, capacity, seed):
    rng = np.random.default_rng(seed)
    conf = rng.choice([0.5, 0.9, 1.0], size=(x, r, w))  # coarse values: many ties
    want = rng.integers(0, w + 1, (x, r))
    queries = rng.integers(0, r + 1, x)
    assert (pool_admit(want, conf, queries, capacity) == _admit_by_sorting(want, conf, queries, capacity)).all()
