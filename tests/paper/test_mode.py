"""The paper mode's file, its training targets and how its choices and constants become overrides
(``adsl.paper.mode``, ``adsl.paper.training``)."""

from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from training_layout import training_values

from adsl.config import ConfigError
from adsl.errors import AdslError
from adsl.paper.mode import Constant, read_paper_mode
from adsl.paper.training import read_training


@pytest.fixture(scope="module")
def mode(root):
    return read_paper_mode(root / "config" / "paper.yaml", root)


def test_the_paper_mode_names_every_choice_with_the_paper_and_at_most_eight_sourced_constants(mode):
    assert 1 <= len(mode.constants) <= 8
    assert {c.kind for c in mode.constants} == {"time", "energy"}
    for c in mode.constants:
        assert c.low < c.high and c.source.strip() and c.meaning.strip(), c.name
    for ch in mode.choices:
        assert ch.paper.strip(), ch.name
    assert mode.calibration.constants == () and mode.calibration.points == 0  # the committed file fits everything


def test_every_constant_sets_a_setting_the_default_configuration_has(mode, ws):
    """A constant's path that named no setting would leave the model unchanged and its fit meaningless."""
    from adsl.paper.ledger import default_value

    for c in mode.constants:
        for path in c.paths:
            assert default_value(ws, path) is not None, (c.name, path)
        over = c.overrides(c.from_unit(0.5))
        over.workspace(ws)  # every override passes the schemas


def test_training_values_are_read_with_their_figure_system_batch_and_length(training_file):
    targets = read_training(training_file)
    by = {}
    for t in targets:
        by.setdefault(t.figure, []).append(t)
    assert {k: len(v) for k, v in by.items()} == {
        "fig03a_sd_over_ad": 5,
        "fig03a_ad": 4,  # batch 8 is 1 by construction
        "fig03b": 7,
        "fig12": 16,
        "fig13": 16,
        "fig16": 24,
    }
    raw = json.loads(training_file.read_text())
    f16 = raw["fig16_latency_s_opt66b"]
    t = next(t for t in by["fig16"] if t.system == "SADDLE_overlap" and t.batch == 64)
    assert t.value == pytest.approx(f16["SADDLE_overlap"][2] / f16["PIM-SD_total"][2])
    t = next(t for t in by["fig13"] if t.system == "PIM-SD" and t.batch == 32)
    assert t.value == raw["fig13_energy_norm_gpu_ad_opt66b"]["PIM-SD"][1]


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda r: r["fig12_throughput_norm_gpu_ad_opt66b"]["16"].update({"SADDLE": -1.0}), "SADDLE"),
        (lambda r: r.pop("fig03b_sd_over_ad_by_d_batch64"), "fig03b_sd_over_ad_by_d_batch64"),
        (lambda r: r["fig13_energy_norm_gpu_ad_opt66b"].update({"GPU-SD": "high"}), "GPU-SD"),
    ],
)
def test_a_bad_training_file_is_refused_naming_file_and_field(tmp_path, edit, field):
    raw = training_values()
    edit(raw)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(AdslError, match=field) as err:
        read_training(path)
    assert str(path) in str(err.value)


def _edited(root, tmp_path, edit):
    raw = yaml.safe_load((root / "config" / "paper.yaml").read_text())
    edit(raw)
    path = tmp_path / "paper.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda r: r["constants"]["tau_scale"].update(range=[1.0, 0.2]), "constants.tau_scale.range"),
        (lambda r: r["calibration"].update(constants=["nonesuch"]), "calibration.constants"),
        (lambda r: r["constants"].update({f"x{i}": r["constants"]["tau_scale"] for i in range(3)}), "constants"),
        (lambda r: r["constants"]["tau_scale"].update(set=["simulation"]), "constants.tau_scale.set"),
        (lambda r: r["constants"]["gpu_static_power_w"].update(offsets=[0.0]), "offsets"),
    ],
)
def test_a_bad_paper_mode_file_is_refused_naming_file_and_field(root, tmp_path, edit, field):
    path = _edited(root, tmp_path, edit)
    with pytest.raises(ConfigError, match=field) as err:
        read_paper_mode(path, root)
    assert str(path) in str(err.value)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    low=st.floats(1e-7, 10.0),
    span=st.floats(1.001, 1e3),
    u=st.floats(0.0, 1.0),
    scale=st.sampled_from(["linear", "log"]),
)
def test_a_constant_maps_its_range_onto_the_unit_interval_and_back(low, span, u, scale):
    c = Constant("c", "m", ("simulation.x",), (0.0,), low, low * span, "s", scale, "time")
    v = c.from_unit(u)
    assert c.low * (1 - 1e-12) <= v <= c.high * (1 + 1e-12)
    assert c.to_unit(v) == pytest.approx(u, abs=1e-9)
    assert c.from_unit(-0.5) == c.low and c.from_unit(2.0) == c.high


def test_overrides_lay_every_choice_and_constant_and_drop_the_one_switched_back(mode):
    values = {c.name: c.from_unit(0.25) for c in mode.constants}
    full = mode.overrides(values)
    assert full.simulation["pool_trigger"] == "idle"
    assert full.hardware["gpus"]["A100a-HBM3"]["static_power_w"] == pytest.approx(values["gpu_static_power_w"] - 3.3)
    assert full.tau_scale == pytest.approx(values["tau_scale"])
    trigger = next(c.name for c in mode.choices if c.simulation.get("pool_trigger"))
    assert "pool_trigger" not in mode.overrides(values, without=trigger).simulation
    assert mode.overrides(values, without="tau_scale").tau_scale == 1.0
    taus = {"P": {"a": 0.5}}
    assert full.taus(taus)["P"]["a"] == pytest.approx(0.5 * values["tau_scale"])
