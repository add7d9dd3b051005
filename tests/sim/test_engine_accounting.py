"""The vectorized engine's full result against an independent scalar accounting: every stage, device and
operator-class time, drafted tokens and the measured window, with cost tables built here from the setup's
own fields (not through the engine's helpers); the dynamic scheduler's placement; memory and input checks."""

import dataclasses
import re
from decimal import ROUND_HALF_EVEN, Decimal

import numpy as np
import pytest

from adsl.fitting.generator import CONTINUED, FIRST, as_flags, running_product_lengths
from adsl.sim.batching import Continuous
from adsl.sim.engine import Setup, SimError, check_memory, memory_need, needed_qs, simulate
from adsl.sim.timing import CostTable, Schedule, batch_pass

PIM = {"fc": "gpu", "attention": "pim"}
GPU = {"fc": "gpu", "attention": "gpu"}


def _add(acc: dict, key, value: float) -> None:
    acc[key] = acc.get(key, 0.0) + float(value)


class _Costs:
    """Scalar pass costs from tables built here: one per (model, q), contexts to a generous bound."""

    def __init__(self, setup: Setup, pair, slots: int, ctx_max: float):
        self.setup, self.pair, self.slots, self.ctx_max = setup, pair, slots, ctx_max
        self.target = {}

    def _target(self, q: int) -> CostTable:
        s = self.setup
        if q not in self.target:
            self.target[q] = CostTable.build(
                self.pair.target, s.system, q, s.target_mapping, s.schedule, self.slots, self.ctx_max
            )
        return self.target[q]

    def decode(self, n, ctx):
        return self._target(1).lookup(n, ctx)

    def draft(self, n, ctx):
        s = self.setup
        if not hasattr(self, "_draft"):
            sch = s.schedule if s.draft_split is None else dataclasses.replace(s.schedule, split=s.draft_split)
            self._draft = CostTable.build(
                self.pair.draft, s.system, 1, s.draft_mapping, sch, self.slots, self.ctx_max, s.draft_copies
            )
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
        c = batch_pass(self.pair.target, s.system, n, q, 0.0, GPU, Schedule())  # on the GPUs, whatever the mapping
        if s.decoding == "sd":
            c = c.add(batch_pass(self.pair.draft, s.system, n, q, 0.0, GPU, Schedule(), s.draft_copies))
        return c


def _reference(setup: Setup, pair, prompt, out, accept=None, lengths=None, serving=None) -> dict:
    """One replica, request by request: per iteration the passes' time, energy, device busy and class
    times by stage; then the sums over the measured iterations (all of them for a static batch)."""
    n_req, d = len(out), setup.draft_length
    slots = n_req if serving is None else serving.slots
    costs = _Costs(setup, pair, slots, max(prompt) + max(out) + 2 * d + 64)
    flags = as_flags(np.asarray(accept)) if accept is not None else None
    holder, queue = list(range(slots)), list(range(slots, n_req))
    gen, ctx, pos = [0] * n_req, [float(p) for p in prompt], [0] * n_req
    iterations = []
    while any(h is not None for h in holder):
        act = [h for h in holder if h is not None]
        n = len(act)
        it = {"passes": [], "emitted": 0, "busy": n, "done": 0, "admitted": 0, "drafted": 0}
        mean = sum(ctx[i] for i in act) / n
        if setup.decoding == "sd":
            length = {i: d if lengths is None else min(int(lengths[i][pos[i]]), d) for i in act}
            it["drafted"] = sum(length.values())
            for j in range(d):
                drafting = [i for i in act if length[i] > j]
                if drafting:
                    c = sum(ctx[i] for i in drafting) / len(drafting) + j
                    it["passes"].append(("draft", costs.draft(len(drafting), c)))
            it["passes"].append(("verify", costs.verify(n, mean, sum(length[i] + 1 for i in act) / n)))
            for i in act:
                a = 0
                while a < length[i] and flags[i][pos[i] + a] & (FIRST if a == 0 else CONTINUED):
                    a += 1
                e = min(a + 1, out[i] - gen[i])
                pos[i], gen[i], ctx[i] = pos[i] + a + 1, gen[i] + e, ctx[i] + e
                it["emitted"] += e
        else:
            it["passes"].append(("decode", costs.decode(n, mean)))
            for i in act:
                gen[i], ctx[i] = gen[i] + 1, ctx[i] + 1
                it["emitted"] += 1
        for s, i in enumerate(holder):
            if i is not None and gen[i] >= out[i]:
                it["done"] += 1
                holder[s] = queue.pop(0) if queue else None
                it["admitted"] += holder[s] is not None
        if serving is not None and serving.prefill and it["admitted"]:
            it["passes"].append(("prefill", costs.prefill(it["admitted"], float(np.mean(prompt)))))
        iterations.append(it)
    res = {"time_s": 0.0, "energy_j": 0.0, "tokens": 0, "iterations": 0, "drafted": 0, "completed": 0}
    res.update(stage_s={}, busy_s={}, class_s={}, start_s=0.0, total_s=0.0, request_rounds=0)
    done_before, opened = 0, False
    for it in iterations:
        t = sum(float(c.time_s) for _, c in it["passes"])
        res["total_s"] += t
        if serving is None or (done_before >= serving.warmup and it["busy"] == slots):
            opened = True
            res["time_s"] += t
            res["energy_j"] += sum(float(c.energy_j) for _, c in it["passes"])
            res["tokens"] += it["emitted"]
            res["iterations"] += 1
            res["drafted"] += it["drafted"]
            res["completed"] += it["done"]
            res["request_rounds"] += it["busy"]
            for stage, c in it["passes"]:
                _add(res["stage_s"], stage, c.time_s)
                for k, v in c.busy_s.items():
                    _add(res["busy_s"], k, v)
                for k, v in c.by_class_s.items():
                    _add(res["class_s"], k, v)
        elif not opened:
            res["start_s"] += t
        done_before += it["done"]
    if setup.static_power:
        res["energy_j"] += setup.system.static_power_w * res["time_s"]
    return res


def _check(vec: dict, r: int, ref: dict) -> None:
    """Replica r of the engine's result equals the reference, key for key."""
    assert vec["tokens"][r] == ref["tokens"]
    assert vec["iterations"][r] == ref["iterations"]
    assert vec["drafted"][r] == ref["drafted"]
    for key in ("time_s", "energy_j"):
        assert vec[key][r] == pytest.approx(ref[key], rel=1e-9), key
    for group in ("stage_s", "busy_s", "class_s"):
        assert set(vec[group]) == set(ref[group]), group
        got = {k: np.broadcast_to(v, vec["time_s"].shape)[r] for k, v in vec[group].items()}
        assert got == pytest.approx(ref[group], rel=1e-9, abs=1e-15), group
    win = vec["window"]
    assert win["completed"][r] == ref["completed"]
    assert win["request_rounds"][r] == ref["request_rounds"]
    assert win["total_s"][r] == pytest.approx(ref["total_s"], rel=1e-9)
    assert win["start_s"][r] == pytest.approx(ref["start_s"], rel=1e-9, abs=1e-15)
    assert win["end_s"][r] == pytest.approx(ref["start_s"] + ref["time_s"], rel=1e-9)


def _setup(hw, system="saddle-tp", decoding="sd", d=4, mapping=None, **kw):
    s = hw.system(system)
    m = mapping or (PIM if s.pim else GPU)
    return Setup("acct", s, decoding, d if decoding == "sd" else 0, m, kw.pop("draft_mapping", m), **kw)


def _flags(rng, shape, p):
    """Two-outcome streams: first-token and continuation acceptance drawn apart (uint8 bit flags)."""
    return (rng.random(shape) < p).astype(np.uint8) * FIRST | (rng.random(shape) < p).astype(np.uint8) * CONTINUED


CASES = {
    # AD with attention kept on the GPUs of a PIM system (not the default mapping); float output lengths
    "ad-static-gpu-attention-on-pim": dict(system="attacc-pim", decoding="ad", mapping=GPU, float_out=True),
    # fixed-length SD, flagged streams, the draft replicated on every device (copies > 1)
    "sd-static-replicated-draft": dict(draft_copies=8, draft_placement="replicated", schedule=Schedule(2)),
    # adaptive lengths (some zero) on a pipelined system, draft micro-batches split apart
    "sd-adaptive-pipeline": dict(system="saddle", policy="running_product", schedule=Schedule(4), draft_split="always"),
    # adaptive lengths over prompts shorter than a table cell, one replica done after its first round:
    # the other replica's rounds must not read a verification of zero tokens per request
    "sd-adaptive-short-prompts": dict(policy="running_product", prompt=4.0, first_replica_out=1),
    # continuous batching with prefill: replicated draft prefilled too, varied prompts, a warm-up
    "sd-continuous-prefill": dict(draft_copies=8, draft_placement="replicated", serving=Continuous(3, 2, True)),
    "sd-adaptive-continuous-prefill": dict(policy="running_product", serving=Continuous(3, 3, True)),
    "ad-continuous-prefill": dict(system="dgx-a100", decoding="ad", serving=Continuous(3, 2, True)),
    # one-token prompts are prefilled as one token each
    "sd-one-token-prompts-continuous": dict(d=2, serving=Continuous(2, 1, True), prompt=1.0),
    # long drafts (d = 24) of two requests that accept nothing reach contexts d past prompt + output, across
    # a kink of the pass cost (micro-batched or not, whichever is faster): the tables must cover them
    "sd-long-drafts-past-a-cost-kink": dict(
        system="saddle", mapping=GPU, schedule=Schedule(4), d=24, static_power=True, n=2, out=20, prompt=2860.0, p=0.0
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_engine_accounting_equals_scalar_reference(models, hw, case):
    """Stage, device-busy and class times, drafted tokens and the measured window of every replica equal
    a request-by-request recomputation (static batches and continuous batching with prefill, bool and
    flagged streams, fixed and adaptive draft lengths)."""
    kw = dict(CASES[case])
    serving, prompt_len, p = kw.pop("serving", None), kw.pop("prompt", None), kw.pop("p", 0.8)
    out_len, n, float_out, first_out = (
        kw.pop("out", None),
        kw.pop("n", 4),
        kw.pop("float_out", False),
        kw.pop("first_replica_out", None),
    )
    setup = _setup(hw, **kw)
    pair = models.pair("OPT-66B")
    rng = np.random.default_rng(sum(map(ord, case)))
    x, n = 2, (n if serving is None else 4 * serving.slots)
    out = np.full((x, n), out_len) if out_len else rng.integers(1, 40, (x, n))
    if first_out:
        out[0] = first_out
    # requests differ in prompt, replicas run the same batch (the prefill charges the mean prompt of all)
    prompt = np.full((x, n), prompt_len) if prompt_len else np.repeat(rng.integers(20, 300, (1, n)).astype(float), x, 0)
    d, t = setup.draft_length, int(out.max()) + setup.draft_length + 1
    sd = setup.decoding == "sd"
    acc = lengths = None
    if sd:
        acc = _flags(rng, (x, n, t), p) if p else np.zeros((x, n, t), bool)
        if setup.policy == "running_product":
            lengths = np.stack([running_product_lengths(rng.beta(5, 1, (n, t)), 0.6, d) for _ in range(x)])
            lengths[1, 0, :5] = 0  # a request that drafts nothing at first: a verification-only round
    vec = simulate(setup, pair, prompt, out.astype(float) if float_out else out, acc, lengths, serving)
    assert vec["tokens"].dtype.kind == "i" and vec["drafted"].shape == (x,)
    assert set(vec["stage_s"]) == ({"draft", "verify"} if sd else {"decode"}) | ({"prefill"} if serving else set())
    for r in range(x):
        lens = None if lengths is None else lengths[r]
        ref = _reference(setup, pair, list(prompt[r]), list(out[r]), None if acc is None else acc[r], lens, serving)
        _check(vec, r, ref)
    assert vec["drafted"].sum() > 0 if sd else (vec["drafted"] == 0).all()


def test_one_decode_step_is_one_pass_of_the_cost_model(models, hw):
    """Hand-computed: one request of one output token over a 64-token prompt (on the tables' context grid)
    costs exactly one target pass of the cost model with the setup's mapping."""
    pair = models.pair("OPT-66B")
    setup = _setup(hw, "attacc-pim", "ad", schedule=Schedule(2, overlap=True))
    res = simulate(setup, pair, np.full((1, 1), 64.0), np.ones((1, 1), np.int64))
    c = batch_pass(pair.target, setup.system, 1, 1, 64.0, PIM, setup.schedule)
    assert res["time_s"][0] == pytest.approx(float(c.time_s), rel=1e-12)
    assert res["energy_j"][0] == pytest.approx(float(c.energy_j), rel=1e-12)
    assert res["stage_s"]["decode"][0] == res["time_s"][0] and res["window"]["total_s"][0] == res["time_s"][0]
    for k, v in c.busy_s.items():
        assert res["busy_s"][k][0] == pytest.approx(float(v), rel=1e-12)


def _dynamic_inputs(x=2, n=16, seed=1):
    rng = np.random.default_rng(seed)
    out = rng.integers(10, 60, (x, n))
    out[1] //= 3  # the second replica finishes early: its later rounds have no request in flight
    prompt = np.repeat(rng.integers(30, 300, (1, n)).astype(float), x, 0)
    return prompt, out, rng.random((x, n, 80)) < 0.7


def test_dynamic_placement_does_not_depend_on_the_starting_mapping(models, hw):
    """The dynamic scheduler puts each pass's draft FC and target attention on the faster device, so the
    mapping it starts from does not matter: every start gives the same run and the same shares, both
    devices win some passes, each stage is no slower than either static mapping, and the shares are the
    per-replica shares weighted by each replica's passes (rounds with no request in flight are no passes)."""
    pair = models.pair("OPT-66B")
    s = hw.system("saddle")
    prompt, out, acc = _dynamic_inputs()
    runs = {}
    for draft_fc in ("gpu", "pim"):
        for attention in ("gpu", "pim"):
            setup = Setup(
                "dyn",
                s,
                "sd",
                4,
                {"fc": "gpu", "attention": attention},
                {"fc": draft_fc, "attention": "pim"},
                Schedule(2),
            )
            runs[draft_fc, attention] = (
                simulate(setup, pair, prompt, out, acc),
                simulate(dataclasses.replace(setup, dynamic=True), pair, prompt, out, acc),
            )
    first = runs["gpu", "gpu"][1]
    shares = first["placement"]
    assert set(shares) == {"draft_fc_on_pim", "target_attention_on_pim"}
    assert 0 < shares["draft_fc_on_pim"] < 1 and 0 < shares["target_attention_on_pim"] < 1
    for key, (_, dyn) in runs.items():
        assert dyn["placement"] == pytest.approx(shares, abs=1e-12), key
        for k in ("time_s", "energy_j"):
            np.testing.assert_allclose(dyn[k], first[k], rtol=1e-12, err_msg=str(key))
        for group in ("stage_s", "busy_s", "class_s"):
            assert set(dyn[group]) == set(first[group])
            for k, v in first[group].items():
                np.testing.assert_allclose(dyn[group][k], v, rtol=1e-12, err_msg=f"{key} {group} {k}")
    for stage in ("draft", "verify"):
        static = np.minimum.reduce([st["stage_s"][stage] for (st, _) in runs.values()])
        assert (first["stage_s"][stage] <= static * (1 + 1e-12)).all(), stage
        assert (first["stage_s"][stage] < np.maximum.reduce([st["stage_s"][stage] for (st, _) in runs.values()])).all()
    # per replica: every round of a fixed-length run has d draft passes and one verification of requests
    setup = dataclasses.replace(Setup("dyn", s, "sd", 4, PIM, PIM, Schedule(2)), dynamic=True)
    alone = [simulate(setup, pair, prompt[r : r + 1], out[r : r + 1], acc[r : r + 1]) for r in range(2)]
    rounds = np.array([a["iterations"][0] for a in alone], dtype=float)
    np.testing.assert_array_equal(first["iterations"], rounds)
    for k in shares:
        weighted = sum(a["placement"][k] * w for a, w in zip(alone, rounds, strict=True)) / rounds.sum()
        assert shares[k] == pytest.approx(weighted, abs=1e-12), k


def test_dynamic_draft_share_with_one_request_and_with_no_drafts(models, hw):
    """One request per replica: its draft FC is faster in the PIM stacks in every pass, so every draft
    pass goes there (share 1, the static PIM mapping's draft time). Drafts of length 0 throughout: no
    draft pass, a draft share of 0 and verification-only rounds."""
    pair = models.pair("OPT-66B")
    s = hw.system("saddle")
    prompt, out, acc = _dynamic_inputs()
    one = dict(prompt_len=prompt[:, :1], output_len=out[:, :1], accept=acc[:, :1])
    dyn = Setup("dyn", s, "sd", 4, PIM, PIM, Schedule(2), dynamic=True)
    on_pim = Setup("pim", s, "sd", 4, PIM, {"fc": "pim", "attention": "pim"}, Schedule(2))
    single = simulate(dyn, pair, **one)
    assert single["placement"]["draft_fc_on_pim"] == 1.0
    np.testing.assert_allclose(
        single["stage_s"]["draft"], simulate(on_pim, pair, **one)["stage_s"]["draft"], rtol=1e-12
    )
    none = simulate(dyn, pair, prompt, out, acc, np.zeros(acc.shape, np.int64))
    assert none["placement"]["draft_fc_on_pim"] == 0.0
    assert 0 <= none["placement"]["target_attention_on_pim"] <= 1
    assert (none["stage_s"]["draft"] == 0).all() and (none["drafted"] == 0).all()
    np.testing.assert_array_equal(none["iterations"], out.max(axis=1))  # one token a round
    np.testing.assert_allclose(none["time_s"], none["stage_s"]["verify"], rtol=1e-12)


def test_memory_need_is_weights_and_full_kv_caches(models, hw):
    """By hand: the target's weights and KV caches, plus for SD a weight copy per draft copy and the
    draft's caches; a batch that needs exactly the memory fits, one more request does not; the error
    gives need and capacity in GB rounded to the nearest (checked at half-GB boundaries)."""
    pair = models.pair("OPT-66B")
    tgt, dft = pair.target, pair.draft
    s = hw.system("dgx-a100")
    ad = Setup("ad", s, "ad", 0, GPU, GPU)
    sd = Setup("sd", s, "sd", 4, GPU, GPU, draft_copies=8, draft_placement="replicated")
    assert memory_need(ad, pair, 16, 2048) == (
        tgt.weight_bytes + 16 * 2048 * tgt.kv_bytes_per_token,
        s.memory_capacity_bytes,
    )
    kv = 16 * 2048 * (tgt.kv_bytes_per_token + dft.kv_bytes_per_token)
    assert memory_need(sd, pair, 16, 2048) == (tgt.weight_bytes + 8 * dft.weight_bytes + kv, s.memory_capacity_bytes)
    # a system with exactly the memory 100 requests of 1000 tokens need
    need = memory_need(ad, pair, 100, 1000)[0]
    exact = dataclasses.replace(ad, system=s.replace(gpu=dataclasses.replace(s.gpu, mem_capacity_bytes=need / s.gpus)))
    assert memory_need(exact, pair, 100, 1000) == (need, need)
    check_memory(exact, pair, 100, 1000)
    with pytest.raises(SimError):
        check_memory(exact, pair, 101, 1000)

    def gb(v: float) -> str:
        return str(Decimal(int(v)).scaleb(-9).quantize(Decimal(1), ROUND_HALF_EVEN))

    # a capacity of 1001.5 GB, and a batch whose need lies a few bytes above a half GB
    half = s.replace(gpu=dataclasses.replace(s.gpu, mem_capacity_bytes=1001.5e9 / s.gpus))
    small = dataclasses.replace(ad, system=half)
    m = np.arange(1, 2_000_000, dtype=np.int64)
    need_m = tgt.weight_bytes + m * tgt.kv_bytes_per_token
    above = need_m % 10**9 - 5 * 10**8
    batch = int(m[(above > 0) & (above < 10**3) & (need_m > 1001.5e9)][0])
    need, have = memory_need(small, pair, batch, 1)
    assert gb(need) == str(int(need) // 10**9 + 1) and gb(have) == "1002"  # both round up
    words = f"ad on dgx-a100: batch {batch} x 1 tokens needs {gb(need)} GB for weights + KV, the system has 1002 GB"
    with pytest.raises(SimError, match=f"^{re.escape(words)}$"):
        check_memory(small, pair, batch, 1)


def test_needed_qs_are_the_integer_neighbours(models, hw):
    """Each floor, and its ceiling when q is fractional, as ints."""
    qs = needed_qs(np.array([[5.0, 2.5], [1.0, 7.25]]))
    assert qs == [1, 2, 3, 5, 7, 8] and all(type(q) is int for q in qs)
    assert needed_qs([4, 4.0]) == [4]


def test_invalid_inputs_raise_sim_error_with_their_numbers(models, hw):
    """Wrong shapes, lengths, slots, streams and settings raise SimError with these exact messages."""
    from adsl.sim.policies import POLICIES

    pair = models.pair("OPT-66B")
    sd, ad = _setup(hw, d=4), _setup(hw, decoding="ad")
    p4, out = np.full((1, 4), 64.0), np.full((1, 4), 20)
    acc = np.ones((1, 4, 25), bool)

    def raises(text, *args, **kw):
        with pytest.raises(SimError, match=f"^{re.escape(text)}$"):
            simulate(*args, **kw)

    raises("prompt_len and output_len must both be (replicas, requests), got (1, 3), (1, 4)", ad, pair, p4[:, :3], out)
    raises("prompt_len and output_len must both be (replicas, requests), got (4,), (4,)", ad, pair, p4[0], out[0])
    raises("every request needs an output length >= 1", ad, pair, p4, np.array([[3, 0, 2, 1]]))
    raises("5 slots but only 4 requests", ad, pair, p4, out, serving=Continuous(5, 1))
    raises("SD needs acceptance streams of shape (1, 4, T)", sd, pair, p4, out)
    raises("SD needs acceptance streams of shape (1, 4, T)", sd, pair, p4, out, acc[:, :3])
    raises("acceptance streams of 24 positions; need >= 25", sd, pair, p4, out, acc[..., :24])
    bad = "draft_lengths must match the streams' shape and be >= 0 (0: no draft)"
    raises(bad, sd, pair, p4, out, acc, np.full((1, 4, 24), 2))
    raises(bad, sd, pair, p4, out, acc, np.full((1, 4, 25), -1))
    # streams of exactly max output + d + 1 positions suffice: all accepted, the requests end together
    res = simulate(sd, pair, p4, out, acc)
    assert res["tokens"][0] == 80 and res["iterations"][0] == 4
    # ... and when the longest request ends on a full run while another still runs (its idle slot then
    # stands at out + d; with out + d positions this read past the streams)
    st = _setup(hw, d=3)
    two = np.ones((1, 2, 9), bool)
    two[0, 1] = False
    res = simulate(st, pair, np.full((1, 2), 64.0), np.array([[5, 4]]), two)
    assert res["tokens"][0] == 9
    with pytest.raises(SimError, match=re.escape(f"acct: unknown draft policy 'bogus'; known: {sorted(POLICIES)}")):
        _setup(hw, policy="bogus")
    with pytest.raises(SimError, match=re.escape("acct: decoding must be 'ad' or 'sd', got 'xd'")):
        _setup(hw, decoding="xd")
