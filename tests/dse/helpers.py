from __future__ import annotations

import dataclasses
from pathlib import Path

from adsl.config import read_yaml
from adsl.workspace import load_workspace

ROOT = Path(__file__).resolve().parents[2]
ACCEPTANCE = ROOT / "tests" / "sim" / "golden" / "results" / "acceptance"  # the golden set's fitted models


def sweep_workspace(dse: dict, **simulation):
    """The shipped configuration with ``dse`` as its sweep (catalogues by absolute path)."""
    cfg = read_yaml(ROOT / "config" / "config.yaml")
    cfg["catalogues"] = {k: str(ROOT / v) for k, v in cfg["catalogues"].items()}
    cfg["dse"] = {"sweep": "test", "sweeps": {"test": dse}}
    cfg["simulation"].update(simulation)
    return load_workspace(cfg, base=ROOT)


def with_dse(ws, **changes):
    return dataclasses.replace(
        ws, settings=dataclasses.replace(ws.settings, dse=dataclasses.replace(ws.settings.dse, **changes))
    )
