"""Which kind of machine made a set of results: tables agree to the last bit only on the same kind.

numpy and OpenBLAS pick their kernels by processor, so the last bits of a sum can differ between an
AVX-512 and an AVX2 machine, and the calibration's root finding (tolerance 1e-3) can turn that into
visible digits. ``machine()`` names what decides this: the processor and the libraries' versions.
"""

from __future__ import annotations

import importlib.metadata as md
import platform
from pathlib import Path

# the vector extensions that change which kernels numpy / OpenBLAS run
SIMD = ("avx512f", "avx512dq", "avx512vl", "avx2", "fma", "sse4_2", "asimd", "sve")


def _cpuinfo() -> dict[str, str]:
    path = Path("/proc/cpuinfo")
    if not path.is_file():
        return {}
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if not line.strip():
            break  # the first processor describes them all
        key, _, value = line.partition(":")
        out.setdefault(key.strip(), value.strip())
    return out


def machine() -> dict:
    """Processor (vendor, family, model, vector extensions) and numeric library versions."""
    info = _cpuinfo()
    flags = set((info.get("flags") or info.get("Features") or "").split())
    versions = {}
    for pkg in ("numpy", "scipy", "pandas"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            continue
    return {
        "machine": platform.machine(),
        "vendor": info.get("vendor_id", info.get("CPU implementer", "")),
        "family": info.get("cpu family", info.get("CPU architecture", "")),
        "model": info.get("model", info.get("CPU part", "")),
        "simd": sorted(flags & set(SIMD)),
        **versions,
    }


def computes_alike(a: dict, b: dict, vector_extensions: bool = True) -> bool:
    """Whether machines ``a`` and ``b`` (``machine()``) give the same bits: the same architecture, numpy and
    scipy, and where the fits enter also the same vector extensions (they pick numpy's and OpenBLAS's
    kernels; the processor's family and model do not matter, nor pandas, which only writes the numbers)."""
    keys = ("machine", "numpy", "scipy", *(("simd",) if vector_extensions else ()))
    return all(a.get(k) == b.get(k) for k in keys)
