"""Load YAML files and validate them against JSON Schemas, filling defaults.

The same functions serve the Snakefile (before any job is scheduled) and the command line, so a bad
value is reported the same way everywhere: file, field path, value and the allowed range.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from adsl.errors import ConfigError

PACKAGE_ROOT = Path(__file__).resolve().parents[2]
SCHEMA_PATH = PACKAGE_ROOT / "config" / "schema.yaml"
CATALOGUE_SCHEMA_PATH = PACKAGE_ROOT / "config" / "catalogue.schema.yaml"


def read_yaml(path: str | Path) -> Any:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(str(path), "", "file not found")
    with path.open() as fh:
        try:
            return yaml.safe_load(fh)
        except yaml.YAMLError as exc:
            raise ConfigError(str(path), "", f"not valid YAML: {exc}") from exc


def _field(error: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path)


def _explain(error: jsonschema.ValidationError) -> str:
    s = error.schema if isinstance(error.schema, dict) else {}
    alternatives = s.get("oneOf") or s.get("anyOf")
    if alternatives:  # one line per alternative: "integer >= 1 or 'all'"
        words = [_allowed(a) or [repr(a.get("const"))] for a in alternatives]
        return f"{error.message} (allowed: {' or '.join(', '.join(w) for w in words)})"
    allowed = _allowed(s)
    tail = f" (allowed: {', '.join(allowed)})" if allowed else ""
    return f"{error.message}{tail}"


def _allowed(s: dict) -> list[str]:
    allowed = []
    for key, word in (
        ("minimum", ">="),
        ("exclusiveMinimum", ">"),
        ("maximum", "<="),
        ("exclusiveMaximum", "<"),
    ):
        if key in s:
            allowed.append(f"{word} {s[key]}")
    if "enum" in s:
        allowed.append(f"one of {s['enum']}")
    if "type" in s:
        allowed.append(f"type {s['type']}")
    return allowed


def _with_defaults(validator_class):
    validate_props = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if isinstance(sub, dict) and "default" in sub and name not in instance:
                    instance[name] = copy.deepcopy(sub["default"])
        yield from validate_props(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


_DefaultFilling = _with_defaults(jsonschema.Draft202012Validator)


def validate(instance: Any, schema: dict, file: str, fill_defaults: bool = True) -> Any:
    """Validate ``instance`` (a copy with defaults filled is returned); raise ConfigError on the first,
    most specific error, sorted by position so the message is deterministic."""
    instance = copy.deepcopy(instance)
    cls = _DefaultFilling if fill_defaults else jsonschema.Draft202012Validator
    validator = cls(schema)
    errors = sorted(validator.iter_errors(instance), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        best = jsonschema.exceptions.best_match(errors)
        raise ConfigError(file, _field(best), _explain(best))
    return instance


def merged(base: dict, overrides: dict) -> dict:
    """``base`` with ``overrides`` laid over it, dicts merged key by key."""
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def experiment_simulation(cfg: dict, name: str) -> dict:
    """The simulation settings experiment ``name`` runs with: ``simulation`` with the experiment's
    ``overrides`` laid over it."""
    sim = cfg["simulation"]
    return merged({k: v for k, v in sim.items() if k != "experiments"}, sim["experiments"][name].get("overrides", {}))


def check_simulation(sim: dict, file: str = "config") -> dict:
    """Simulation settings (``simulation`` of the configuration) checked against the schema, defaults filled."""
    return validate({"simulation": sim}, read_yaml(SCHEMA_PATH), file)["simulation"]


def load_config(config: dict | str | Path, file: str | None = None) -> dict:
    """Validate the workflow configuration (a dict or a YAML path) and fill defaults; each experiment's
    ``overrides`` are checked as the simulation settings they make."""
    if not isinstance(config, dict):
        file = str(config)
        config = read_yaml(config) or {}
    schema = read_yaml(SCHEMA_PATH)
    cfg = validate(config, schema, file or "config")
    steps, sim = cfg["simulation"]["attribution"], {}
    for i, step in enumerate(steps):
        sim = merged(sim, step.get("simulation", {}))
        base = {k: v for k, v in cfg["simulation"].items() if k not in ("experiments", "attribution")}
        try:
            validate({**cfg, "simulation": merged(base, sim)}, schema, file or "config")
        except ConfigError as exc:
            where = f"simulation.attribution.{i}.simulation"
            raise ConfigError(exc.file, f"{where} -> {exc.field}", exc.reason) from exc
    for name, exp in cfg["simulation"]["experiments"].items():
        if exp.get("overrides"):
            try:
                validate({**cfg, "simulation": experiment_simulation(cfg, name)}, schema, file or "config")
            except ConfigError as exc:
                where = f"simulation.experiments.{name}.overrides"
                raise ConfigError(exc.file, f"{where} -> {exc.field}", exc.reason) from exc
    return cfg


def catalogue_schema(part: str) -> dict:
    full = read_yaml(CATALOGUE_SCHEMA_PATH)
    return {"$defs": full["$defs"], **full[part]}


def resolve(path: str | Path, base: str | Path | None = None) -> Path:
    """An input path: absolute as given; relative ones from the working directory when the file is
    there, else from ``base`` (the workflow's own folder, where the committed inputs live)."""
    path = Path(path)
    if path.is_absolute() or base is None or path.exists():
        return path
    return Path(base) / path
