"""Versioned acceptance-model files (JSON), one per (pair, category)."""

from __future__ import annotations

import json
from pathlib import Path

from adsl.errors import AdslError
from adsl.io import atomic_path

MODEL_FORMAT = "adsl-acceptance-model/1"
REQUIRED = ("format", "pair", "category", "confidence", "joint")


class ModelFileError(AdslError, ValueError):
    """Raised for an acceptance-model file that is missing, not JSON, of another format or with bad joint values."""

    pass


def write_model(model: dict, path: str | Path) -> None:
    """Write ``model``, stamped with the current format, as JSON atomically."""
    model = {"format": MODEL_FORMAT, **model}
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(model, indent=1, sort_keys=True, default=float) + "\n")


def read_model(path: str | Path) -> dict:
    """An acceptance model from its JSON file, with its format and joint parameters checked."""
    path = Path(path)
    if not path.is_file():
        raise ModelFileError(f"{path}: acceptance model not found")
    try:
        model = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ModelFileError(f"{path}: not JSON: {exc}") from exc
    missing = [k for k in REQUIRED if k not in model]
    if missing:
        raise ModelFileError(f"{path}: missing field {missing[0]!r}")
    if model["format"] != MODEL_FORMAT:
        raise ModelFileError(f"{path}: format {model['format']!r}, this adsl reads {MODEL_FORMAT!r}")
    for key in ("a", "b", "s", "g"):
        v = model["joint"].get(key)
        if not isinstance(v, int | float) or v != v:
            raise ModelFileError(f"{path}: joint.{key} must be a number, got {v!r}")
    if model["joint"]["s"] < 0:
        raise ModelFileError(f"{path}: joint.s must be >= 0, got {model['joint']['s']}")
    return model
