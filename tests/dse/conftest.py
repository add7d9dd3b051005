from __future__ import annotations

import pytest

from adsl.fitting.tau import read_taus
from tests.dse.helpers import ACCEPTANCE


@pytest.fixture(scope="session")
def model_paths() -> dict[str, dict[str, str]]:
    out: dict = {}
    for p in sorted(ACCEPTANCE.glob("*/*.json")):
        if p.parent.name != "measured":
            out.setdefault(p.parent.name, {})[p.stem] = str(p)
    return out


@pytest.fixture(scope="session")
def taus():
    return read_taus(str(ACCEPTANCE / "tau.csv"))
