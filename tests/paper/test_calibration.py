"""The paper mode's calibration (``adsl.paper.calibrate``): a smoke calibration (2 constants, 2 training
points, a handful of simulations) on made-up training values, what it writes, and that it reads no paper
value but the training file's."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest
from training_layout import training_values

from adsl import paths
from adsl.errors import AdslError
from adsl.paper.calibrate import (
    calibrate,
    constants_table,
    figure_residuals,
    read_constants,
    residual_table,
    write_constants,
)
from adsl.paper.mode import read_paper_mode
from adsl.paper.training import read_training

# a small world: short sequences, one replica, few requests; the smoke fit's 2 constants and 2 points
SMALL = {"max_seq_len": 192, "prompt_len": 32}


@pytest.fixture(scope="module")
def smoke(root):
    mode = read_paper_mode(root / "config" / "paper.yaml", root)
    cal = dataclasses.replace(
        mode.calibration, constants=("gpu_attention_factor", "tau_scale"), points=36, max_evaluations=3, replicas=1
    )
    return dataclasses.replace(mode, calibration=cal)


OPENED: list[str] = []
RECORDING = [False]


def _audit(event, args):
    if RECORDING[0] and event == "open" and args and isinstance(args[0], str | Path):
        OPENED.append(str(args[0]))


sys.addaudithook(_audit)


@pytest.fixture(scope="module")
def fitted(ws, smoke, opt66b, tmp_path_factory):
    training = tmp_path_factory.mktemp("training") / "training.json"

    training.write_text(__import__("json").dumps(training_values()))
    model_paths, taus = opt66b
    small = ws.with_overrides(SMALL)
    OPENED.clear()
    RECORDING[0] = True
    try:
        targets = read_training(training)
        result = calibrate(small, smoke, targets, model_paths, taus)
    finally:
        RECORDING[0] = False
    return result, training, list(OPENED)


def test_a_smoke_calibration_fits_two_constants_on_two_points_inside_their_ranges(fitted, smoke):
    result, _, _ = fitted
    assert len(result.targets) == 2
    assert result.evaluations <= smoke.calibration.max_evaluations + 2 + 1  # the Jacobian at the best point
    assert [c.name for c in result.constants if c.fitted] == ["gpu_attention_factor", "tau_scale"]
    for c in result.constants:
        assert c.low <= c.value <= c.high and c.ci_low <= c.value <= c.ci_high, c
        if not c.fitted:  # held at its range's midpoint on its own scale
            assert smoke.constant(c.name).to_unit(c.value) == pytest.approx(0.5)
    assert np.isfinite(result.simulated).all() and (result.simulated > 0).all()


def test_the_calibration_reads_no_paper_value_but_the_training_file(fitted, root):
    """Every paper number the repository holds (headlines, figure shapes, the gallery) stays unread: the fit
    sees the training file and the model's own inputs only."""
    _, training, opened = fitted
    data = [str(p) for p in opened if Path(p).suffix in (".csv", ".json", ".yaml", ".parquet")]
    paper_files = {str(root / paths.HEADLINES), str(root / paths.PAPER_SHAPES), paths.HEADLINES, paths.PAPER_SHAPES}
    assert not paper_files & set(data)
    assert not [p for p in data if "docs/img" in p or "/results/" in p and "paper" in p]
    assert str(training) in data
    assert not [p for p in data if "paper" in Path(p).name and p != str(training) and "paper.schema" not in p]


def test_the_calibration_tables_name_every_constant_and_training_figure(fitted, smoke, tmp_path):
    result, _, _ = fitted
    table = constants_table(result, smoke, {c.name: 1.0 for c in smoke.constants})
    assert list(table.constant) == [c.name for c in smoke.constants]
    assert set(table.at_edge) <= {"", "low", "high"} and table.source.str.len().min() > 10
    res = residual_table(result)
    assert np.allclose(res.log_ratio, np.log(res.paper_mode / res.paper))
    per = figure_residuals(res)
    assert per.targets.sum() == len(res)
    write_constants(result, tmp_path / "c.json")
    assert read_constants(tmp_path / "c.json", smoke) == pytest.approx(result.values)


def test_fitted_constants_outside_their_ranges_or_missing_are_refused(fitted, smoke, tmp_path):
    result, _, _ = fitted
    bad = dict(result.values, tau_scale=5.0)
    (tmp_path / "c.json").write_text(__import__("json").dumps(bad))
    with pytest.raises(AdslError, match="tau_scale"):
        read_constants(tmp_path / "c.json", smoke)
    (tmp_path / "c.json").write_text(__import__("json").dumps({"tau_scale": 0.5}))
    with pytest.raises(AdslError, match="expected the constants"):
        read_constants(tmp_path / "c.json", smoke)
