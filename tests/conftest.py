from __future__ import annotations

from pathlib import Path

import pytest

from adsl.workspace import load_workspace

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def ws():
    return load_workspace(ROOT / "config" / "config.yaml", base=ROOT)


@pytest.fixture(scope="session")
def models(ws):
    return ws.models


@pytest.fixture(scope="session")
def hw(ws):
    return ws.hardware
