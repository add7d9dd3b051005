"""The validated configuration (as typed settings) together with the catalogues it names."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from adsl.config import SCHEMA_PATH, catalogue_schema, load_config, merged, read_yaml, resolve
from adsl.errors import ConfigError
from adsl.perf.hardware import HardwareCatalogue, load_hardware
from adsl.perf.models import ModelCatalogue, load_models
from adsl.settings import Missing, Settings


@dataclass(frozen=True)
class Sources:
    """What laying overrides over a workspace reads, read once when it is loaded: the configuration schema,
    the hardware part of the catalogue schema and the hardware file's content (each override validates and
    types copies of them; none is changed). A sweep lays one set of overrides a configuration (2,048 by
    default), and reading these three files each time was 7 % of a chunk's time."""

    schema: dict
    hardware_schema: dict
    hardware: dict | None  # None: no catalogue files

    @classmethod
    def read(cls, hardware_file: str | None) -> Sources:
        raw = read_yaml(hardware_file) if hardware_file is not None else None
        return cls(read_yaml(SCHEMA_PATH), catalogue_schema("hardware_file"), raw)


@dataclass(frozen=True)
class Workspace:
    """Typed settings and the catalogues; ``base`` resolves the relative paths the settings name."""

    settings: Settings
    models: ModelCatalogue | Missing
    hardware: HardwareCatalogue | Missing
    base: Path
    catalogue_files: tuple[str, str] | None = None  # (models, hardware) the catalogues were read from
    sources: Sources | None = field(default=None, compare=False, repr=False)  # None: read when overriding

    def path(self, p: str | Path) -> Path:
        return resolve(p, self.base)

    def with_overrides(self, simulation: dict | None = None, hardware: dict | None = None) -> Workspace:
        """The same workspace with simulation settings and hardware catalogue entries laid over it
        (both checked against their schemas)."""
        if not simulation and not hardware:
            return self
        if hardware and self.catalogue_files is None:
            raise ValueError("hardware overrides need the workspace's catalogue files")
        src = self.sources or Sources.read(self.catalogue_files[1] if self.catalogue_files else None)
        settings = self.settings
        if simulation:
            sim = settings.simulation.with_overrides(simulation, schema=src.schema)
            settings = dataclasses.replace(settings, simulation=sim)
        hw = self.hardware
        if hardware:
            hw = load_hardware(self.catalogue_files[1], hardware, src.hardware, src.hardware_schema)
        return Workspace(settings, self.models, hw, self.base, self.catalogue_files, src)


def _check_refs(cfg: dict, file: str, models: ModelCatalogue, hw: HardwareCatalogue) -> None:
    roof = cfg["roofline"]
    if roof["system"] not in hw.systems:
        raise ConfigError(file, "roofline.system", f"unknown system {roof['system']!r}; known: {sorted(hw.systems)}")
    if hw.systems[roof["system"]].pim is None:
        raise ConfigError(file, "roofline.system", f"system {roof['system']!r} has no PIM stacks to draw")
    if roof["pair"] not in models.pairs:
        raise ConfigError(file, "roofline.pair", f"unknown pair {roof['pair']!r}; known: {sorted(models.pairs)}")
    pairs = cfg["acceptance"]["pairs"]
    for name, how in pairs.items():
        if name not in models.pairs:
            raise ConfigError(file, f"acceptance.pairs.{name}", f"unknown pair; known: {sorted(models.pairs)}")
        if "same_as" in how and "calibrate" not in pairs.get(how["same_as"], {}):
            raise ConfigError(file, f"acceptance.pairs.{name}.same_as", "must name a pair that has `calibrate`")

    sim = cfg["simulation"]
    for key in ("gpu_system", "pim_system", "motivation_system", "saddle_system"):
        if sim["systems"][key] not in hw.systems:
            raise ConfigError(file, f"simulation.systems.{key}", f"unknown system; known: {sorted(hw.systems)}")
    for name, exp in sim["experiments"].items():
        for pair in exp.get("pairs") or [exp.get("pair")]:
            if pair not in pairs:
                field = f"simulation.experiments.{name}.pair"
                raise ConfigError(file, field, f"{pair!r} has no acceptance model; known: {sorted(pairs)}")
        _registered(exp["systems"], f"simulation.experiments.{name}.systems", file)

    _check_maps(cfg, file, models, hw)
    ol = sim["open_loop"]
    if ol["pair"] not in pairs:
        raise ConfigError(
            file, "simulation.open_loop.pair", f"{ol['pair']!r} has no acceptance model; known: {sorted(pairs)}"
        )
    _registered(ol["systems"], "simulation.open_loop.systems", file)
    _registered([ol["policy_system"]], "simulation.open_loop.policy_system", file)


def _registered(systems, field: str, file: str) -> None:
    """Every system of ``systems`` (a list the config names) is one of the registry's."""
    from adsl.sim.systems import SYSTEMS  # the registry; imported here to keep config loading light

    for system in systems:
        if system not in SYSTEMS:
            raise ConfigError(file, field, f"unknown system {system!r}; known: {sorted(SYSTEMS)}")


def _system_entries(systems: dict, field: str, file: str, hw: HardwareCatalogue) -> None:
    """Per-system settings (``simulation.systems.<name>``) name systems of the hardware catalogue."""
    for name, value in systems.items():
        if isinstance(value, dict) and name not in hw.systems:
            raise ConfigError(file, f"{field}.{name}", f"unknown system; known: {sorted(hw.systems)}")


def _check_maps(cfg: dict, file: str, models: ModelCatalogue, hw: HardwareCatalogue) -> None:
    """Every key of a per-system or per-pair map, in the settings and in each experiment's and attribution
    step's overrides, names an entry of its catalogue (a typo would otherwise be ignored)."""
    sim = cfg["simulation"]
    pairs = cfg["acceptance"]["pairs"]
    _system_entries(sim["systems"], "simulation.systems", file, hw)
    for pair in sim["max_seq_len_by_pair"]:
        if pair not in models.pairs:
            raise ConfigError(
                file, f"simulation.max_seq_len_by_pair.{pair}", f"unknown pair; known: {sorted(models.pairs)}"
            )
    for name, exp in sim["experiments"].items():
        over = exp.get("overrides", {}).get("systems", {})
        _system_entries(over, f"simulation.experiments.{name}.overrides.systems", file, hw)
        for key in ("gpu_system", "pim_system", "motivation_system", "saddle_system"):
            if key in over and over[key] not in hw.systems:
                field = f"simulation.experiments.{name}.overrides.systems.{key}"
                raise ConfigError(file, field, f"unknown system {over[key]!r}; known: {sorted(hw.systems)}")
    sections = {"gpus": hw.gpus, "pim_stacks": hw.pims, "runtimes": hw.runtimes, "systems": hw.systems}
    for i, step in enumerate(sim["attribution"]):
        where = f"simulation.attribution.{i}"
        _system_entries(step.get("simulation", {}).get("systems", {}), f"{where}.simulation.systems", file, hw)
        for name, exp in step.get("simulation", {}).get("experiments", {}).items():  # as the base experiments
            _registered(exp.get("systems") or [], f"{where}.simulation.experiments.{name}.systems", file)
        for section, entries in step.get("hardware", {}).items():
            if section not in sections or not isinstance(entries, dict):
                raise ConfigError(
                    file, f"{where}.hardware.{section}", f"unknown catalogue section; known: {list(sections)}"
                )
            for entry in entries:
                if entry not in sections[section]:
                    known = sorted(sections[section])
                    raise ConfigError(file, f"{where}.hardware.{section}.{entry}", f"unknown name; known: {known}")
    tl = sim["timeline"]
    if tl["pair"] not in pairs:
        raise ConfigError(
            file, "simulation.timeline.pair", f"{tl['pair']!r} has no acceptance model; known: {sorted(pairs)}"
        )
    _registered(tl["systems"], "simulation.timeline.systems", file)
    fig04c = cfg["acceptance"]["fig04c"]["pair"]
    if fig04c not in pairs:
        raise ConfigError(file, "acceptance.fig04c.pair", f"{fig04c!r} has no acceptance model; known: {sorted(pairs)}")


def load_workspace(config: dict | str | Path, base: str | Path = ".", file: str = "config/config.yaml") -> Workspace:
    """Validate everything a run needs, before any work starts."""
    if not isinstance(config, dict):
        file = str(config)
    cfg = load_config(config, file)
    files = (str(resolve(cfg["catalogues"]["models"], base)), str(resolve(cfg["catalogues"]["hardware"], base)))
    src = Sources.read(files[1])
    models, hw = load_models(files[0]), load_hardware(files[1], raw=src.hardware, schema=src.hardware_schema)
    _check_refs(cfg, file, models, hw)
    hardware: dict = {}
    for i, step in enumerate(cfg["simulation"]["attribution"]):  # each step's catalogue, as its job loads it
        hardware = merged(hardware, step.get("hardware", {}))
        if step.get("hardware"):
            try:
                load_hardware(files[1], hardware, src.hardware, src.hardware_schema)
            except ConfigError as exc:
                raise ConfigError(file, f"simulation.attribution.{i}.hardware -> {exc.field}", exc.reason) from exc
    ws = Workspace(Settings.parse(cfg), models, hw, Path(base), files, src)
    from adsl.dse.design import check_workspace

    check_workspace(ws, file)
    return ws


def partial_workspace(sections: dict, catalogues: list[str] | None = None, base: str | Path = ".") -> Workspace:
    """A workspace of only the configuration ``sections`` given (what a rule passes its function): they
    are validated and typed, every other section is ``Missing``; the model and hardware catalogues are
    loaded from ``catalogues`` (their two files) when given."""
    cfg = load_config(dict(sections), "params")
    settings = Settings.parse({k: cfg[k] for k in sections})
    if catalogues is None:
        return Workspace(settings, Missing("catalogues"), Missing("catalogues"), Path(base))
    models, hardware = catalogues
    src = Sources.read(hardware)
    hw = load_hardware(hardware, raw=src.hardware, schema=src.hardware_schema)
    return Workspace(settings, load_models(models), hw, Path(base), (models, hardware), src)
