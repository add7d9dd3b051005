"""The event loop's own bookkeeping: the Eager Pool's token accounting against a request-by-request
reference, its timing by hand under unit costs, open-loop admission (requests served alone, first come
first served at pass ends, each micro-batch prefilling its own slots), pipeline placement of replicated
drafts, idle slots, and the kinds, rounds and stage times every run reports."""

import dataclasses

import numpy as np
import pytest

from adsl.fitting.generator import match_runs
from adsl.settings import Continuous, MicroBatching
from adsl.sim.core import simulate_core
from adsl.sim.loop import KINDS
from adsl.sim.tables import Layout, PassTables
from adsl.sim.workload import Workload
from tests.sim.builders import PIM, flat_costs, inputs, pim_sd, pooled, setup

PAIR = "OPT-66B"


def _eager_reference(runs, cont_runs, lengths, out, d):
    """One request alone through SADDLE-s (complete trigger, a pool that never overflows), token by
    token: every pass verifies its entry (held eager tokens, else a fresh draft of at most d), eager
    drafting covers the bonus position and d more; the eager and cut tokens are kept only if every
    verified token passed and the first eager token is the target's bonus token."""
    st = dict(eager=0, migrated=0, discarded=0, wasted=0, drafted=0, passes=0)
    pos, todo, held, continuing = 0, int(out), 0, False
    while todo > 0:
        full = min(int(lengths[pos]), 2 * d + 1)
        if held:
            offered = held
        else:
            offered = min(full, d)
            st["drafted"] += offered
        extra = max(0, min(full, offered + d + 1) - offered)
        lv = min(offered, d)
        run = int(cont_runs[pos] if continuing else runs[pos])
        acc = min(run, lv)
        left = offered + extra - lv
        bonus = acc == lv and run > lv and left > 0
        keep = bonus and left > 1
        st["eager"] += extra
        st["drafted"] += extra
        st["passes"] += 1
        if keep:
            st["migrated"] += left - 1
        else:
            st["discarded"] += extra
            st["wasted"] += offered + extra - acc - bonus
        held, continuing = (left - 1 if keep else 0), keep
        todo -= min(acc + 1, todo)
        pos += acc + 1
    return st


def _reference_sums(acc, lengths, out, d):
    """The request-by-request reference summed over each replica's requests: {key: (X,)}."""
    sums = {}
    for r in range(out.shape[0]):
        runs = match_runs(acc[r])
        cont = runs if acc.dtype == bool else match_runs(acc[r], True)
        refs = [_eager_reference(runs[i], cont[i], lengths[r, i], out[r, i], d) for i in range(out.shape[1])]
        for k in refs[0]:
            sums.setdefault(k, []).append(sum(x[k] for x in refs))
        sums.setdefault("max_passes", []).append(max(x["passes"] for x in refs))
    return {k: np.array(v) for k, v in sums.items()}


def test_eager_pool_token_accounting_follows_a_request_by_request_reference(pair, hw):
    """One micro-batch, ``complete`` trigger, static batch: every pass verifies every active request
    and every request's tokens are emitted (with and without an overflowing pool, bool and flagged
    streams, a calibration of later tokens, lengths beyond the 2 d + 1 cap and lengths of no running
    product); an overflowing pool fills up (the ranking ran); with a pool that never overflows the
    requests are independent and each one's eager / migrated / discarded / wasted tokens follow the
    request-by-request reference, also when slots are refilled from a queue."""
    d, n = 4, 6
    for seed, flagged in ((21, False), (22, True), (23, False)):
        conf, later, acc, out, lengths = inputs(seed, 2, n, flagged=flagged)
        if seed == 23:  # any per-position lengths: a held entry may be longer than the next draft
            lengths = np.random.default_rng(seed).integers(0, 13, lengths.shape)
        prompt = np.full((2, n), 64.0)
        for pool in (16, 64):
            setup_ = pooled(hw, True, "complete", mb=1, d=d, pool=pool)
            ev = simulate_core(setup_, pair, Workload(prompt, out, acc, lengths, conf, later))
            key = (seed, pool)
            np.testing.assert_array_equal(ev.tokens, out.sum(axis=1), err_msg=str(key))
            assert (ev.pool["pool_max"] <= pool).all(), key
            if pool < n * d + n:
                assert (ev.pool["pool_max"] == pool).all(), key  # the pool overflowed: the ranking ran
                continue
            ref = _reference_sums(acc, lengths, out, d)
            for k in ("eager", "migrated", "discarded", "wasted", "drafted"):
                got = ev.drafted if k == "drafted" else ev.pool[k]
                np.testing.assert_array_equal(got, ref[k], err_msg=f"{key} {k}")
            # every request is in every pass until it finishes
            np.testing.assert_array_equal(ev.iterations, ref["max_passes"], err_msg=str(key))
            np.testing.assert_array_equal(ev.request_rounds, ref["passes"], err_msg=str(key))
            assert (ev.pool["migrated"] > 0).all() and (ev.pool["discarded"] > 0).all(), key
            # refilled slots: the pool counts cover the whole run, request by request
            queued = simulate_core(
                setup_, pair, Workload(prompt, out, acc, lengths, conf, later), Continuous(3, 1, False)
            )
            np.testing.assert_array_equal(queued.window["total_tokens"], out.sum(axis=1))
            for k in ("eager", "migrated", "discarded", "wasted"):
                np.testing.assert_array_equal(queued.pool[k], ref[k], err_msg=f"{key} {k} queued")


def test_every_pass_is_counted_once_with_its_kind(pair, hw):
    """Iterations are the verification (or decode) jobs, drafted tokens the draft steps of the draft
    and eager jobs; every job and machine segment carries one of KINDS; AD drafts nothing and its decode
    passes are its verify stage; prefill jobs are the prefill stage."""
    conf, later, acc, out, lengths = inputs(31, 1, 8)
    prompt = np.full((1, 8), 64.0)
    cases = [
        ("ad", setup(hw, decoding="ad", mb=2), None),
        ("pim-sd", pim_sd(hw), None),
        ("saddle-p", pooled(hw, False, mb=2), lengths),
        ("saddle-s", pooled(hw, True, "idle", mb=3), lengths),
        ("saddle-s complete", pooled(hw, True, "complete", mb=2), lengths),
    ]
    for name, setup_, lens in cases:
        a = acc if setup_.decoding == "sd" else None
        for serving in (None, Continuous(4, 1, True)):
            res = simulate_core(setup_, pair, Workload(prompt, out, a, lens, conf, later), serving, timelines=True)
            tl = res.timelines[0]
            assert {k for k, _, _ in tl["jobs"]} <= set(KINDS), name
            assert {s[3] for s in tl["segments"]} <= set(KINDS), name
            passes = [j for j in tl["jobs"] if j[0] in ("verify", "decode")]
            if serving is None:
                assert res.iterations[0] == len(passes), name
                assert res.stage_s["prefill"][0] == 0.0
            else:
                assert res.stage_s["prefill"][0] > 0, name
                assert any(k == "prefill" for k, _, _ in tl["jobs"]), name
            assert res.stage_s["verify"][0] > 0, name
            assert all(e > b for _, b, e in tl["jobs"]), name  # no job without a pass
            if not setup_.pool_tokens:
                assert all(v[0] == 0 for v in res.pool.values()), name
            if serving is None:
                assert res.window["completed"][0] == out.shape[1], name
            if setup_.decoding == "ad":
                assert res.drafted[0] == 0 and res.stage_s["draft"][0] == 0.0, name
                assert {k for k, _, _ in tl["jobs"]} <= {"decode", "prefill"}, name
                if serving is None:
                    assert res.request_rounds[0] == out.sum(), name  # one token per request and pass
            elif serving is None and setup_.pool_tokens:
                assert res.drafted[0] >= res.request_rounds[0] - res.iterations[0], name


def _prefill_time(setup_, pair, slots, prompt):
    tables = PassTables(setup_, pair, slots, 4096.0, float(prompt))
    return sum(sum(t.at(1, 0.0)) for t in tables.prefill)


def _prefill_energy(setup_, pair, slots, prompt):
    tables = PassTables(setup_, pair, slots, 4096.0, float(prompt))
    return sum(float(t.table.lookup(np.array([1]), np.array([0.0])).energy_j[0]) for t in tables.prefill)


@pytest.mark.parametrize("kind", ["ad", "pim-sd", "pim-sd, one micro-batch", "saddle-s"])
def test_open_loop_requests_far_apart_are_each_a_static_batch_of_one(pair, hw, kind):
    """Arrivals far apart on two slots: every request enters at its arrival, has its first token after
    its prefill (the prefill tables at one request, by hand) and then runs exactly as a static batch of
    that request alone; the pool counts and the energy are the sums of those runs."""
    n, gap = 5, 1000.0
    conf, later, acc, out, lengths = inputs(41, 1, n)
    prompt = np.full((1, n), 64.0)
    setup_ = {
        "ad": setup(hw, decoding="ad", mb=2),
        "pim-sd": pim_sd(hw),
        "pim-sd, one micro-batch": pim_sd(hw, mb=1),  # a round over a busy and an empty slot
        "saddle-s": pooled(hw, True, "idle"),
    }[kind]
    a = acc if setup_.decoding == "sd" else None
    lens = lengths if setup_.pool_tokens else None
    arrivals = (np.arange(n) * gap + 5.0)[None]
    res = simulate_core(
        setup_, pair, Workload(prompt, out, a, lens, conf, later, arrivals=arrivals), Continuous(2, 0, True)
    )
    q = res.requests
    np.testing.assert_array_equal(q["admitted"], arrivals[0])
    pre = _prefill_time(setup_, pair, 2, 64.0)
    np.testing.assert_allclose(q["first_token"] - q["admitted"], pre, rtol=1e-8)
    stats = {k: 0.0 for k in ("eager", "migrated", "discarded", "wasted")}
    energy = 0.0
    for i in range(n):
        one = simulate_core(
            setup_,
            pair,
            Workload(
                prompt[:, i : i + 1],
                out[:, i : i + 1],
                None if a is None else a[:, i : i + 1],
                None if lens is None else lens[:, i : i + 1],
                conf[:, i : i + 1],
                later[:, i : i + 1],
            ),
            timelines=True,
        )
        # the request is done at its last verification (eager drafting may run on after it)
        last = max(e for k, _, e in one.timelines[0]["jobs"] if k in ("verify", "decode"))
        assert q["finished"][i] - q["first_token"][i] == pytest.approx(last, rel=1e-8), (kind, i)
        for k in stats:  # the pool counts cover the whole run
            stats[k] += one.pool[k][0]
        if i < n - 1:  # the window ends at the last arrival
            energy += one.energy_j[0] + _prefill_energy(setup_, pair, 2, 64.0)
    assert res.tokens[0] == out[0, :-1].sum()
    assert res.energy_j[0] == pytest.approx(energy, rel=1e-9)
    for k, v in stats.items():
        assert res.pool[k][0] == v, k


def _expected_admissions(arrival, finished, ends, slots):
    """First come, first served on ``slots`` slots that are refilled at pass ends: a request that
    arrives to an idle system enters at once; else at the first pass end, at or after its arrival and
    the previous admission, that leaves a slot free."""
    adm = []
    for i, a in enumerate(arrival):
        busy = lambda e, i=i: sum(1 for j in range(i) if adm[j] <= e < finished[j])  # noqa: E731
        if all(f <= a or adm[j] == a for j, f in enumerate(finished[:i])) and busy(a) < slots:
            adm.append(a)  # the system was idle when it arrived (or filled at this very instant)
            continue
        lo = max([a] + adm[-1:])
        adm.append(min(e for e in ends if e >= lo and busy(e) < slots))
    return np.array(adm)


def test_open_loop_requests_wait_for_their_arrival_and_for_a_free_slot(pair, hw):
    """Bursty arrivals on fewer slots than requests, one micro-batch: nobody enters before arriving,
    first come first served, and a request enters at the first pass end that finds a slot free (at
    once into an idle system); every request finishes and emits its tokens."""
    n, slots = 10, 2
    conf, later, acc, out, lengths = inputs(51, 1, n)
    prompt = np.full((1, n), 64.0)
    arrivals = np.array([[0.0, 0.0, 0.0, 0.3, 0.3, 2.0, 2.0, 2.1, 9.0, 9.5]])
    cases = (setup(hw, decoding="ad"), pim_sd(hw, mb=1), pooled(hw, True, "idle", mb=1), pooled(hw, True, mb=2))
    for setup_ in cases:
        a = acc if setup_.decoding == "sd" else None
        lens = lengths if setup_.pool_tokens else None
        res = simulate_core(
            setup_,
            pair,
            Workload(prompt, out, a, lens, conf, later, arrivals=arrivals),
            Continuous(slots, 0, False),
            timelines=True,
        )
        q = res.requests
        assert np.isfinite(q["finished"]).all()
        assert (q["admitted"] >= q["arrival"]).all()
        assert (np.diff(q["admitted"]) >= 0).all()
        np.testing.assert_array_equal(q["first_token"], q["admitted"])  # no prefill
        assert res.window["total_tokens"][0] == out.sum()
        ends = sorted(e for k, _, e in res.timelines[0]["jobs"] if k in ("verify", "decode"))
        expected = _expected_admissions(q["arrival"], q["finished"], ends, slots)
        np.testing.assert_allclose(q["admitted"], expected, rtol=0, atol=1e-12, err_msg=setup_.name)
        assert (q["admitted"] > q["arrival"]).any() and (q["admitted"] == q["arrival"]).sum() > 2


def test_replicated_draft_copies_run_on_every_pipeline_stage_at_once(pair, hw):
    """On a pipeline, a sharded draft pass (and every verification pass) visits the stages in order,
    while a draft with several copies runs one copy on every stage at once: the first draft job of the
    run starts on every stage at time 0."""
    n = 8
    conf, later, acc, out, lengths = inputs(61, 1, n)
    prompt = np.full((1, n), 64.0)
    pipeline = dataclasses.replace(pooled(hw, True, "idle", mb=4, system="saddle"), draft_mapping=PIM)
    two = dataclasses.replace(pipeline, system=pipeline.system.replace(pipeline_stages=2))
    for base, copies in ((pipeline, 1), (pipeline, 2), (two, 1), (two, 2)):
        stages = Layout.of(base.system).stages
        setup_ = dataclasses.replace(base, draft_copies=copies)
        res = simulate_core(setup_, pair, Workload(prompt, out, acc, lengths, conf, later), timelines=True)
        seg = res.timelines[0]["segments"]
        assert {s[3] for s in seg} <= set(KINDS)
        first = {
            k: [min((s[1] for s in seg if s[3] == k and s[0] // 2 == st), default=np.inf) for st in range(stages)]
            for k in ("draft", "verify")
        }
        if copies > 1:
            assert first["draft"] == [0.0] * stages, copies
        else:
            assert all(a < b for a, b in zip(first["draft"], first["draft"][1:], strict=False)), copies
        assert all(a < b for a, b in zip(first["verify"], first["verify"][1:], strict=False)), copies


def test_a_slot_that_idles_for_long_needs_no_longer_streams(pair, hw):
    """Acceptance streams of the documented minimum length (longest output + d + 1) suffice even when
    one request finishes early and the other runs on alone for many passes: an idle slot stays where
    it stopped."""
    d = 1
    out = np.array([[20, 60]])
    acc = np.zeros((1, 2, 60 + d + 1), bool)
    acc[0, 0] = True  # two tokens a pass: done after ten passes
    lengths = np.full(acc.shape, 2 * d + 1)
    conf = np.full(acc.shape, 0.9, np.float32)
    prompt = np.full((1, 2), 64.0)
    for setup_ in (pim_sd(hw, mb=1, d=d), pooled(hw, False, mb=1, d=d), pooled(hw, True, mb=1, d=d)):
        lens = lengths if setup_.pool_tokens else None
        res = simulate_core(setup_, pair, Workload(prompt, out, acc, lens, conf, conf))
        assert res.tokens[0] == 80 and res.iterations[0] == 60, setup_.name


def _two_requests_by_hand(models, hw, monkeypatch, draft_gpu_s, draft_pim_s):
    """Jobs of two requests with unit pass costs (a draft step ``draft_gpu_s`` + ``draft_pim_s``, a
    verification 2 s on the GPU, whatever the requests and context: ``PassTables.flat``, all the loop
    reads, replaced), d = 2, every token accepted, ``idle`` trigger, one micro-batch: request A drafts
    one token a pass (its running product allows one) and keeps nothing eager, B drafts two and keeps its
    eager tokens every pass."""
    flat_costs(monkeypatch, draft_gpu_s, draft_pim_s, 2.0, 0)
    d = 2
    out = np.array([[40, 40]])
    acc = np.ones((1, 2, 40 + 4 * d + 4), bool)
    lengths = np.empty(acc.shape, np.int64)
    lengths[0, 0], lengths[0, 1] = 1, 2 * d + 1
    conf = np.full(acc.shape, 0.9, np.float32)
    setup_ = pooled(hw, True, "idle", mb=1, d=d)
    res = simulate_core(
        setup_, models.pair(PAIR), Workload(np.full((1, 2), 64.0), out, acc, lengths, conf, conf), timelines=True
    )
    return res.timelines[0]["jobs"]


def test_eager_pool_timing_by_hand_with_unit_costs(models, hw, monkeypatch):
    """Draft steps 1 s on PIM. By hand: both requests draft 0-2 and are verified 2-4 while B drafts
    eagerly 2-5; A's next draft waits for the PIM, 5-6, so the verifier takes B alone at 5 (B's entry was
    ready when its eager drafting ended) for 5-7, then A alone 7-9."""
    jobs = _two_requests_by_hand(models, hw, monkeypatch, 0.0, 1.0)
    verify = [(b, e) for k, b, e in jobs if k == "verify"]
    assert verify[:3] == [(2.0, 4.0), (5.0, 7.0), (7.0, 9.0)]
    assert [(k, b, e) for k, b, e in jobs if k in ("draft", "eager")][:3] == [
        ("draft", 0.0, 2.0),
        ("eager", 2.0, 5.0),
        ("draft", 5.0, 6.0),
    ]


def test_a_request_without_eager_tokens_drafts_again_when_its_pass_ends(models, hw, monkeypatch):
    """Draft steps split over the machines (0.5 s GPU + 0.5 s PIM each, in alternating chunks). A keeps
    nothing eager, so its next draft is released when its pass ends (4 s) and fills the gaps B's eager
    chain (4-7 s) leaves on the two machines, starting at 4.375 s; released at the end of B's chain
    instead, it would start at 7 s."""
    jobs = _two_requests_by_hand(models, hw, monkeypatch, 0.5, 0.5)
    assert jobs[:4] == [("draft", 0.0, 2.0), ("verify", 2.0, 4.0), ("eager", 4.0, 7.0), ("draft", 4.375, 7.125)]


def test_each_micro_batch_admits_and_prefills_its_own_slots(pair, hw):
    """Three requests arriving together at an idle system of two micro-batches of two slots: the first
    micro-batch takes two of them into its own slots and prefills them in one pass (two requests, by
    hand from the prefill tables), the second micro-batch takes the third with its own prefill pass."""
    conf, later, acc, _, _ = inputs(71, 1, 3)
    out = np.array([[30, 30, 30]])
    prompt = np.full((1, 3), 64.0)
    arrivals = np.full((1, 3), 0.5)
    ad = dataclasses.replace(setup(hw, decoding="ad"), micro_batching=MicroBatching(2, split="always"))
    for setup_ in (ad, pim_sd(hw, mb=2)):  # the system's micro-batches, not the faster of 1 and 2
        a = acc if setup_.decoding == "sd" else None
        res = simulate_core(
            setup_,
            pair,
            Workload(prompt, out, a, None, conf, later, arrivals=arrivals),
            Continuous(4, 0, True),
            timelines=True,
        )
        q = res.requests
        np.testing.assert_array_equal(q["admitted"], arrivals[0])
        tables = PassTables(setup_, pair, 4, 4096.0, 64.0).prefill
        prefills = [j for j in res.timelines[0]["jobs"] if j[0] == "prefill"]
        assert len(prefills) == 2 * len(tables), setup_.name
        two = sum(sum(t.at(2, 0.0)) for t in tables)
        np.testing.assert_allclose(q["first_token"][:2], 0.5 + two, rtol=1e-12)
        assert q["first_token"][2] > q["first_token"][0]  # its own pass, after the first on the machines
