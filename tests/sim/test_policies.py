"""The draft-length policy zoo: the oracle bounds every policy, fixed and running_product reproduce the
systems they come from, goodput never loses to not drafting, learned thresholds come from training
streams."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adsl.fitting.distributions import fit_confidence
from adsl.fitting.entropy import fit_entropy
from adsl.fitting.generator import draw_streams, later_confidence, replay_lengths
from adsl.sim.experiment import Point, experiment_points, run_point
from adsl.sim.policies import (
    POLICIES,
    PolicyCosts,
    PolicyInputs,
    best_lengths,
    fit_threshold,
    leading_run,
    predicted,
    product_lengths,
    schedule_length,
)

RNG = np.random.default_rng(0)
CONFIDENCE = fit_confidence(np.concatenate([RNG.beta(8, 1, 2000), RNG.beta(2, 2, 600)]))
ENTROPY = fit_entropy(np.linspace(0.01, 0.99, 2000), 3.0 * (1 - np.linspace(0.01, 0.99, 2000)) ** 1.5)


def model(a=-0.3, b=0.9):
    return {
        "confidence": CONFIDENCE,
        "joint": {"a": a, "b": b, "s": 0.6, "g": 0.5},
        "entropy": ENTROPY,
        "match_rate": 0.6,
    }


def inputs_for(conf, acc, cap, thresholds=None):
    later = later_confidence(conf, 0.0)
    cats = np.array(["c"] * conf.shape[0])
    models = {"c": model()}
    from adsl.fitting.entropy import draw_entropy

    return PolicyInputs(
        confidence=conf[None],
        later=later[None],
        categories=cats,
        batch=16,
        d=cap,
        entropy=draw_entropy(ENTROPY, conf, np.random.default_rng(1))[None],
        accept=acc[None],
        accept_prob=predicted(models, cats, conf[None], later[None]),
        costs=PolicyCosts(1e-3, 2e-4),
        taus={"c": 0.3},
        thresholds=thresholds or {"c": 0.5},
        schedule={4: 4, 8: 2, 32: 1},
        prior={"c": 0.6},
    )


@settings(max_examples=15, deadline=None)
@given(st.floats(-2.0, 1.5), st.floats(0.5, 1.5), st.integers(1, 12), st.integers(0, 2**16))
def test_no_policy_emits_more_per_verification_than_the_oracle(a, b, cap, seed):
    """The oracle's reach from a position (accepted run + 1, capped) never falls as the position moves on,
    so drafting the whole run is the fewest verifications for the text: no policy emits a stream's first
    tokens in fewer verifications (more tokens per verification) on the same streams."""
    conf, acc = draw_streams(model(a, b), 40, 160, np.random.default_rng(seed))
    inputs = inputs_for(conf, acc, cap)
    goal = 160 - 2 * cap - 2  # tokens every stream emits before any draft window reaches its end
    steps = {}
    for name, policy in POLICIES.items():
        lengths = policy(inputs, cap)[0]
        assert lengths.min() >= 0 and lengths.max() <= cap, name
        r = replay_lengths(acc, lengths)
        emitted = np.cumsum(np.where(r["valid"], r["accepted"] + 1, 0), axis=0)  # (steps, streams)
        steps[name] = int((emitted < goal).sum())  # verifications before each stream has emitted ``goal``
    for name, n in steps.items():
        assert n >= steps["oracle"], (name, n, steps["oracle"])


@settings(max_examples=50, deadline=None)
@given(st.floats(0.0, 0.999), st.floats(1e-5, 1e-2), st.floats(0.0, 1e-2), st.integers(0, 16))
def test_goodput_never_chooses_worse_than_not_drafting(alpha, fixed, per_token, cap):
    costs = PolicyCosts(fixed, per_token)
    k = int(best_lengths(np.array([alpha]), costs, cap)[0])
    rate = lambda n: (1 - alpha ** (n + 1)) / (1 - alpha) / costs.step_time(n)  # noqa: E731
    assert 0 <= k <= cap
    assert rate(k) >= rate(0) - 1e-12
    assert all(rate(k) >= rate(j) - 1e-12 for j in range(cap + 1))


def test_product_lengths_match_the_running_product_rule():
    from adsl.fitting.generator import running_product_lengths

    conf = np.random.default_rng(3).beta(5, 1, (30, 120)).astype(np.float32)
    logc = np.log(conf)
    for tau in (0.0, 0.2, 0.6, 0.95):
        got = product_lengths(logc, logc, np.log(tau) if tau > 0 else -np.inf, 8)
        assert (got == running_product_lengths(conf, tau, 8)).all()


def test_product_lengths_read_first_and_later_values_as_a_loop_does(monkeypatch):
    """(X, N, T) inputs whose first and later values differ: from each start, the first k whose sum of the
    first value and k - 1 later ones falls below log tau (that token drafted), else the cap or the rest of
    the stream; the compiled kernel and its plain-Python self agree."""
    from adsl.sim import policies

    rng = np.random.default_rng(4)
    first, later = np.log(rng.beta(6, 1, (2, 3, 25))), np.log(rng.beta(3, 1, (2, 3, 25)))
    log_tau, cap = np.log(0.45), 6

    def loop(f, g):
        out = []
        for s in range(len(f)):
            ks = [k for k in range(1, min(cap, len(f) - s) + 1) if f[s] + g[s + 1 : s + k].sum() < log_tau]
            out.append(ks[0] if ks else min(cap, len(f) - s))
        return out

    got = product_lengths(first, later, log_tau, cap)
    assert got.shape == first.shape and got.dtype == np.int64
    rows = zip(first.reshape(6, 25), later.reshape(6, 25), strict=True)
    assert [loop(f, g) for f, g in rows] == got.reshape(6, 25).tolist()
    ok = rng.random((2, 3, 25)) < 0.7
    runs = leading_run(ok, 4)
    monkeypatch.setattr(policies, "_product_lengths", policies._product_lengths.py_func)
    monkeypatch.setattr(policies, "_leading_run", policies._leading_run.py_func)
    assert np.array_equal(product_lengths(first, later, log_tau, cap), got)
    assert np.array_equal(leading_run(ok, 4), runs)


def test_leading_runs_and_schedule():
    ok = np.array([[True, True, False, True, True, True, False]])
    assert leading_run(ok, 2).tolist() == [[2, 1, 0, 2, 2, 1, 0]]
    assert [schedule_length({4: 4, 8: 2, 32: 1}, b) for b in (1, 4, 5, 8, 9, 32, 33, 128)] == [4, 4, 2, 2, 1, 1, 0, 0]
    assert [schedule_length({"4": 4, "32": 1}, b) for b in (2, 16)] == [4, 1]


def test_learned_thresholds_maximise_the_training_objective():
    conf, acc = draw_streams(model(), 60, 160, np.random.default_rng(5))
    inputs = inputs_for(conf, acc, 8, thresholds={})
    grid = np.linspace(0.05, 0.95, 10)
    best = fit_threshold("rejection_risk", inputs, acc, grid, 8)
    from adsl.sim.policies import emitted_per_cost, rejection_risk

    rates = [
        emitted_per_cost(rejection_risk(inputs_for(conf, acc, 8, {"c": t}), 8)[0], acc, inputs.costs) for t in grid
    ]
    assert best == pytest.approx(grid[int(np.argmax(rates))])


@pytest.fixture(scope="module")
def point_models():
    return dict.fromkeys(("summarization", "open_qa", "creative_writing"), model())


def test_fixed_policy_reproduces_the_sd_baseline(ws, point_models):
    sim = ws.settings.simulation.with_overrides({"replicas": 2})
    base = run_point(ws, sim, Point("OPT-66B", "GPU-SD", 16, 8, 256, "warn"), point_models)
    fixed = run_point(ws, sim, Point("OPT-66B", "GPU-SD", 16, 8, 256, "warn", "fixed"), point_models)
    assert fixed["throughput_tok_s"] == pytest.approx(base["throughput_tok_s"], rel=1e-12)


def test_running_product_on_pim_sd_reproduces_saddle_d(ws, point_models):
    """PIM-SD and SADDLE-d share the silicon and the SpecPIM-style schedule; the running-product policy on
    PIM-SD is SADDLE-d."""
    sim = ws.settings.simulation.with_overrides({"replicas": 2})
    taus = dict.fromkeys(point_models, 0.4)
    saddle_d = run_point(ws, sim, Point("OPT-66B", "SADDLE-d", 16, 8, 256, "warn"), point_models, taus)
    policy = run_point(ws, sim, Point("OPT-66B", "PIM-SD", 16, 8, 256, "warn", "running_product"), point_models, taus)
    assert policy["throughput_tok_s"] == pytest.approx(saddle_d["throughput_tok_s"], rel=1e-12)
    assert policy["mean_draft_length"] < 8


def test_every_policy_runs_on_both_system_styles_and_the_oracle_leads(ws, point_models):
    sim = ws.settings.simulation.with_overrides({"replicas": 1, "batching": {"requests_per_slot": 3}})
    taus = dict.fromkeys(point_models, 0.4)
    for system in ("GPU-SD", "SADDLE"):
        rows = {
            p: run_point(ws, sim, Point("OPT-66B", system, 8, 8, 256, "warn", p), point_models, taus) for p in POLICIES
        }
        assert all(r["policy"] == p for p, r in rows.items())
        assert rows["oracle"]["throughput_tok_s"] >= max(r["throughput_tok_s"] for r in rows.values()) * 0.97


def test_the_zoo_sweep_enumerates_policies_on_speculative_systems_only(ws):
    sim = ws.settings.simulation
    exp = sim.experiments["policies"]
    pts = experiment_points(sim, exp)
    assert len(pts) == len(exp.pairs) * len(exp.systems) * len(exp.batches) * len(exp.policies)
    sched = [p for p in pts if p.policy == "batch_schedule"]
    assert {(p.batch, p.draft_length) for p in sched} >= {(1, 4), (16, 1), (128, 1)}
    main = experiment_points(sim, sim.experiments["main"])
    assert all(p.policy is None for p in main)


def test_every_policy_cites_its_source():
    import re

    for name, fn in POLICIES.items():
        doc = fn.__doc__ or ""
        cited = re.search(r"\(\w[^()]*(19|20)\d\d\)|PR \d+|HPCA 2026", doc) or name == "oracle"
        assert cited, f"{name}: its docstring names the paper or system documentation it follows"
