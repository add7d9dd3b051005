"""Inputs of the paper mode's tests: made-up training values with the layout of the paper's training file
(the paper's own values are not in the repository), and acceptance models and taus for OPT-66B."""

from __future__ import annotations

import json

import numpy as np
import pytest
from training_layout import training_values

from adsl.fitting.distributions import fit_confidence
from adsl.fitting.modelfile import write_model


@pytest.fixture
def training_file(tmp_path):
    path = tmp_path / "training.json"
    path.write_text(json.dumps(training_values()))
    return path


@pytest.fixture(scope="module")
def opt66b(tmp_path_factory, ws):
    """OPT-66B's acceptance model files (one made-up model for every category) and taus."""
    rng = np.random.default_rng(1)
    model = {
        "confidence": fit_confidence(np.concatenate([rng.beta(8, 1, 2000), rng.beta(2, 2, 600)])),
        "joint": {"a": -0.3, "b": 0.9, "s": 0.6, "g": 0.5},
    }
    folder = tmp_path_factory.mktemp("models")
    paths = {}
    for c in ws.settings.simulation.categories:
        write_model({"pair": "OPT-66B", "category": c} | model, folder / f"{c}.json")
        paths[c] = str(folder / f"{c}.json")
    taus = {"OPT-66B": {c: 0.5 for c in ws.settings.simulation.categories}}
    return {"OPT-66B": paths}, taus
