"""The fair referee (``adsl.sim.search``): every system's legal set, and the search keeps the fastest of
what it simulated; a smaller legal set never gives a faster system."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from adsl.fitting.distributions import fit_confidence
from adsl.sim.experiment import Point, first_replicas, point_inputs, run_point, search_point, simulate_point
from adsl.sim.search import Configuration, fastest, legal_set

RNG = np.random.default_rng(0)
MODEL = {
    "confidence": fit_confidence(np.concatenate([RNG.beta(8, 1, 2000), RNG.beta(2, 2, 600)])),
    "joint": {"a": -0.5, "b": 1.0, "s": 0.6, "g": 0.3},
}
ALL = ("draft_placement", "micro_batches", "pool_trigger")


@given(st.lists(st.floats(0, 10, allow_nan=False), min_size=1, max_size=12))
def test_fastest_is_a_maximum_and_a_tie_keeps_the_earlier(values):
    i = fastest(values)
    assert values[i] == max(values)
    assert all(v < values[i] for v in values[:i])


def _sim(ws, knobs=ALL, screen=2, **sim):
    base = ws.settings.simulation.with_overrides({"prompt_len": 32, "replicas": 2, "precision": {"target": 0}, **sim})
    search = dataclasses.replace(base.search, knobs=tuple(knobs), screen_replicas=screen)
    return dataclasses.replace(base, search=search)


def _inputs(ws):
    cats = ws.settings.simulation.categories
    return dict.fromkeys(cats, MODEL), dict.fromkeys(cats, 0.4)


@pytest.mark.parametrize(
    "system,sizes",
    [("GPU-AD", 1), ("GPU-SD", 2), ("PIM-AD", 2), ("PIM-SD", 6), ("SD", 3), ("SADDLE-p", 6), ("SADDLE", 12)],
)
def test_legal_sets_hold_each_systems_knobs_with_its_own_configuration_first(ws, system, sizes):
    """GPU-SD: two draft placements on the DGX (no PIM); PIM-SD: three placements x one or two
    micro-batches; SD on the 4-stage pipeline
    keeps its 5 micro-batches; SADDLE also both triggers;
    without knobs, only the system's own configuration."""
    models, taus = _inputs(ws)
    p = point_inputs(ws, _sim(ws), Point("OPT-66B", system, 8, 4, 96, "warn"), models, taus)
    cands = legal_set(p.setup, ALL)
    assert len(cands) == sizes == len(set(cands))
    assert cands[0].draft_placement == (p.setup.draft_placement if p.setup.decoding == "sd" else None)
    assert cands[0].micro_batches == p.setup.micro_batching.micro_batches
    assert legal_set(p.setup, ()) == cands[:1]
    with pytest.raises(ValueError, match="unknown search knobs"):
        legal_set(p.setup, ("layout",))


@pytest.mark.parametrize("system", ["PIM-AD", "PIM-SD", "SADDLE"])
def test_the_search_keeps_a_candidate_no_slower_than_any_it_simulated(ws, system):
    """Every legal candidate re-simulated on its own on the screening replica: none is faster than the
    chosen one, and the chosen one's row is its run over all replicas."""
    models, taus = _inputs(ws)
    sim = _sim(ws, screen=1)
    point = Point("OPT-66B", system, 16, 4, 96, "warn")
    found = search_point(ws, sim, point, models, taus)
    legal = legal_set(point_inputs(ws, sim, point, models, taus).setup, ALL)
    assert found.candidates == len(legal) and found.point.configuration in legal
    chosen = simulate_point(first_replicas(found.inputs, 1)).throughput_tok_s.mean()
    for conf in legal:
        p = point_inputs(ws, sim, dataclasses.replace(point, configuration=conf), models, taus)
        assert simulate_point(first_replicas(p, 1)).throughput_tok_s.mean() <= chosen, conf
    assert found.result.time_s.size == sim.replicas
    assert found.gain >= 1.0


@pytest.mark.parametrize("system", ["PIM-SD", "SADDLE"])
def test_a_smaller_legal_set_never_gives_a_faster_system(ws, system):
    """Screening on every replica: the row's throughput is the chosen run's, so dropping a knob (or all)
    can only lower it or leave it."""
    models, taus = _inputs(ws)
    point = Point("OPT-66B", system, 16, 4, 96, "warn")
    full = run_point(ws, _sim(ws), point, models, taus)
    for knobs in ((), ("draft_placement",), ("micro_batches",), ("draft_placement", "micro_batches")):
        row = run_point(ws, _sim(ws, knobs), point, models, taus)
        assert row["throughput_tok_s"] <= full["throughput_tok_s"], knobs
        assert row["search_candidates"] <= full["search_candidates"]


def test_a_given_configuration_is_run_as_given(ws):
    models, taus = _inputs(ws)
    conf = Configuration("tensor_parallel", 1, "idle")
    row = run_point(ws, _sim(ws), Point("OPT-66B", "SADDLE", 16, 4, 96, "warn", configuration=conf), models, taus)
    assert (row["configuration"], row["search_candidates"]) == (conf.label, 1)
    assert (row["draft_placement"], row["micro_batches"], row["pool_trigger"]) == ("tensor_parallel", 1.0, "idle")


def test_candidates_the_loop_cannot_tell_apart_are_simulated_once(ws, monkeypatch):
    """SADDLE's draft one copy per GPU and in PIM give the same draft variants in another order (its
    scheduler places each pass's FC): the loop's key is the same, so the search simulates one of each
    such pair, and the chosen run is the same as with every candidate simulated."""
    import adsl.sim.core as core
    import adsl.sim.experiment as experiment

    models, taus = _inputs(ws)
    sim, point = _sim(ws, screen=1), Point("OPT-66B", "SADDLE", 16, 4, 96, "warn")
    legal = legal_set(point_inputs(ws, sim, point, models, taus).setup, ALL)
    keys = {}
    for conf in legal:
        p = first_replicas(point_inputs(ws, sim, dataclasses.replace(point, configuration=conf), models, taus), 1)
        keys[conf] = core.loop_key(p.setup, core.pass_tables(p.setup, p.pair, p.workload, p.serving), p.serving)
    same = [c for c in legal if c.draft_placement in ("replicated", "pim")]
    assert len({keys[c] for c in same}) == len(same) // 2  # placement is not in the key
    assert keys[legal[0]] not in {keys[c] for c in same}  # tensor-parallel drafts are other passes
    screened, finished = [], []
    inner, whole = experiment.replica_logs, experiment.simulate_point
    monkeypatch.setattr(experiment, "replica_logs", lambda *a, **k: screened.append(1) or inner(*a, **k))
    monkeypatch.setattr(
        experiment, "simulate_point", lambda *a, **k: finished.append(len(k.get("done", ()))) or whole(*a, **k)
    )
    found = search_point(ws, sim, point, models, taus)
    assert len(screened) == len(set(keys.values()))  # each distinct candidate once
    assert finished == [1]  # then the winner's further replicas, after its screened one
    monkeypatch.setattr(experiment, "loop_key", lambda *a: object())  # every candidate its own key
    every = search_point(ws, sim, point, models, taus)
    assert every.point == found.point
    np.testing.assert_array_equal(every.result.throughput_tok_s, found.result.throughput_tok_s)


@pytest.mark.parametrize(("system", "screen"), [("SADDLE", 1), ("PIM-SD", 1), ("PIM-SD", 2)])
def test_the_kept_candidate_runs_on_from_its_screened_replicas_as_a_whole_run_would(ws, system, screen):
    """The search keeps the screened replicas of the candidate it chooses and runs only the rest: the
    result equals a whole run of that configuration from scratch in every field, to the bit."""
    from adsl.sim.result import ARRAY_FIELDS, DICT_FIELDS

    models, taus = _inputs(ws)
    sim, point = _sim(ws, screen=screen, replicas=3), Point("OPT-66B", system, 16, 4, 96, "warn")
    found = search_point(ws, sim, point, models, taus)
    assert found.candidates > 1 and found.result.time_s.size == sim.replicas > screen
    fresh = simulate_point(point_inputs(ws, sim, found.point, models, taus))
    for f in ARRAY_FIELDS:
        np.testing.assert_array_equal(getattr(found.result, f), getattr(fresh, f), err_msg=f)
    for f in DICT_FIELDS:
        a, b = getattr(found.result, f), getattr(fresh, f)
        assert a.keys() == b.keys(), f
        for k in a:
            np.testing.assert_array_equal(a[k], b[k], err_msg=f"{f}.{k}")
    assert found.result.placement == fresh.placement
