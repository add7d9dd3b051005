"""The paper mode's file (``config/paper.yaml``): the configuration choices that make every system as the
paper describes it, the constants the paper leaves unstated (each with a physical range and its source),
and how they are calibrated. ``overrides`` lays them over the default configuration."""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from adsl.config import ConfigError, merged, read_yaml, resolve, validate

SCHEMA = Path(__file__).resolve().parents[3] / "config" / "paper.schema.yaml"


@dataclass(frozen=True)
class Choice:
    """A configuration choice: what the paper says (or "unstated, assumed" and why), and the overrides of
    the default configuration that make it."""

    name: str
    paper: str
    simulation: dict
    hardware: dict


@dataclass(frozen=True)
class Overrides:
    """What the paper mode lays over the default configuration: simulation settings, hardware catalogue
    entries, and a factor on every tau (the paper never prints its tau)."""

    simulation: dict
    hardware: dict
    tau_scale: float = 1.0

    def __or__(self, other: Overrides) -> Overrides:
        return Overrides(
            merged(self.simulation, other.simulation),
            merged(self.hardware, other.hardware),
            self.tau_scale * other.tau_scale,
        )

    def workspace(self, ws):
        """``ws`` with the settings and catalogue entries laid over it."""
        return ws.with_overrides(self.simulation or None, self.hardware or None)

    def taus(self, taus: dict[str, dict[str, float]] | None) -> dict[str, dict[str, float]] | None:
        """pair -> category -> tau, scaled."""
        if taus is None or self.tau_scale == 1.0:
            return taus
        return {pair: {c: t * self.tau_scale for c, t in by.items()} for pair, by in taus.items()}


@dataclass(frozen=True)
class Constant:
    """A constant the paper leaves unstated: the settings it sets (dotted paths), its range from a source,
    whether it is fitted on a log scale, and whether it changes time or energy."""

    name: str
    meaning: str
    paths: tuple[str, ...]
    offsets: tuple[float, ...]
    low: float
    high: float
    source: str
    scale: str
    kind: str

    def to_unit(self, value: float) -> float:
        """``value`` as a position in [0, 1] of the range (on the constant's scale)."""
        if self.scale == "log":
            return (math.log(value) - math.log(self.low)) / (math.log(self.high) - math.log(self.low))
        return (value - self.low) / (self.high - self.low)

    def from_unit(self, u: float) -> float:
        u = min(max(float(u), 0.0), 1.0)
        if u in (0.0, 1.0):  # the range's ends exactly (exp(log(x)) may miss x by an ulp)
            return self.low if u == 0.0 else self.high
        if self.scale == "log":
            return math.exp(math.log(self.low) + u * (math.log(self.high) - math.log(self.low)))
        return self.low + u * (self.high - self.low)

    def overrides(self, value: float) -> Overrides:
        """The overrides that set the constant to ``value``."""
        sim: dict = {}
        hw: dict = {}
        scale = 1.0
        for path, offset in zip(self.paths, self.offsets, strict=True):
            section, *keys = path.split(".")
            if section == "tau":  # tau.scale: the adaptive systems' tau per category times the value
                scale = value + offset
                continue
            node = sim if section == "simulation" else hw
            for key in keys[:-1]:
                node = node.setdefault(key, {})
            node[keys[-1]] = value + offset
        return Overrides(sim, hw, scale)


@dataclass(frozen=True)
class Calibration:
    """How the constants are fitted (``adsl.paper.calibrate``)."""

    replicas: int
    max_evaluations: int
    diff_step: float
    edge: float
    constants: tuple[str, ...]  # the fitted subset; empty: all
    points: int  # every k-th training target only (a smoke calibration); 0: all


@dataclass(frozen=True)
class PaperMode:
    file: str
    training: Path
    choices: tuple[Choice, ...]
    constants: tuple[Constant, ...]
    calibration: Calibration

    def constant(self, name: str) -> Constant:
        return next(c for c in self.constants if c.name == name)

    @property
    def fitted(self) -> tuple[Constant, ...]:
        """The constants the calibration fits (``calibration.constants``, or all)."""
        names = self.calibration.constants
        return tuple(c for c in self.constants if not names or c.name in names)

    def overrides(self, values: dict[str, float], without: str | Collection[str] = ()) -> Overrides:
        """The overrides of the default configuration: every choice and every constant in ``values`` but the
        item or items named ``without`` (a constant left out keeps the default's value)."""
        gone = {without} if isinstance(without, str) else set(without)
        out = Overrides({}, {})
        for choice in self.choices:
            if choice.name not in gone:
                out = out | Overrides(choice.simulation, choice.hardware)
        for c in self.constants:
            if c.name in values and c.name not in gone:
                out = out | c.overrides(values[c.name])
        return out


def read_paper_mode(path: str | Path, base: str | Path = ".") -> PaperMode:
    """The paper mode's file, validated (``config/paper.schema.yaml``); ranges must be increasing, log-scale
    ranges positive, and a subset to fit must name constants of the file."""
    file = str(path)
    raw = validate(read_yaml(resolve(path, base)), read_yaml(SCHEMA), file)
    constants = []
    for name, c in raw["constants"].items():
        low, high = c["range"]
        if not low < high:
            raise ConfigError(
                file, f"constants.{name}.range", f"[{low}, {high}]: the low end must be below the high end"
            )
        if c["scale"] == "log" and low <= 0:
            raise ConfigError(file, f"constants.{name}.range", f"a log-scale range must be positive, got low {low}")
        offsets = tuple(c.get("offsets") or [0.0] * len(c["set"]))
        if len(offsets) != len(c["set"]):
            raise ConfigError(file, f"constants.{name}.offsets", f"{len(offsets)} offsets for {len(c['set'])} settings")
        constants.append(
            Constant(
                name,
                c["meaning"],
                tuple(c["set"]),
                offsets,
                float(low),
                float(high),
                c["source"],
                c["scale"],
                c["kind"],
            )
        )
    cal = raw["calibration"]
    unknown = sorted(set(cal["constants"]) - set(raw["constants"]))
    if unknown:
        raise ConfigError(
            file, "calibration.constants", f"unknown constants {unknown}; known: {sorted(raw['constants'])}"
        )
    names = [ch["name"] for ch in raw["choices"]]
    if len(set(names)) != len(names) or set(names) & set(raw["constants"]):
        raise ConfigError(file, "choices", "every choice and constant needs a name of its own")
    return PaperMode(
        file,
        resolve(raw["training"], base),
        tuple(
            Choice(ch["name"], ch["paper"], ch.get("simulation", {}), ch.get("hardware", {})) for ch in raw["choices"]
        ),
        tuple(constants),
        Calibration(
            cal["replicas"],
            cal["max_evaluations"],
            cal["diff_step"],
            cal["edge"],
            tuple(cal["constants"]),
            cal["points"],
        ),
    )
