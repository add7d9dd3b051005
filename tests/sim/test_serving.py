"""Serving-model properties: more slots never lower throughput; the previous model broke it."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from adsl.fitting.distributions import fit_confidence
from adsl.sim.experiment import Point, run_point

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
            "search": {"knobs": []},
        }
    )
    models, taus = dict.fromkeys(cats, model), dict.fromkeys(cats, 0.5)
    one, two = (
        run_point(ws, sim, Point("OPT-66B", "PIM-SD", b, 8, 128, "warn"), models, taus)["throughput_tok_s"]
        for b in (1, 2)
    )
    assert two < one
