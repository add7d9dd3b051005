"""Load YAML files and validate them against JSON Schemas, filling defaults.

The same functions serve the Snakefile (before any job is scheduled) and the command line, so a bad
value is reported the same way everywhere: file, field path, value and the allowed range.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from adsl.errors import ConfigError, shorten

PACKAGE_ROOT = Path(__file__).resolve().parents[2]
# Sizes a configuration or catalogue file may have, checked before any walk over its values (the NaN
# check, the schema, defaults): YAML aliases let a 400-byte file stand for billions of values. The shipped
# configuration has about 900 values, 22 entries in its longest list or mapping and 53 characters in its
# longest string; the bounds leave a user's sweep 100 times that room.
MAX_VALUES = 100_000  # values in one file, every alias expanded
MAX_ITEMS = 10_000  # entries of one list or mapping
MAX_TEXT = 4_096  # characters of one string or key (PATH_MAX: the longest is a path)
MAX_DEPTH = 64  # lists and mappings nested in each other
MAX_BYTES = 4_000_000  # one file: 100,000 values of 40 characters
# Experiment points in all experiments (pairs x systems x batches x draft lengths x sequence lengths x
# policies): each is checked to fit in memory before any job and simulated with its search's candidates
# (0.05-1 s each); the shipped configuration has 432, and 20,000 are a day of a 2-core machine.
MAX_POINTS = 20_000
SCHEMA_PATH = PACKAGE_ROOT / "config" / "schema.yaml"
CATALOGUE_SCHEMA_PATH = PACKAGE_ROOT / "config" / "catalogue.schema.yaml"


class DuplicateKey(yaml.constructor.ConstructorError):
    """A mapping names one key twice (PyYAML would keep the last one silently)."""

    def __init__(self, key, first, second):
        self.key, self.first_line, self.line = key, first.line + 1, second.line + 1
        super().__init__(None, None, f"key {key!r} given twice (lines {self.first_line} and {self.line})", second)


class StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """``yaml.SafeLoader`` (libyaml's parser where PyYAML has it) that refuses a key given twice in one
    mapping. Keys brought in by a merge (``<<: *anchor``) may be overridden by the mapping's own keys, as
    YAML's merge rule says."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node.start_mark)
                except TypeError:  # an unhashable key: SafeLoader's own error follows
                    continue
                if first is not key_node.start_mark:
                    raise DuplicateKey(key, first, key_node.start_mark)
        return super().construct_mapping(node, deep)


def check_size(instance: Any, file: str) -> None:
    """Refuse ``instance`` (parsed YAML: lists, mappings, scalars) beyond ``MAX_VALUES`` values with aliases
    expanded, a list or mapping beyond ``MAX_ITEMS`` entries, a string beyond ``MAX_TEXT`` characters or a
    nesting beyond ``MAX_DEPTH``. Shared parts (YAML aliases) are counted at every use but walked once."""
    sizes: dict[int, int] = {}

    def walk(x: Any, path: tuple, depth: int) -> int:
        where = ".".join(map(str, path))
        if isinstance(x, str) and len(x) > MAX_TEXT:
            raise ConfigError(file, where, f"a string of {len(x):,} characters; allowed: at most {MAX_TEXT:,}")
        if not isinstance(x, dict | list):
            return 1
        if id(x) in sizes:
            if sizes[id(x)] < 0:
                raise ConfigError(file, where, "refers to itself (a recursive YAML alias); allowed: a finite tree")
            return sizes[id(x)]
        if depth > MAX_DEPTH:
            raise ConfigError(file, where, f"lists and mappings nested {depth} deep; allowed: at most {MAX_DEPTH}")
        if len(x) > MAX_ITEMS:
            raise ConfigError(file, where, f"{len(x):,} entries; allowed: at most {MAX_ITEMS:,}")
        sizes[id(x)] = -1  # being walked
        total = 1
        for key, value in x.items() if isinstance(x, dict) else enumerate(x):
            total += walk(key, (*path, key), depth + 1) + walk(value, (*path, key), depth + 1)
            if total > MAX_VALUES:
                raise ConfigError(
                    file, where, f"more than {MAX_VALUES:,} values with YAML aliases expanded; allowed: at most that"
                )
        sizes[id(x)] = total
        return total

    walk(instance, (), 0)


def read_yaml(path: str | Path) -> Any:
    """A YAML file's content (safe types only), within the size bounds (``check_size``); a duplicate key or
    a syntax error names file and line."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(str(path), "", "file not found")
    if path.stat().st_size > MAX_BYTES:
        raise ConfigError(str(path), "", f"{path.stat().st_size:,} bytes; allowed: at most {MAX_BYTES:,}")
    with path.open() as fh:
        try:
            content = yaml.load(fh, Loader=StrictLoader)  # noqa: S506 (a SafeLoader subclass)
        except DuplicateKey as exc:
            raise ConfigError(str(path), str(exc.key), f"{exc.problem}: YAML keeps only the last; remove one") from exc
        except yaml.YAMLError as exc:  # where and what, never the file's text (it may be any file)
            mark = getattr(exc, "problem_mark", None)
            at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            problem = getattr(exc, "problem", None) or type(exc).__name__
            raise ConfigError(str(path), "", f"not valid YAML: {problem}{at}") from None
        except RecursionError:
            raise ConfigError(str(path), "", f"nested too deeply; allowed: at most {MAX_DEPTH} levels") from None
        except UnicodeDecodeError as exc:
            raise ConfigError(str(path), "", f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    check_size(content, str(path))
    return content


def _field(error: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path)


def _describe(instance: Any) -> str:
    """A value for a message: itself when short, else what it is (a file's whole content is never echoed)."""
    text = repr(instance)
    if len(text) <= 80 and not isinstance(instance, dict | list):
        return text
    if isinstance(instance, dict):
        return f"a mapping of {len(instance)} keys"
    if isinstance(instance, list):
        return f"a list of {len(instance)} items"
    if isinstance(instance, str):
        return f"a string of {len(instance):,} characters"
    return shorten(text, 80)


NON_BLANK = r"\S"  # the schema's pattern of a path: a blank one names no file


def _message(error: jsonschema.ValidationError) -> str:
    """jsonschema's message with the offending value described rather than echoed when long."""
    if error.validator == "pattern" and error.validator_value == NON_BLANK:
        return f"{_describe(error.instance)} is blank"
    text = repr(error.instance)
    return error.message.replace(text, _describe(error.instance)) if text in error.message else error.message


def _explain(error: jsonschema.ValidationError) -> str:
    s = error.schema if isinstance(error.schema, dict) else {}
    alternatives = s.get("oneOf") or s.get("anyOf")
    if alternatives:  # one line per alternative: "integer >= 1 or 'all'"
        words = [_allowed(a) or [repr(a.get("const"))] for a in alternatives]
        return f"{_message(error)} (allowed: {' or '.join(', '.join(w) for w in words)})"
    allowed = _allowed(s)
    tail = f" (allowed: {', '.join(allowed)})" if allowed else ""
    return f"{_message(error)}{tail}"


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
    if s.get("pattern") == NON_BLANK:
        allowed.append("a path, not blank")
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


def _is_integer(checker, instance) -> bool:
    # JSON Schema counts 1.0 (and 1.0e+308) as an integer; a setting typed integer must be written as one
    return isinstance(instance, int) and not isinstance(instance, bool)


# Draft 2020-12 with integers that are ints, and defaults filled in (``validate(fill_defaults=True)``)
_Strict = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_integer),
)
_DefaultFilling = _with_defaults(_Strict)


def _non_finite(instance: Any, path: tuple = ()) -> tuple | None:
    """The path of the first NaN or infinity in ``instance`` (they pass every minimum and maximum)."""
    if isinstance(instance, float) and not math.isfinite(instance):
        return path
    items = (
        instance.items() if isinstance(instance, dict) else enumerate(instance) if isinstance(instance, list) else ()
    )
    for key, value in items:
        found = _non_finite(value, (*path, key))
        if found is not None:
            return found
    return None


def validate(instance: Any, schema: dict, file: str, fill_defaults: bool = True) -> Any:
    """Validate ``instance`` (a copy with defaults filled is returned); raise ConfigError on the first,
    most specific error, sorted by position so the message is deterministic. NaN and infinities are
    refused everywhere, and an integer must be written as one; sizes are checked first (``check_size``)."""
    check_size(instance, file)
    bad = _non_finite(instance)
    if bad is not None:
        value = instance
        for key in bad:
            value = value[key]
        raise ConfigError(file, ".".join(map(str, bad)), f"{value!r} is not a finite number")
    instance = copy.deepcopy(instance)
    cls = _DefaultFilling if fill_defaults else _Strict
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


def check_simulation(sim: dict, file: str = "config", schema: dict | None = None) -> dict:
    """Simulation settings (``simulation`` of the configuration) checked against the schema (``schema``: the
    configuration schema where already read), defaults filled."""
    return validate({"simulation": sim}, schema or read_yaml(SCHEMA_PATH), file)["simulation"]


def _lengths(sim: dict, file: str, seq_lens=()) -> None:
    """Every request needs at least one output token: ``prompt_len`` below each sequence length it meets
    (the simulator used to clamp it silently); a point's replicas start at ``replicas`` and may grow to
    ``precision.max_replicas``."""
    prompt = sim["prompt_len"]
    if sim["precision"]["max_replicas"] < sim["replicas"]:
        raise ConfigError(
            file,
            "simulation.precision.max_replicas",
            f"{sim['precision']['max_replicas']} is below replicas ({sim['replicas']}); allowed: >= replicas",
        )
    limits = [("simulation.max_seq_len", sim["max_seq_len"])]
    limits += [(f"simulation.max_seq_len_by_pair.{k}", v) for k, v in sim["max_seq_len_by_pair"].items()]
    limits += [("seq_lens", v) for v in seq_lens]
    for field, limit in limits:
        if prompt >= limit:
            raise ConfigError(
                file, "simulation.prompt_len", f"{prompt} must be below {field} ({limit}): a request needs output"
            )


def _cross_checks(cfg: dict, file: str) -> None:
    """Rules that tie two settings together, which JSON Schema cannot state."""
    for i, run in enumerate(cfg["profiling"]["runs"]):
        if run["min_new_tokens"] > run["max_new_tokens"]:
            raise ConfigError(
                file,
                f"profiling.runs.{i}.min_new_tokens",
                f"{run['min_new_tokens']} exceeds max_new_tokens ({run['max_new_tokens']}); allowed: <= max_new_tokens",
            )
    points = 0
    for name, exp in cfg["simulation"]["experiments"].items():
        sizes = [len(exp.get(k) or [None]) for k in ("pairs", "systems", "batches", "draft_lengths", "seq_lens")]
        points += math.prod(sizes) * len(exp.get("policies") or [None])
        if points > MAX_POINTS:
            raise ConfigError(
                file,
                f"simulation.experiments.{name}",
                f"the experiments reach {points:,} points (pairs x systems x batches x draft_lengths x seq_lens x "
                f"policies); allowed: at most {MAX_POINTS:,} in all",
            )
        if "pair" in exp and "pairs" in exp:
            raise ConfigError(file, f"simulation.experiments.{name}", "gives both pair and pairs; allowed: one of them")
    dse = cfg["dse"]
    if dse["sweep"] not in dse["sweeps"]:
        raise ConfigError(file, "dse.sweep", f"{dse['sweep']!r} is not one of dse.sweeps: {sorted(dse['sweeps'])}")
    ol = cfg["simulation"]["open_loop"]
    if ol["warmup"] >= ol["requests"]:
        raise ConfigError(
            file, "simulation.open_loop.warmup", f"{ol['warmup']} leaves no measured request; allowed: < requests"
        )
    _lengths(cfg["simulation"], file)


def _derived(cfg: dict, schema: dict, file: str, sim: dict, where: str, seq_lens=()) -> None:
    """Simulation settings an experiment or attribution step makes by overrides, checked like the base ones."""
    try:
        checked = (
            validate({**cfg, "simulation": sim}, schema, file)["simulation"] if sim is not cfg["simulation"] else sim
        )
        _lengths(checked, file, seq_lens)
    except ConfigError as exc:
        raise ConfigError(exc.file, f"{where} -> {exc.field}", exc.reason) from exc


def load_config(config: dict | str | Path, file: str | None = None) -> dict:
    """Validate the workflow configuration (a dict or a YAML path) and fill defaults; each experiment's
    ``overrides`` are checked as the simulation settings they make."""
    if not isinstance(config, dict):
        file = str(config)
        config = read_yaml(config) or {}
    file = file or "config"
    schema = read_yaml(SCHEMA_PATH)
    cfg = validate(config, schema, file)
    _cross_checks(cfg, file)
    steps, sim = cfg["simulation"]["attribution"], {}
    base = {k: v for k, v in cfg["simulation"].items() if k not in ("experiments", "attribution")}
    for i, step in enumerate(steps):
        sim = merged(sim, step.get("simulation", {}))
        _derived(cfg, schema, file, merged(base, sim), f"simulation.attribution.{i}.simulation")
    for name, exp in cfg["simulation"]["experiments"].items():
        where = f"simulation.experiments.{name}" + (".overrides" if exp.get("overrides") else "")
        sim = experiment_simulation(cfg, name) if exp.get("overrides") else cfg["simulation"]
        _derived(cfg, schema, file, sim, where, exp.get("seq_lens") or ())
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
