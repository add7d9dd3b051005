"""Versioned acceptance-model files (JSON), one per (pair, category).

Writing and reading apply the same checks, so a file that reads is one that could have been written:
strict JSON (no NaN or Infinity anywhere), the required fields, and every number that ``RULES`` names
inside its range. A failure is a ModelFileError naming the file, the field path (``joint.s``,
``confidence.candidates.beta_mixture.params.w[1]``) and the allowed range; a refused write leaves an
existing file as it was.
"""

from __future__ import annotations

import json
import math
from fnmatch import fnmatchcase
from pathlib import Path

import numpy as np

from adsl.errors import AdslError
from adsl.io import atomic_path

MODEL_FORMAT = "adsl-acceptance-model/1"
REQUIRED = ("format", "pair", "category", "confidence", "joint")
MAX_BYTES = 16_000_000  # a fitted model is about 30 KB; a file 500 times that is not one

# (field pattern, lo, hi, lo excluded, required); the first pattern that matches a field decides. A
# pattern is dot-separated: ``*`` matches one key (or part of one), ``**`` any number of keys; a rule on
# a list applies to its elements. A number no rule names must still be finite.
REAL = (-math.inf, math.inf, False)
AT_LEAST_0 = (0.0, math.inf, False)
POSITIVE = (0.0, math.inf, True)
PROBABILITY = (0.0, 1.0, False)
# the ranges the calibration searches (adsl.fitting.paper_calibration), so a file holds what a fit can give
SHIFT_RANGE = (-8.0, 8.0)  # log-odds shift of a category's acceptance
CONTINUATION_RANGE = (-8.0, 8.0)  # h: fitted in [0, 8], or given in the configuration's [-8, 8]
SCALE_RANGE = (0.0, 3.0)  # heterogeneity scale
RULES = (
    # the joint acceptance model the generator samples from (adsl.fitting.joint_model)
    ("joint.a", *REAL, True),
    ("joint.b", *REAL, True),
    ("joint.g", *REAL, True),
    ("joint.s", *AT_LEAST_0, True),  # sd of the per-request effect
    ("joint.stderr.*", *AT_LEAST_0, False),
    # confidence distributions: mixture weights are probabilities, beta shapes and sd positive
    ("**.params.w", *PROBABILITY, False),
    ("**.params.a", *POSITIVE, False),
    ("**.params.b", *POSITIVE, False),
    ("**.params.sigma", *POSITIVE, False),
    ("confidence_request_effect.rho", *PROBABILITY, False),  # a share of variance
    ("heterogeneity.a", *POSITIVE, False),
    ("heterogeneity.b", *POSITIVE, False),
    ("heterogeneity.*rate", *PROBABILITY, False),
    ("dependence.p_match*", *PROBABILITY, False),
    ("accepted_length.*.truncated_geometric.alpha", *PROBABILITY, False),
    ("accepted_length.*.beta_geometric.a", *POSITIVE, False),
    ("accepted_length.*.beta_geometric.b", *POSITIVE, False),
    ("calibration_check.confidence", *PROBABILITY, False),
    ("calibration_check.frequency", *PROBABILITY, False),
    ("calibration_check.fitted", *PROBABILITY, False),
    ("match_rate", *PROBABILITY, False),
    ("entropy.edges", *PROBABILITY, False),  # confidence bin edges
    ("entropy.quantiles", *AT_LEAST_0, False),  # entropies, nats
    # the calibration onto a paper pair (adsl.fitting.paper_calibration): rates are acceptance rates
    ("calibration.target_rates.*", *PROBABILITY, False),
    ("calibration.achieved_rates.*", *PROBABILITY, False),
    ("calibration.shift", *SHIFT_RANGE, False, False),
    ("calibration.draft_continuation", *CONTINUATION_RANGE, False, False),
    ("calibration.heterogeneity_scale", *SCALE_RANGE, False, False),
    ("calibration.request_rate_sd.*", *AT_LEAST_0, False),
    ("calibration.max_abs_error", *AT_LEAST_0, False),
    ("**.*pvalue", *PROBABILITY, False),
)


class ModelFileError(AdslError, ValueError):
    """Raised for an acceptance-model file that is missing, not JSON, of another format or with bad joint values."""

    pass


class _Constant(str):
    """NaN, Infinity or -Infinity as read from a file (json accepts them; strict JSON does not)."""


def _shown(v) -> str:
    return f"{v} (not strict JSON)" if isinstance(v, _Constant) else repr(v)


def _allowed(lo: float, hi: float, lo_open: bool) -> str:
    if (lo, hi) == (-math.inf, math.inf):
        return "a finite number"
    if hi == math.inf:
        return f"a number {'>' if lo_open else '>='} {lo:g}"
    return f"a number in {'(' if lo_open else '['}{lo:g}, {hi:g}]"


def _matches(pattern: list[str], keys: list[str]) -> bool:
    if not pattern:
        return not keys
    if pattern[0] == "**":
        return any(_matches(pattern[1:], keys[i:]) for i in range(len(keys) + 1))
    return bool(keys) and fnmatchcase(keys[0], pattern[0]) and _matches(pattern[1:], keys[1:])


def _rule(keys: list[str]):
    return next((r for r in RULES if _matches(r[0].split("."), keys)), None)


def _leaves(value, keys: list[str], shown: str):
    """(keys of the nearest dict field, shown path, value) of every non-container value."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, [*keys, str(k)], f"{shown}.{k}" if shown else str(k))
    elif isinstance(value, list | tuple | np.ndarray):
        for i, v in enumerate(value):
            yield from _leaves(v, keys, f"{shown}[{i}]")
    else:
        yield keys, shown, value


def _is_number(v) -> bool:
    return isinstance(v, int | float | np.integer | np.floating) and not isinstance(v, bool | np.bool_)


def _check(model, path) -> None:
    """Raise ModelFileError at the first missing required field or number out of its range."""
    if not isinstance(model, dict):
        raise ModelFileError(f"{path}: an acceptance model is a JSON object, got {type(model).__name__}")
    missing = [k for k in REQUIRED if k not in model]
    if missing:
        raise ModelFileError(f"{path}: missing field {missing[0]!r}")
    if model["format"] != MODEL_FORMAT:
        raise ModelFileError(f"{path}: format {model['format']!r}, this adsl reads {MODEL_FORMAT!r}")
    joint = model["joint"] if isinstance(model["joint"], dict) else {}
    for pattern, lo, hi, lo_open, required in RULES:
        field = pattern.split(".")[-1]
        if required and not _is_number(joint.get(field)):
            got = joint.get(field)
            raise ModelFileError(f"{path}: {pattern} must be {_allowed(lo, hi, lo_open)}, got {_shown(got)}")
    for keys, shown, v in _leaves(model, [], ""):
        rule = _rule(keys)
        lo, hi, lo_open = rule[1:4] if rule else REAL
        if not _is_number(v):
            # None: not measured (e.g. calibration.request_rate_sd.measured); text where no rule asks a number
            if isinstance(v, _Constant) or (rule and v is not None):
                raise ModelFileError(f"{path}: {shown} must be {_allowed(lo, hi, lo_open)}, got {_shown(v)}")
            continue
        try:
            x = float(v)
        except OverflowError:  # an integer beyond any float (JSON integers have no limit)
            x = math.inf if v > 0 else -math.inf
        if not math.isfinite(x) or x < lo or (lo_open and x == lo) or x > hi:
            raise ModelFileError(f"{path}: {shown} must be {_allowed(lo, hi, lo_open)}, got {x!r}")


def write_model(model: dict, path: str | Path) -> None:
    """Write ``model``, stamped with the current format, as strict JSON atomically; a model that fails
    the checks raises ModelFileError and leaves ``path`` as it was."""
    model = {"format": MODEL_FORMAT, **model}
    _check(model, path)
    try:
        text = json.dumps(model, indent=1, sort_keys=True, default=float, allow_nan=False) + "\n"
    except (TypeError, ValueError) as exc:  # a value json cannot write (the checks name every number)
        raise ModelFileError(f"{path}: cannot be written as strict JSON ({exc})") from exc
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def read_model(path: str | Path) -> dict:
    """An acceptance model from its JSON file, checked like ``write_model`` checks it."""
    path = Path(path)
    if not path.is_file():
        raise ModelFileError(f"{path}: acceptance model not found")
    if path.stat().st_size > MAX_BYTES:
        raise ModelFileError(f"{path}: {path.stat().st_size:,} bytes; allowed: at most {MAX_BYTES:,}")
    try:
        model = json.loads(path.read_text(), parse_constant=_Constant)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelFileError(f"{path}: not JSON: {exc}") from exc
    _check(model, path)
    return model
