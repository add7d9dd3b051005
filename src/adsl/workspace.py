"""The validated configuration (as typed settings) together with the catalogues it names."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from adsl.config import load_config, resolve
from adsl.errors import ConfigError
from adsl.perf.hardware import HardwareCatalogue, load_hardware
from adsl.perf.models import ModelCatalogue, load_models
from adsl.settings import Missing, Settings


@dataclass(frozen=True)
class Workspace:
    """Typed settings and the catalogues; ``base`` resolves the relative paths the settings name."""

    settings: Settings
    models: ModelCatalogue | Missing
    hardware: HardwareCatalogue | Missing
    base: Path
    catalogue_files: tuple[str, str] | None = None  # (models, hardware) the catalogues were read from

    def path(self, p: str | Path) -> Path:
        return resolve(p, self.base)

    def with_overrides(self, simulation: dict | None = None, hardware: dict | None = None) -> Workspace:
        """The same workspace with simulation settings and hardware catalogue entries laid over it
        (both checked against their schemas)."""
        settings = self.settings
        if simulation:
            settings = dataclasses.replace(settings, simulation=settings.simulation.with_overrides(simulation))
        hw = self.hardware
        if hardware:
            if self.catalogue_files is None:
                raise ValueError("hardware overrides need the workspace's catalogue files")
            hw = load_hardware(self.catalogue_files[1], hardware)
        return Workspace(settings, self.models, hw, self.base, self.catalogue_files)


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
    from adsl.sim.systems import SYSTEMS  # the registry; imported here to keep config loading light

    sim = cfg["simulation"]
    for key in ("gpu_system", "pim_system", "motivation_system", "saddle_system"):
        if sim["systems"][key] not in hw.systems:
            raise ConfigError(file, f"simulation.systems.{key}", f"unknown system; known: {sorted(hw.systems)}")
    for name, exp in sim["experiments"].items():
        for pair in exp.get("pairs") or [exp.get("pair")]:
            if pair not in pairs:
                field = f"simulation.experiments.{name}.pair"
                raise ConfigError(file, field, f"{pair!r} has no acceptance model; known: {sorted(pairs)}")
        for system in exp["systems"]:
            if system not in SYSTEMS:
                field = f"simulation.experiments.{name}.systems"
                raise ConfigError(file, field, f"unknown system {system!r}; known: {sorted(SYSTEMS)}")

    ol = sim["open_loop"]
    if ol["pair"] not in pairs:
        raise ConfigError(
            file, "simulation.open_loop.pair", f"{ol['pair']!r} has no acceptance model; known: {sorted(pairs)}"
        )
    for system in [*ol["systems"], ol["policy_system"]]:
        if system not in SYSTEMS:
            field = "simulation.open_loop.systems" if system in ol["systems"] else "simulation.open_loop.policy_system"
            raise ConfigError(file, field, f"unknown system {system!r}; known: {sorted(SYSTEMS)}")


def load_workspace(config: dict | str | Path, base: str | Path = ".", file: str = "config/config.yaml") -> Workspace:
    """Validate everything a run needs, before any work starts."""
    if not isinstance(config, dict):
        file = str(config)
    cfg = load_config(config, file)
    files = (str(resolve(cfg["catalogues"]["models"], base)), str(resolve(cfg["catalogues"]["hardware"], base)))
    models, hw = load_models(files[0]), load_hardware(files[1])
    _check_refs(cfg, file, models, hw)
    return Workspace(Settings.parse(cfg), models, hw, Path(base), files)


def partial_workspace(sections: dict, catalogues: list[str] | None = None, base: str | Path = ".") -> Workspace:
    """A workspace of only the configuration ``sections`` given (what a rule passes its function): they
    are validated and typed, every other section is ``Missing``; the model and hardware catalogues are
    loaded from ``catalogues`` (their two files) when given."""
    cfg = load_config(dict(sections), "params")
    settings = Settings.parse({k: cfg[k] for k in sections})
    if catalogues is None:
        return Workspace(settings, Missing("catalogues"), Missing("catalogues"), Path(base))
    models, hardware = catalogues
    return Workspace(settings, load_models(models), load_hardware(hardware), Path(base), (models, hardware))
