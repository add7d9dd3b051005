"""Serving-model properties: more slots never lower throughput, the best draft placement is never slower
than a fixed one."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from adsl.fitting.distributions import fit_confidence
from adsl.settings import MicroBatching
from adsl.sim.experiment import Point, run_point
from adsl.sim.placement import draft_candidates, place_draft
from adsl.sim.timing import batch_pass

SYSTEMS = ("GPU-AD", "GPU-SD", "PIM-AD", "PIM-SD", "SADDLE")
RNG = np.random.default_rng(0)
CONFIDENCE = fit_confidence(np.concatenate([RNG.beta(8, 1, 2000), RNG.beta(2, 2, 600)]))


@settings(max_examples=4, deadline=None)
@given(st.floats(-2, 2), st.floats(0.5, 1.5), st.floats(0, 1), st.floats(-0.5, 1), st.floats(0.2, 0.8))
def test_throughput_never_falls_from_batch_1_to_8(ws, a, b, s, g, tau):
    """Continuous batching keeps every slot busy, so a larger batch adds work per pass and never leaves the
    system idler (static batches broke this: PIM-SD gave fewer tokens/s at batch 2 than at 1)."""
    model = {"confidence": CONFIDENCE, "joint": {"a": a, "b": b, "s": s, "g": g}}
    cats = ws.settings.simulation.categories
    models, taus = dict.fromkeys(cats, model), dict.fromkeys(cats, tau)
    sim = ws.settings.simulation.with_overrides({"prompt_len": 32})
    for system in SYSTEMS:
        tput = [
            run_point(ws, sim, Point("OPT-66B", system, bt, 8, 128, "warn"), models, taus)["throughput_tok_s"]
            for bt in (1, 2, 4, 8)
        ]
        assert all(x <= y for x, y in zip(tput, tput[1:], strict=False)), (system, tput)


def test_the_previous_model_broke_the_property(ws):
    """Static batches with the draft split per micro-batch (the previous model): PIM-SD's two-request
    batch runs two draft passes where one did, and delivers fewer tokens/s than one request alone."""
    model = {"confidence": CONFIDENCE, "joint": {"a": -1.0, "b": 1.0, "s": 0.8, "g": 0.3}}
    cats = ws.settings.simulation.categories
    sim = ws.settings.simulation.with_overrides(
        {
            "prompt_len": 32,
            "batching": {"mode": "static"},
            "draft_placement": "tensor_parallel",
            "draft_split": "inherit",
        }
    )
    models, taus = dict.fromkeys(cats, model), dict.fromkeys(cats, 0.5)
    one, two = (
        run_point(ws, sim, Point("OPT-66B", "PIM-SD", b, 8, 128, "warn"), models, taus)["throughput_tok_s"]
        for b in (1, 2)
    )
    assert two < one


@settings(max_examples=25, deadline=None)
@given(
    st.sampled_from(["dgx-a100", "saddle-tp", "saddle", "motivation-4gpu"]), st.integers(1, 128), st.floats(64, 4096)
)
def test_best_draft_placement_is_never_slower_than_a_fixed_one(ws, models, hw, system, batch, ctx):
    s = hw.system(system)
    pair = models.pair("Llama3.1-70B")
    mapping = {"fc": "gpu", "attention": "pim" if s.pim else "gpu"}
    sched = MicroBatching(2, overlap=bool(s.pim))
    _, copies, m = place_draft(pair, s, batch, ctx, mapping, sched, "best")
    best = float(batch_pass(pair.draft, s, batch, 1, ctx, m, sched, copies).time_s)
    for name, (c, mm) in draft_candidates(s, mapping).items():
        assert best <= float(batch_pass(pair.draft, s, batch, 1, ctx, mm, sched, c).time_s), name
