"""Atomic file output: write to a temporary file beside the target, then rename."""

from __future__ import annotations

import glob
import io
import os
import re
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pandas as pd


def stray_temporaries(path: Path) -> list[Path]:
    """Temporary files ``atomic_path`` left beside ``path`` when a process writing it was killed."""
    pattern = re.compile(rf"\.{re.escape(path.name)}\.[a-z0-9_]{{8}}{re.escape(path.suffix)}")
    return [p for p in path.parent.glob(f".{glob.escape(path.name)}.*") if pattern.fullmatch(p.name)]


@contextmanager
def atomic_path(path: str | Path):
    """Yield a temporary path in the target's folder; on success it replaces ``path``. Temporaries of the
    same target left by a killed earlier write are removed first (one job writes a given output)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for stray in stray_temporaries(path):
        stray.unlink(missing_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; outputs should read like any other file
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


FLOAT_FORMAT = "%.6g"  # every table's numbers as written: six significant digits


def write_csv(df: pd.DataFrame, path: str | Path) -> None:
    with atomic_path(path) as tmp:
        df.to_csv(tmp, index=False, float_format=FLOAT_FORMAT, lineterminator="\n")


def as_written(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` as ``write_csv`` writes it and pandas reads it back (numbers rounded as written)."""
    return pd.read_csv(io.StringIO(df.to_csv(index=False, float_format=FLOAT_FORMAT, lineterminator="\n")))
