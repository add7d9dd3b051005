"""The core's autoregressive and speculative decoding without a pool (``simulate_core`` in modes AD and SD):
closed forms of all-accepted and none-accepted streams, monotonicity in bandwidth, conservation of
tokens, continuous batching's slots and window, the cost of a pass, of a prefill and of a whole run
recomputed round by round, the dynamic scheduler's placement, and the input checks."""

import dataclasses
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adsl.fitting.generator import CONTINUED, FIRST, as_flags, running_product_lengths
from adsl.settings import Continuous, MicroBatching
from adsl.sim.core import simulate_core
from adsl.sim.setup import PREFILL_MAPPING, Setup, SimError
from adsl.sim.timing import CostTable, batch_pass
from adsl.sim.workload import Workload
from tests.sim.builders import GPU, PIM, logged, pooled, setup

PAIR = "OPT-66B"


def _groups(res, slots):
    """The micro-batches the run cut its slots into: near-equal runs of consecutive slots."""
    mb = int(res.placement["micro_batches"])
    edges = np.linspace(0, slots, max(1, min(mb, slots)) + 1).round().astype(int)
    return [(a, b) for a, b in zip(edges[:-1], edges[1:], strict=True) if b > a]


def _run(models, s, out, accept=None, prompt=64.0, **kw):
    out = np.asarray(out)[None, :]
    return simulate_core(s, models.pair(PAIR), Workload(np.full(out.shape, prompt), out, accept), **kw)


# -- closed forms and monotonicity --------------------------------------------------------------------------


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 8), st.integers(1, 60))
def test_all_accepted_emits_d_plus_one(models, hw, d, out_len):
    """Every draft token accepted: each micro-batch verifies ceil(out / (d + 1)) times."""
    acc = np.ones((1, 3, out_len + d + 1), dtype=bool)
    res = _run(models, setup(hw, "motivation-4gpu", d=d, mb=5), [out_len] * 3, acc)
    assert res.iterations[0] == len(_groups(res, 3)) * -(-out_len // (d + 1))
    assert res.tokens[0] == 3 * out_len
    assert res.drafted[0] == d * res.request_rounds[0] == d * 3 * -(-out_len // (d + 1))


def test_none_accepted_one_token_per_verification_and_slower_than_ad(models, hw):
    acc = np.zeros((1, 4, 80), dtype=bool)
    sd = _run(models, setup(hw, "motivation-4gpu", d=4, mb=5), [50] * 4, acc)
    ad = _run(models, setup(hw, "motivation-4gpu", decoding="ad", mb=5), [50] * 4)
    assert sd.iterations[0] == 50 * len(_groups(sd, 4)) and sd.tokens[0] == 200
    assert sd.request_rounds[0] == 200
    assert sd.time_s[0] > ad.time_s[0]


@settings(max_examples=15, deadline=None)
@given(st.floats(1.05, 3.0), st.integers(0, 2**31 - 1))
def test_more_bandwidth_never_slower(models, hw, factor, seed):
    base = setup(hw, "motivation-4gpu", mb=5)
    s = base.system
    faster = dataclasses.replace(
        s,
        gpu=dataclasses.replace(s.gpu, mem_bw_bytes_s=s.gpu.mem_bw_bytes_s * factor),
        pim=dataclasses.replace(s.pim, external_bw_bytes_s=s.pim.external_bw_bytes_s * factor),
    )
    acc = np.random.default_rng(seed).random((1, 4, 80)) < 0.6
    slow = _run(models, base, [40] * 4, acc)
    fast = _run(models, dataclasses.replace(base, system=faster), [40] * 4, acc)
    assert fast.time_s[0] <= slow.time_s[0] * (1 + 1e-12)


def test_every_request_emits_its_output_length(models, hw):
    rng = np.random.default_rng(3)
    out = rng.integers(5, 90, 7)
    res = _run(models, setup(hw, "motivation-4gpu", d=6, mb=5), out, rng.random((1, 7, 100)) < 0.8)
    assert res.tokens[0] == out.sum()


@settings(max_examples=25, deadline=None)
@given(
    st.integers(1, 5),
    st.integers(1, 6),
    st.floats(0.0, 1.0),
    st.sampled_from(["motivation-4gpu", "dgx-a100", "attacc-pim"]),
    st.integers(0, 2**31 - 1),
    st.sampled_from(["bool", "flagged", "adaptive"]),
)
def test_every_replica_emits_its_outputs_in_bounded_rounds(pair, hw, batch, d, p, system, seed, streams_):
    """Three replicas with their own outputs and streams (bool, first-token / continuation flags, or
    adaptive lengths), two micro-batches where they pay: every replica emits its outputs and completes
    every request; AD decodes each micro-batch as long as its longest request; SD verifies every request
    between ceil(out / (d + 1)) and out times and drafts at most d tokens a verification."""
    rng = np.random.default_rng(seed)
    x = 3
    out = rng.integers(1, 30, (x, batch))
    t = int(out.max()) + d + 1
    acc = rng.random((x, batch, t)) < p
    lengths = None
    if streams_ == "flagged":
        acc = acc.astype(np.uint8) * FIRST | (rng.random((x, batch, t)) < p).astype(np.uint8) * CONTINUED
    elif streams_ == "adaptive":
        lengths = np.stack([running_product_lengths(c, 0.5, d) for c in rng.beta(5, 1, (x, batch, t))])
    for decoding in ("ad", "sd"):
        kw = {"policy": "running_product"} if lengths is not None and decoding == "sd" else {}
        s = dataclasses.replace(
            setup(hw, system, decoding, d, **kw), micro_batching=MicroBatching(2, overlap=system == "attacc-pim")
        )
        sd = decoding == "sd"
        res = simulate_core(
            s, pair, Workload(np.full(out.shape, 64.0), out, acc if sd else None, lengths if sd else None)
        )
        np.testing.assert_array_equal(res.tokens, out.sum(axis=1))
        np.testing.assert_array_equal(res.window["total_tokens"], out.sum(axis=1))
        np.testing.assert_array_equal(res.window["completed"], np.full(x, batch))
        groups = _groups(res, batch)
        if sd:
            assert (res.request_rounds >= (-(-out // (d + 1))).sum(axis=1)).all()
            assert (res.request_rounds <= out.sum(axis=1)).all()
            assert (res.drafted <= d * res.request_rounds).all()
            assert (res.iterations <= res.request_rounds).all()
        else:
            longest = sum(out[:, a:b].max(axis=1) for a, b in groups)
            np.testing.assert_array_equal(res.iterations, longest)
            np.testing.assert_array_equal(res.request_rounds, out.sum(axis=1))
            assert (res.drafted == 0).all()


def test_tau_zero_is_fixed_length_sd(pair, hw):
    """With tau = 0 the running-product rule never stops early: SADDLE-d = fixed-length SD."""
    rng = np.random.default_rng(0)
    conf = rng.beta(5, 1, (2, 6, 120))
    acc = rng.random(conf.shape) < conf
    lengths = np.stack([running_product_lengths(c, 0.0, 5) for c in conf])
    # tau = 0 itself, not a floor: every position a 60-token request reaches drafts the full 5
    assert (lengths[..., : 60 + 5] == 5).all()
    s = setup(hw, "motivation-4gpu", d=5, mb=5)
    prompt, out = np.full((2, 6), 64.0), np.full((2, 6), 60)
    a = simulate_core(dataclasses.replace(s, policy="running_product"), pair, Workload(prompt, out, acc, lengths))
    b = simulate_core(s, pair, Workload(prompt, out, acc))
    np.testing.assert_allclose(a.time_s, b.time_s, rtol=1e-12)
    np.testing.assert_array_equal(a.tokens, b.tokens)
    np.testing.assert_array_equal(a.drafted, b.drafted)


# -- continuous batching -----------------------------------------------------------------------------------


def _check_occupancy(rep, slots, out):
    """No slot idle while a request waits: every queued request takes a slot at the moment one frees (the
    k-th queued at the k-th completion), and every round that ends before the queue runs dry (the
    N - slots + 1-th completion) holds a request in every slot. Every request finishes and emits exactly
    its output length."""
    n = out.size
    done = np.sort(rep.t_done)
    assert np.isfinite(done).all()
    np.testing.assert_array_equal(rep.t_admit[slots:], done[: n - slots])
    dry = done[n - slots]
    assert (rep.round_n[rep.round_t <= dry] == slots).all() and (rep.round_t <= dry).any()
    assert rep.event_emitted.sum() == out.sum() and rep.event_completed.sum() == n


@settings(max_examples=20, deadline=None)
@given(
    st.integers(1, 4),
    st.integers(2, 4),
    st.integers(1, 5),
    st.floats(0.0, 1.0),
    st.integers(0, 2**31 - 1),
    st.booleans(),
    st.booleans(),
)
def test_continuous_batching_keeps_slots_full_and_conserves_tokens(pair, hw, slots, per_slot, d, p, seed, pre, ad):
    """One micro-batch, AD or SD (fixed or adaptive lengths), with or without prefill and static power."""
    rng = np.random.default_rng(seed)
    n = slots * per_slot
    out = rng.integers(1, 25, (1, n))
    conf = rng.beta(5, 1, (1, n, 40))
    acc = rng.random(conf.shape) < (conf if seed % 2 else p)
    lengths = None if ad or seed % 2 else running_product_lengths(conf[0], 0.4, d)[None]
    s = setup(hw, decoding="ad" if ad else "sd", d=d, static_power=bool(seed % 3))
    if lengths is not None:
        s = dataclasses.replace(s, policy="running_product")
    with pytest.MonkeyPatch.context() as mp:
        res, _, (rep,) = logged(
            mp,
            s,
            pair,
            Workload(np.full((1, n), 64.0), out, None if ad else acc, lengths),
            serving=Continuous(slots, 0, prefill=pre),
        )
    assert res.placement["micro_batches"] == 1.0
    _check_occupancy(rep, slots, out[0])
    assert res.window["total_tokens"][0] == out.sum()
    assert (res.stage_s["prefill"][0] > 0) == (pre and n > slots)


@pytest.mark.parametrize("eager", [False, True])
def test_pools_keep_slots_full_and_emit_every_output(pair, hw, monkeypatch, eager):
    """SADDLE-p and SADDLE-s under continuous batching: no slot idle while a request waits, every request
    emits its output, and the window (after a warm-up of one wave, before the drain) is a part of it."""
    rng = np.random.default_rng(11)
    n, slots, d = 15, 5, 4
    out = rng.integers(10, 60, (2, n))
    conf = rng.beta(5, 1, (2, n, 120)).astype(np.float32)
    acc = rng.random(conf.shape) < conf
    lengths = np.stack([running_product_lengths(c, 0.4, 2 * d) for c in conf])
    s = pooled(hw, eager, mb=2, d=d)
    res, _, reps = logged(
        monkeypatch,
        s,
        pair,
        Workload(np.full((2, n), 64.0), out, acc, lengths, conf, conf),
        Continuous(slots, slots),
    )
    for r, rep in enumerate(reps):
        done = np.sort(rep.t_done)
        assert np.isfinite(done).all()
        np.testing.assert_array_equal(rep.t_admit[slots:], done[: n - slots])
        assert rep.event_emitted.sum() == out[r].sum() and rep.event_completed.sum() == n
    assert (res.tokens < out.sum(axis=1)).all() and (res.time_s < res.window["total_s"]).all()


def test_window_excludes_warmup_and_drain(pair, hw):
    """AD with equal outputs: generations finish together; the window is generations 2..K of K."""
    n, slots, k = 12, 4, 3
    out = np.full((1, n), 10)
    s = setup(hw, decoding="ad")
    res = simulate_core(s, pair, Workload(np.full((1, n), 64.0), out), serving=Continuous(slots, slots))
    assert res.placement["micro_batches"] == 1.0
    assert res.iterations[0] == 20 and res.tokens[0] == 2 * slots * 10
    assert res.window["completed"][0] == (k - 1) * slots  # generations 2 and 3; then the batch drains
    assert res.window["total_tokens"][0] == n * 10
    static = simulate_core(s, pair, Workload(np.full((1, slots), 64.0), np.full((1, slots), 10)))
    assert res.time_s[0] > 2 * static.time_s[0]  # prefill of the admitted requests is charged
    assert res.window["end_s"][0] == res.window["total_s"][0]  # the last generation ends with the run


# -- costs ---------------------------------------------------------------------------------------------------


def test_one_decode_step_is_one_pass_of_the_cost_model(pair, hw):
    """Hand-computed: one request of one output token over a 64-token prompt (on the tables' context grid)
    costs exactly one target pass of the cost model with the setup's mapping."""
    s = dataclasses.replace(setup(hw, "attacc-pim", "ad"), micro_batching=MicroBatching(2, overlap=True))
    res = simulate_core(s, pair, Workload(np.full((1, 1), 64.0), np.ones((1, 1), np.int64)))
    c = batch_pass(pair.target, s.system, 1, 1, 64.0, PIM, s.micro_batching)
    assert res.time_s[0] == pytest.approx(float(c.time_s), rel=1e-12)
    assert res.energy_j[0] == pytest.approx(float(c.energy_j), rel=1e-12)
    assert res.stage_s["verify"][0] == res.time_s[0] and res.window["total_s"][0] == res.time_s[0]
    assert res.stage_s["draft"][0] == res.stage_s["prefill"][0] == res.stage_s["overlap"][0] == 0.0
    assert res.iterations[0] == res.tokens[0] == 1
    for k, v in c.busy_s.items():
        assert res.busy_s[k][0] == pytest.approx(float(v), rel=1e-12)
    for k, v in c.by_class_s.items():
        assert res.class_s[k][0] == pytest.approx(float(v), rel=1e-12)


def test_cost_table_matches_the_cost_model(pair, hw):
    s = hw.system("motivation-4gpu")
    five = MicroBatching(micro_batches=5)
    table = CostTable.build(pair.target, s, 9, PIM, five, 64, 1100)
    n = np.array([1, 7, 33, 64])
    ctx = np.array([128.0, 333.3, 700.5, 1023.0])
    direct = batch_pass(pair.target, s, n, 9, ctx, PIM, five)
    looked = table.lookup(n, ctx)
    np.testing.assert_allclose(looked.time_s, direct.time_s, rtol=0.01)
    np.testing.assert_allclose(looked.energy_j, direct.energy_j, rtol=0.01)
    on_grid = table.lookup(n, np.array([128.0, 336.0, 704.0, 1024.0]))
    exact = batch_pass(pair.target, s, n, 9, np.array([128.0, 336.0, 704.0, 1024.0]), PIM, five)
    np.testing.assert_allclose(on_grid.time_s, exact.time_s, rtol=1e-12)


@pytest.mark.parametrize(
    "system,decoding,copies", [("dgx-a100", "ad", 1), ("saddle-tp", "sd", 1), ("saddle-tp", "sd", 8)]
)
def test_prefill_adds_the_cost_models_prompt_passes(pair, hw, system, decoding, copies):
    """Continuous batching, one micro-batch, every request the same length and every draft accepted, so
    the slots empty together: 12 requests through 4 slots admit 4 requests twice. Prefilling them makes
    the run longer by twice the cost model's prompt pass over 4 requests (the target, then for SD the
    draft with its copies; on the GPUs at the mean prompt of every replica's requests, nothing cached),
    adds its energy, and is the window's prefill time."""
    n, slots = 12, 4
    rng = np.random.default_rng(2)
    prompt = np.repeat(rng.integers(20, 300, (1, n)).astype(float), 2, 0)
    prompt[1, 0] += 7.0  # replicas' prompts differ: the mean over all of them counts
    out = np.full((2, n), 10)
    s = setup(
        hw, system, decoding, 4, draft_copies=copies, draft_placement="replicated" if copies > 1 else "tensor_parallel"
    )
    acc = np.ones((2, n, 15), bool) if decoding == "sd" else None
    runs = {
        pre: simulate_core(s, pair, Workload(prompt, out, acc), serving=Continuous(slots, 0, prefill=pre))
        for pre in (1, 0)
    }
    q = int(round(prompt.mean()))
    c = batch_pass(pair.target, s.system, slots, q, 0.0, PREFILL_MAPPING, MicroBatching())
    if decoding == "sd":
        c = c.add(batch_pass(pair.draft, s.system, slots, q, 0.0, PREFILL_MAPPING, MicroBatching(), copies))
    with_, without = runs[1], runs[0]
    assert with_.placement["micro_batches"] == 1.0
    np.testing.assert_allclose(with_.window["total_s"] - without.window["total_s"], 2 * float(c.time_s), rtol=1e-9)
    np.testing.assert_allclose(with_.energy_j - without.energy_j, 2 * float(c.energy_j), rtol=1e-9)
    np.testing.assert_allclose(with_.stage_s["prefill"], 2 * float(c.time_s), rtol=1e-9)
    assert (without.stage_s["prefill"] == 0).all()
    np.testing.assert_array_equal(with_.tokens, without.tokens)


# -- a whole run recomputed round by round ------------------------------------------------------------------


def _add(acc: dict, key, value: float) -> None:
    acc[key] = acc.get(key, 0.0) + float(value)


class _Costs:
    """Scalar pass costs from cost tables built here from the setup's fields: one per (model, q), the
    passes unsplit (a micro-batch is a pass of its own), contexts to a generous bound."""

    def __init__(self, setup_: Setup, pair, slots: int, ctx_max: float):
        self.setup, self.pair, self.slots, self.ctx_max = setup_, pair, slots, ctx_max
        self.target = {}
        s = setup_
        self._draft = CostTable.build(
            pair.draft, s.system, 1, s.draft_mapping, MicroBatching(), slots, ctx_max, s.draft_copies
        )

    def _target(self, q: int) -> CostTable:
        s = self.setup
        if q not in self.target:
            self.target[q] = CostTable.build(
                self.pair.target, s.system, q, s.target_mapping, MicroBatching(), self.slots, self.ctx_max
            )
        return self.target[q]

    def decode(self, n, ctx):
        return self._target(1).lookup(n, ctx)

    def draft(self, n, ctx):
        return self._draft.lookup(n, ctx)

    def verify(self, n, ctx, q):
        """q tokens per request on average: linear between the integer-q passes around it."""
        lo = int(np.floor(q))
        f = q - lo
        a = self._target(lo).lookup(n, ctx)
        if f == 0:
            return a
        return a.combine(self._target(lo + 1).lookup(n, ctx), f, 1.0)

    def prefill(self, n, prompt_mean):
        s, q = self.setup, max(1, int(round(prompt_mean)))
        c = batch_pass(self.pair.target, s.system, n, q, 0.0, GPU, MicroBatching())  # on the GPUs, whatever the mapping
        if s.decoding == "sd":
            c = c.add(batch_pass(self.pair.draft, s.system, n, q, 0.0, GPU, MicroBatching(), s.draft_copies))
        return c


def _reference(setup_: Setup, pair, prompt, out, accept=None, lengths=None, serving=None) -> dict:
    """One replica of one micro-batch, request by request and pass after pass on one clock: per round the
    draft steps, the verification (or the decode pass), then the prefill of the requests that took the
    finished requests' slots; then the sums over the measured window (from the warm-up-th completion to
    the N - slots + 1-th, or the whole run of a static batch)."""
    n_req, d = len(out), setup_.draft_length
    slots = n_req if serving is None else serving.slots
    costs = _Costs(setup_, pair, slots, max(prompt) + max(out) + 2 * d + 64)
    flags = as_flags(np.asarray(accept)) if accept is not None else None
    holder, queue = list(range(slots)), list(range(slots, n_req))
    gen, ctx, pos = [0] * n_req, [float(p) for p in prompt], [0] * n_req
    clock, passes, events, rounds = 0.0, [], [], []  # passes: (stage, cost, start, end)

    def book(stage, c):
        nonlocal clock
        passes.append((stage, c, clock, clock + float(c.time_s)))
        clock += float(c.time_s)

    while any(h is not None for h in holder):
        act = [h for h in holder if h is not None]
        n = len(act)
        mean = sum(ctx[i] for i in act) / n
        emitted = drafted = 0
        if setup_.decoding == "sd":
            length = {i: d if lengths is None else min(int(lengths[i][pos[i]]), d) for i in act}
            drafted = sum(length.values())
            for j in range(d):
                drafting = [i for i in act if length[i] > j]
                if drafting:
                    book("draft", costs.draft(len(drafting), sum(ctx[i] for i in drafting) / len(drafting) + j))
            book("verify", costs.verify(n, mean, sum(length[i] + 1 for i in act) / n))
            for i in act:
                a = 0
                while a < length[i] and flags[i][pos[i] + a] & (FIRST if a == 0 else CONTINUED):
                    a += 1
                e = min(a + 1, out[i] - gen[i])
                pos[i], gen[i], ctx[i] = pos[i] + a + 1, gen[i] + e, ctx[i] + e
                emitted += e
        else:
            book("verify", costs.decode(n, mean))
            for i in act:
                gen[i], ctx[i] = gen[i] + 1, ctx[i] + 1
                emitted += 1
        rounds.append((clock, n, drafted))
        done = admitted = 0
        for s, i in enumerate(holder):
            if i is not None and gen[i] >= out[i]:
                done += 1
                holder[s] = queue.pop(0) if queue else None
                admitted += holder[s] is not None
        events.append((clock, emitted, done))
        if serving is not None and serving.prefill and admitted:
            book("prefill", costs.prefill(admitted, float(np.mean(prompt))))
    lo, hi = 0.0, clock
    if serving is not None:
        cum = np.cumsum([e[2] for e in events])
        lo = events[int(np.searchsorted(cum, max(serving.warmup, 1)))][0] if serving.warmup else 0.0
        hi = events[int(np.searchsorted(cum, n_req - slots + 1))][0]
    res = {"time_s": hi - lo, "total_s": clock, "start_s": lo, "end_s": hi, "energy_j": 0.0}
    res.update(stage_s={}, busy_s={}, class_s={})
    inside = [e for e in events if serving is None or lo < e[0] <= hi]
    res["tokens"], res["completed"] = sum(e[1] for e in inside), sum(e[2] for e in inside)
    inside = [r for r in rounds if serving is None or lo < r[0] <= hi]
    res["iterations"], res["request_rounds"] = len(inside), sum(r[1] for r in inside)
    res["drafted"] = sum(r[2] for r in inside)
    for stage, c, start, end in passes:
        if start < lo or end > hi:
            assert end <= lo or start >= hi  # one clock: a pass lies inside the window or outside it
            continue
        res["energy_j"] += float(c.energy_j)
        _add(res["stage_s"], stage, c.time_s)
        for k, v in c.busy_s.items():
            _add(res["busy_s"], k, v)
        for k, v in c.by_class_s.items():
            _add(res["class_s"], k, v)
    if setup_.static_power:
        res["energy_j"] += setup_.system.static_power_w * res["time_s"]
    return res


def _check(res, r: int, ref: dict) -> None:
    """Replica r of the core's result equals the reference, key for key."""
    for key in ("tokens", "iterations", "drafted", "request_rounds"):
        assert getattr(res, key)[r] == ref[key], key
    for key in ("time_s", "energy_j"):
        assert getattr(res, key)[r] == pytest.approx(ref[key], rel=1e-9), key
    for group in ("stage_s", "busy_s", "class_s"):
        got = {k: v[r] for k, v in getattr(res, group).items() if k != "overlap"}
        want = {k: ref[group].get(k, 0.0) for k in got}
        assert set(ref[group]) <= set(got), group
        assert got == pytest.approx(want, rel=1e-9, abs=1e-15), group
    assert res.stage_s["overlap"][r] == pytest.approx(0.0, abs=1e-12 * ref["time_s"])
    win = res.window
    assert win["completed"][r] == ref["completed"]
    assert win["total_s"][r] == pytest.approx(ref["total_s"], rel=1e-9)
    assert win["start_s"][r] == pytest.approx(ref["start_s"], rel=1e-9, abs=1e-15)
    assert win["end_s"][r] == pytest.approx(ref["end_s"], rel=1e-9)


def _flags(rng, shape, p):
    """Two-outcome streams: first-token and continuation acceptance drawn apart (uint8 bit flags)."""
    return (rng.random(shape) < p).astype(np.uint8) * FIRST | (rng.random(shape) < p).astype(np.uint8) * CONTINUED


CASES = {
    # AD with attention kept on the GPUs of a PIM system (not the default mapping); float output lengths
    "ad-static-gpu-attention-on-pim": dict(system="attacc-pim", decoding="ad", target_mapping=GPU, float_out=True),
    # fixed-length SD, flagged streams, the draft replicated on every device (copies > 1)
    "sd-static-replicated-draft": dict(draft_copies=8, draft_placement="replicated"),
    # adaptive lengths (some zero) through the stages of a pipeline
    "sd-adaptive-pipeline": dict(system="saddle", policy="running_product"),
    # adaptive lengths over prompts shorter than a table cell, one replica done after its first round:
    # the other replica's rounds must not read a verification of zero tokens per request
    "sd-adaptive-short-prompts": dict(policy="running_product", prompt=4.0, first_replica_out=1),
    # continuous batching with prefill: replicated draft prefilled too, varied prompts, a warm-up
    "sd-continuous-prefill": dict(draft_copies=8, draft_placement="replicated", serving=Continuous(3, 2, True)),
    "sd-adaptive-continuous-prefill": dict(policy="running_product", serving=Continuous(3, 3, True)),
    "ad-continuous-prefill": dict(system="dgx-a100", decoding="ad", serving=Continuous(3, 2, True)),
    # one-token prompts are prefilled as one token each
    "sd-one-token-prompts-continuous": dict(d=2, serving=Continuous(2, 1, True), prompt=1.0),
    # long drafts (d = 24) of two requests that accept nothing reach contexts d past prompt + output:
    # the tables must cover them
    "sd-long-drafts-past-the-outputs": dict(
        system="saddle", target_mapping=GPU, d=24, static_power=True, n=2, out=20, prompt=2860.0, p=0.0
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_one_micro_batch_run_equals_a_round_by_round_recomputation(pair, hw, case):
    """One micro-batch: tokens, rounds, drafted tokens, time, energy, stage, device-busy and class times
    and the measured window of every replica equal a request-by-request recomputation from cost tables
    built here (static batches and continuous batching with prefill, bool and flagged streams, fixed and
    adaptive draft lengths, one stage and a pipeline)."""
    kw = dict(CASES[case])
    serving, prompt_len, p = kw.pop("serving", None), kw.pop("prompt", None), kw.pop("p", 0.8)
    out_len, n, float_out = kw.pop("out", None), kw.pop("n", 4), kw.pop("float_out", False)
    first_out = kw.pop("first_replica_out", None)
    s = setup(hw, kw.pop("system", "saddle-tp"), kw.pop("decoding", "sd"), kw.pop("d", 4), **kw)
    rng = np.random.default_rng(sum(map(ord, case)))
    x, n = 2, (n if serving is None else 4 * serving.slots)
    out = np.full((x, n), out_len) if out_len else rng.integers(1, 40, (x, n))
    if first_out:
        out[0] = first_out
    # requests differ in prompt, replicas run the same batch (the prefill charges the mean prompt of all)
    prompt = np.full((x, n), prompt_len) if prompt_len else np.repeat(rng.integers(20, 300, (1, n)).astype(float), x, 0)
    d, t = s.draft_length, int(out.max()) + s.draft_length + 1
    sd = s.decoding == "sd"
    acc = lengths = None
    if sd:
        acc = _flags(rng, (x, n, t), p) if p else np.zeros((x, n, t), bool)
        if s.policy == "running_product":
            lengths = np.stack([running_product_lengths(rng.beta(5, 1, (n, t)), 0.6, d) for _ in range(x)])
            lengths[1, 0, :5] = 0  # a request that drafts nothing at first: a verification-only round
    res = simulate_core(
        s, pair, Workload(prompt, out.astype(float) if float_out else out, acc, lengths), serving=serving
    )
    assert res.placement["micro_batches"] == 1.0
    assert res.tokens.shape == res.drafted.shape == (x,)
    for r in range(x):
        lens = None if lengths is None else lengths[r]
        ref = _reference(s, pair, list(prompt[r]), list(out[r]), None if acc is None else acc[r], lens, serving)
        _check(res, r, ref)
    assert (res.drafted > 0).all() if sd else (res.drafted == 0).all()
    assert (res.stage_s["prefill"] > 0).all() == (serving is not None)


# -- the dynamic scheduler ---------------------------------------------------------------------------------


def _dynamic_inputs(x=2, n=16, seed=1):
    rng = np.random.default_rng(seed)
    out = rng.integers(10, 60, (x, n))
    out[1] //= 3  # the second replica finishes early
    prompt = np.repeat(rng.integers(30, 300, (1, n)).astype(float), x, 0)
    return prompt, out, rng.random((x, n, 80)) < 0.7


def test_dynamic_placement_does_not_depend_on_the_starting_mapping(pair, hw):
    """The dynamic scheduler puts each pass's draft FC and target attention on the faster device, so the
    mapping it starts from does not matter (one micro-batch of 16 requests through the pipeline, where the
    faster device changes along the run): every start gives the same run and the same shares, both
    devices win some passes, each stage is no slower than with any static mapping, and the shares are
    the mean of each replica's own shares."""
    s = hw.system("saddle")
    prompt, out, acc = _dynamic_inputs()
    runs = {}
    for draft_fc in ("gpu", "pim"):
        for attention in ("gpu", "pim"):
            st_ = Setup(
                "dyn",
                s,
                "sd",
                4,
                {"fc": "gpu", "attention": attention},
                {"fc": draft_fc, "attention": "pim"},
                MicroBatching(1),
            )
            runs[draft_fc, attention] = (
                simulate_core(st_, pair, Workload(prompt, out, acc)),
                simulate_core(dataclasses.replace(st_, dynamic=True), pair, Workload(prompt, out, acc)),
            )
    first = runs["gpu", "gpu"][1]
    shares = {k: v for k, v in first.placement.items() if k != "micro_batches"}
    assert set(shares) == {"draft_fc_on_pim", "target_attention_on_pim"}
    assert 0 < shares["draft_fc_on_pim"] < 1 and 0 < shares["target_attention_on_pim"] < 1
    for key, (_, dyn) in runs.items():
        assert dyn.placement == pytest.approx(first.placement, abs=1e-12), key
        for k in ("time_s", "energy_j"):
            np.testing.assert_allclose(getattr(dyn, k), getattr(first, k), rtol=1e-12, err_msg=str(key))
        for group in ("stage_s", "busy_s", "class_s"):
            assert set(getattr(dyn, group)) == set(getattr(first, group))
            for k, v in getattr(first, group).items():
                np.testing.assert_allclose(getattr(dyn, group)[k], v, rtol=1e-12, err_msg=f"{key} {group} {k}")
    for stage in ("draft", "verify"):
        static = [st_.stage_s[stage] for (st_, _) in runs.values()]
        assert (first.stage_s[stage] <= np.minimum.reduce(static) * (1 + 1e-12)).all(), stage
        assert (first.stage_s[stage] < np.maximum.reduce(static)).all(), stage
    # per replica: each replica runs as it runs alone, and the shares are the mean of the replicas' own
    setup_ = dataclasses.replace(Setup("dyn", s, "sd", 4, PIM, PIM, MicroBatching(1)), dynamic=True)
    alone = [simulate_core(setup_, pair, Workload(prompt[r : r + 1], out[r : r + 1], acc[r : r + 1])) for r in range(2)]
    np.testing.assert_array_equal(first.iterations, [a.iterations[0] for a in alone])
    np.testing.assert_array_equal(first.time_s, [a.time_s[0] for a in alone])
    for k in shares:
        assert shares[k] == pytest.approx(np.mean([a.placement[k] for a in alone]), abs=1e-12), k


def test_dynamic_draft_share_with_one_request_and_with_no_drafts(pair, hw):
    """One request per replica: its draft FC is faster in the PIM stacks in every pass, so every draft
    pass goes there (share 1, the static PIM mapping's draft time). Drafts of length 0 throughout: no
    draft pass (so no draft share), verification-only rounds of one token each."""
    s = hw.system("saddle")
    prompt, out, acc = _dynamic_inputs()
    one = dict(prompt_len=prompt[:, :1], output_len=out[:, :1], accept=acc[:, :1])
    dyn = Setup("dyn", s, "sd", 4, PIM, PIM, MicroBatching(2), dynamic=True)
    on_pim = Setup("pim", s, "sd", 4, PIM, {"fc": "pim", "attention": "pim"}, MicroBatching(2))
    single = simulate_core(dyn, pair, Workload(**one))
    assert single.placement["draft_fc_on_pim"] == 1.0
    np.testing.assert_allclose(
        single.stage_s["draft"], simulate_core(on_pim, pair, Workload(**one)).stage_s["draft"], rtol=1e-12
    )
    none = simulate_core(dyn, pair, Workload(prompt, out, acc, np.zeros(acc.shape, np.int64)))
    assert "draft_fc_on_pim" not in none.placement
    assert 0 <= none.placement["target_attention_on_pim"] <= 1
    assert (none.stage_s["draft"] == 0).all() and (none.drafted == 0).all()
    groups = _groups(none, out.shape[1])
    np.testing.assert_array_equal(none.iterations, sum(out[:, a:b].max(axis=1) for a, b in groups))
    np.testing.assert_array_equal(none.request_rounds, out.sum(axis=1))  # one token a round
    np.testing.assert_allclose(none.time_s, none.stage_s["verify"], rtol=1e-12)


# -- input checks ------------------------------------------------------------------------------------------


def test_invalid_inputs_raise_sim_error_with_their_numbers(pair, hw):
    """Wrong shapes, lengths and streams raise SimError with these exact messages; streams of exactly
    max output + d + 1 positions suffice."""
    sd, ad = setup(hw, d=4), setup(hw, decoding="ad")
    p4, out = np.full((1, 4), 64.0), np.full((1, 4), 20)
    acc = np.ones((1, 4, 25), bool)

    def raises(text, s, pair, *arrays):
        with pytest.raises(SimError, match=f"^{re.escape(text)}$"):
            simulate_core(s, pair, Workload(*arrays))

    raises("prompt_len and output_len must both be (replicas, requests), got (1, 3), (1, 4)", ad, pair, p4[:, :3], out)
    raises("prompt_len and output_len must both be (replicas, requests), got (4,), (4,)", ad, pair, p4[0], out[0])
    raises("every request needs an output length >= 1", ad, pair, p4, np.array([[3, 0, 2, 1]]))
    raises("SD needs acceptance streams of shape (1, 4, T)", sd, pair, p4, out)
    raises("SD needs acceptance streams of shape (1, 4, T)", sd, pair, p4, out, acc[:, :3])
    raises("acceptance streams of 24 positions; need >= 25", sd, pair, p4, out, acc[..., :24])
    raises("acceptance streams of 10 positions; need >= 25", sd, pair, p4, out, acc[..., :10])
    # streams of exactly max output + d + 1 positions suffice: all accepted, the requests end together
    res = simulate_core(sd, pair, Workload(p4, out, acc))
    assert res.tokens[0] == 80 and res.iterations[0] == 4
    # ... and when the longest request ends on a full run while another still runs
    two = np.ones((1, 2, 9), bool)
    two[0, 1] = False
    res = simulate_core(setup(hw, d=3), pair, Workload(np.full((1, 2), 64.0), np.array([[5, 4]]), two))
    assert res.tokens[0] == 9


def test_more_slots_than_requests_and_negative_draft_lengths_are_rejected(pair, hw):
    """Continuous batching needs a request for every slot, and a draft length is >= 0 (0: no draft)."""
    p4, out = np.full((1, 4), 64.0), np.full((1, 4), 20)
    with pytest.raises(SimError, match=f"^{re.escape('5 slots but only 4 requests')}$"):
        simulate_core(setup(hw, decoding="ad"), pair, Workload(p4, out), serving=Continuous(5, 1))
