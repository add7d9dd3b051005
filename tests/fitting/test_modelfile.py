"""Acceptance-model files are strict JSON with checked ranges, in both directions: a model that write_model
refuses (leaving an existing file byte-identical) is one that read_model refuses, with the same message."""

import copy
import json

import numpy as np
import pytest

from adsl.fitting.modelfile import MODEL_FORMAT, ModelFileError, read_model, write_model


def model() -> dict:
    conf = {
        "selected": "beta_mixture",
        "candidates": {
            "beta": {"params": {"a": 2.0, "b": 0.5}, "loglik": 10.0, "k": 2, "aic": -16.0},
            "beta_mixture": {"params": {"w": [0.3, 0.7], "a": [2.0, 40.0], "b": [1.0, 0.5]}, "loglik": 12.0, "k": 5},
            "logit_normal": {"params": {"mu": 2.0, "sigma": 1.5}, "loglik": 11.0, "k": 2},
        },
        "ks_statistic": 0.01,
        "ks_pvalue": 0.4,
    }
    return {
        "pair": "p",
        "category": "open_qa",
        "confidence": conf,
        "confidence_request_effect": {"rho": 0.1, "requests": 55},
        "joint": {"a": 0.5, "b": 1.0, "s": 0.3, "g": 0.2, "loglik": -1322.5, "stderr": {"a": 0.1, "log_s": 0.5}},
        "heterogeneity": {"a": 14.1, "b": 1.6, "mean_rate": 0.9, "lr_pvalue": 5e-66},
        "match_rate": 0.9,
        "calibration": {
            "shift": -0.4,
            "draft_continuation": 0.8,
            "target_rates": {"4": 0.7, "8": 0.6},
            "request_rate_sd": {"measured": None, "model": 0.1},
        },
    }


def edited(path: str, value) -> dict:
    """``model()`` with the field at dotted ``path`` (list index as a number) set to ``value``, or removed
    when ``value`` is ``...``."""
    m = copy.deepcopy(model())
    *parents, last = [int(k) if k.isdigit() and k not in ("4", "8") else k for k in path.split(".")]
    node = m
    for k in parents:
        node = node[k]
    if value is ...:
        del node[last]
    else:
        node[last] = value
    return m


BAD = [
    ("joint.s", float("nan"), "joint.s must be a number >= 0"),
    ("joint.s", -0.5, "joint.s must be a number >= 0, got -0.5"),
    ("joint.a", float("inf"), "joint.a must be a finite number"),
    ("joint.s", 10**400, "joint.s must be a number >= 0, got inf"),  # JSON integers have no limit
    ("joint.b", np.float32("nan"), "joint.b must be a finite number"),
    ("joint.g", ..., "joint.g must be a finite number, got None"),
    ("joint.a", "0.5", "joint.a must be a finite number, got '0.5'"),
    ("joint.g", True, "joint.g must be a finite number, got True"),
    ("joint.loglik", float("nan"), "joint.loglik must be a finite number"),
    ("heterogeneity.lr_pvalue", float("nan"), "heterogeneity.lr_pvalue must be a number in [0, 1]"),
    ("match_rate", 1.5, "match_rate must be a number in [0, 1], got 1.5"),
    ("confidence_request_effect.rho", -0.1, "confidence_request_effect.rho must be a number in [0, 1], got -0.1"),
    ("confidence.candidates.beta_mixture.params.w.1", 1.5, "params.w[1] must be a number in [0, 1], got 1.5"),
    ("confidence.candidates.beta.params.a", 0.0, "beta.params.a must be a number > 0, got 0.0"),
    ("confidence.candidates.logit_normal.params.sigma", -1.0, "params.sigma must be a number > 0, got -1.0"),
    ("calibration.target_rates.8", 1.2, "calibration.target_rates.8 must be a number in [0, 1], got 1.2"),
    ("calibration.shift", float("-inf"), "calibration.shift must be a number in [-8, 8], got -"),
    # a fitted number outside the range its fit searches (it changed a throughput by 8 %)
    ("calibration.draft_continuation", 1e300, "calibration.draft_continuation must be a number in [-8, 8], got 1e+300"),
    ("calibration.heterogeneity_scale", 3.5, "calibration.heterogeneity_scale must be a number in [0, 3], got 3.5"),
]


def test_round_trip_is_strict_json(tmp_path):
    path = tmp_path / "m.json"
    write_model(model(), path)
    text = path.read_text()
    assert json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in {text}")) == {
        "format": MODEL_FORMAT,
        **model(),
    }
    assert read_model(path) == {"format": MODEL_FORMAT, **model()}


@pytest.mark.parametrize(("field", "value", "message"), BAD, ids=[f"{f}={v!r}" for f, v, _ in BAD])
def test_bad_field_refused_on_write_and_on_read(tmp_path, field, value, message):
    path = tmp_path / "m.json"
    write_model(model(), path)
    before = path.read_bytes()
    with pytest.raises(ModelFileError) as err:
        write_model(edited(field, value), path)
    assert str(err.value).startswith(f"{path}: ") and message in str(err.value)
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["m.json"]
    # the same model in a file another tool wrote (Python's json writes NaN and Infinity)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": MODEL_FORMAT, **edited(field, value)}, default=float))
    with pytest.raises(ModelFileError) as err:
        read_model(bad)
    assert str(err.value).startswith(f"{bad}: ") and message in str(err.value)


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_non_finite_number_in_a_file(tmp_path, constant):
    path = tmp_path / "m.json"
    write_model(model(), path)
    text = path.read_text().replace('"s": 0.3', f'"s": {constant}')
    assert constant in text
    path.write_text(text)
    with pytest.raises(ModelFileError, match=r"m\.json: joint\.s must be a number >= 0, got -?(NaN|Infinity|inf)"):
        read_model(path)


def test_other_bad_files(tmp_path):
    path = tmp_path / "m.json"
    path.write_text("[1, 2]")
    with pytest.raises(ModelFileError, match="a JSON object"):
        read_model(path)
    path.write_text("{")
    with pytest.raises(ModelFileError, match="not JSON"):
        read_model(path)
    with pytest.raises(ModelFileError, match="missing field 'joint'"):
        write_model({k: v for k, v in model().items() if k != "joint"}, tmp_path / "n.json")
    with pytest.raises(ModelFileError, match="strict JSON"):
        write_model({**model(), "extra": {1, 2}}, tmp_path / "n.json")
    assert not (tmp_path / "n.json").exists()


def test_an_undefined_statistic_is_written_as_null(tmp_path):
    """A constant entropy (the synthetic profile of the fitting stage's end-to-end test) leaves the
    Spearman correlation undefined: null in the strict-JSON file, not NaN."""
    from adsl.fitting.entropy import entropy_check, fit_entropy

    rng = np.random.default_rng(0)
    conf, ent = rng.uniform(0.01, 1, 500), np.full(500, 0.5)
    with pytest.warns(Warning, match="constant"):
        check = entropy_check(fit_entropy(conf, ent), conf, ent)
    assert check["spearman_measured"] is None and check["spearman_drawn"] is None
    m = model()
    m["entropy"] = {"check": check}
    write_model(m, tmp_path / "m.json")
    assert read_model(tmp_path / "m.json")["entropy"]["check"]["spearman_measured"] is None
