"""The configurations of a sweep: a full grid of the axes' values, or a Saltelli design over a scrambled
Sobol sequence (Saltelli et al., Comput. Phys. Commun. 2010): matrices A and B of N points each and, per
axis i, A with its column i taken from B. The same design feeds the winner map, the Pareto fronts and the
Sobol indices (``adsl.dse.sensitivity``). A configuration's row depends only on the settings, so any job
can rebuild the design and run its chunk."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

from adsl.config import merged
from adsl.errors import ConfigError
from adsl.settings import DseAxis, DseSettings, plain

BLOCK_A, BLOCK_B = "A", "B"
# A sweep's size, bounded before any design is built: Snakemake builds one job a chunk (its DAG of 1,000
# jobs takes seconds, of 100,000 it does not finish), and every configuration simulates five systems (a
# million configurations is a week of a 2-core machine's time).
MAX_JOBS = 1_000
MAX_CONFIGURATIONS = 1_000_000


def ab_block(axis: str) -> str:
    """The block of A with axis ``axis``'s column from B."""
    return f"AB:{axis}"


def from_unit(axis: DseAxis, u: np.ndarray) -> list:
    """Axis values at points ``u`` of [0, 1): equal-width cells of the listed values, or the range
    (log-spaced with ``log``, rounded with ``integer``)."""
    if axis.values is not None:
        n = len(axis.values)
        return [axis.values[i] for i in np.minimum((u * n).astype(int), n - 1)]
    lo, hi = float(axis.low), float(axis.high)
    x = np.exp(np.log(lo) + u * (np.log(hi) - np.log(lo))) if axis.log else lo + u * (hi - lo)
    return [int(v) for v in np.round(x)] if axis.integer else [float(v) for v in x]


def grid_values(axis: DseAxis) -> list:
    """The values of an axis on a grid: the listed values, or ``levels`` points spanning the range."""
    if axis.values is not None:
        return list(axis.values)
    lo, hi = float(axis.low), float(axis.high)
    x = np.geomspace(lo, hi, axis.levels) if axis.log else np.linspace(lo, hi, axis.levels)
    return [int(v) for v in np.round(x)] if axis.integer else [float(v) for v in x]


def size(dse: DseSettings) -> int:
    """Configurations of the sweep's design, counted without building it."""
    if dse.sampling == "grid":
        return int(np.prod([len(a.values) if a.values is not None else a.levels for a in dse.axes], dtype=object))
    return dse.base_points * (len(dse.axes) + 2)


def check(dse: DseSettings, file: str = "config") -> None:
    """Ranges that a design can sample; Sobol's N a power of 2 (its balance properties); at most
    ``MAX_CONFIGURATIONS`` configurations in at most ``MAX_JOBS`` jobs."""
    n_conf = size(dse)
    if n_conf > MAX_CONFIGURATIONS:
        field = "dse.base_points" if dse.sampling == "sobol" else "dse.axes"
        raise ConfigError(
            file, field, f"the sweep has {n_conf:,} configurations; allowed: at most {MAX_CONFIGURATIONS:,}"
        )
    jobs = -(-n_conf // dse.chunk_points)
    if jobs > MAX_JOBS:
        raise ConfigError(
            file,
            "dse.chunk_points",
            f"{dse.chunk_points} configurations a job make {jobs:,} jobs of {n_conf:,}; allowed: at most {MAX_JOBS:,}"
            f" jobs (chunk_points >= {-(-n_conf // MAX_JOBS)})",
        )
    for a in dse.axes:
        where = f"dse.axes.{a.name}"
        if a.values is None and not a.low < a.high:
            raise ConfigError(file, where, f"low ({a.low}) must be below high ({a.high})")
        if a.values is None and a.log and a.low <= 0:
            raise ConfigError(file, where, f"a log range needs low > 0, got {a.low}")
    n = dse.base_points
    if dse.sampling == "sobol" and n & (n - 1):
        raise ConfigError(file, "dse.base_points", f"{n} is not a power of 2 (Sobol sequences balance at 2^m points)")
    for name in dse.winner_axes:
        if name not in [a.name for a in dse.axes]:
            raise ConfigError(
                file, "dse.winner_axes", f"{name!r} is not an axis of the sweep: {[a.name for a in dse.axes]}"
            )


def check_workspace(ws, file: str = "config") -> None:
    """Everything a sweep needs, before any job: its axes (``check``), registered systems, known pairs,
    the gain's systems among the sweep's, its simulation overrides valid as simulation settings, and every
    axis value of the right kind, in range and valid in the settings and catalogue it makes."""
    from adsl.dse.axes import NAMES
    from adsl.sim.systems import SYSTEMS

    dse = ws.settings.dse
    check(dse, file)
    for field, names in (("dse.systems", dse.systems), ("dse.gain", dse.gain)):
        for s in names:
            if s not in SYSTEMS:
                raise ConfigError(file, field, f"unknown system {s!r}; registered: {sorted(SYSTEMS)}")
    if dse.gain[0] not in dse.systems or dse.gain[1] not in dse.systems:
        raise ConfigError(file, "dse.gain", f"{list(dse.gain)} must both be among dse.systems {list(dse.systems)}")
    ws.settings.simulation.with_overrides(dse.simulation, f"{file}: dse.simulation")
    for a in dse.axes:
        if a.values is None and a.name in NAMES:
            raise ConfigError(file, f"dse.axes.{a.name}", "takes names: give `values`, not a range")
    values = {a.name: list(a.values) if a.values is not None else [a.low, a.high] for a in dse.axes}
    for name, vs in values.items():
        for v in vs:
            _check_value(ws, name, v, file)
    for p in pairs(dse):
        if p not in ws.models.pairs:
            raise ConfigError(file, "dse", f"unknown pair {p!r}; the catalogue has {sorted(ws.models.pairs)}")
    for s, _ in dse.draft_table.runs:
        if s not in SYSTEMS:
            raise ConfigError(file, "dse.draft_table.runs", f"unknown system {s!r}; registered: {sorted(SYSTEMS)}")
    # the settings and catalogue each value makes are valid: the schemas bound numbers by ranges, so every
    # axis at its smallest and at its largest value at once (a value per axis, one check each, on failure)
    numeric = {n: vs for n, vs in values.items() if all(isinstance(v, (int, float)) for v in vs)}
    for pick in (min, max):
        if not _valid(ws, {n: pick(vs) for n, vs in numeric.items()}):
            for n, vs in numeric.items():
                for v in vs:
                    _check_overrides(ws, n, v, file)


# a point field's allowed range (as an experiment's, config/schema.yaml)
POINT_RANGES = {"batch": (1, 1024), "seq_len": (2, 131072), "draft_length": (1, 64)}


def _check_value(ws, name: str, v, file: str) -> None:
    """One axis value: a point field in range, a known pair, policy or category."""
    from adsl.dse.axes import NAMES, WHOLE
    from adsl.sim.policies import POLICIES

    where = f"dse.axes.{name}"
    if name in NAMES and not isinstance(v, str):
        raise ConfigError(file, where, f"{v!r} is not a name (a list of names is expected)")
    if name not in NAMES and (isinstance(v, bool) or not isinstance(v, (int, float))):
        raise ConfigError(file, where, f"{v!r} is not a number")
    if name in WHOLE and not float(v).is_integer():
        raise ConfigError(file, where, f"{v!r} is not a whole number")
    if name in POINT_RANGES:
        lo, hi = POINT_RANGES[name]
        if not (isinstance(v, int) and lo <= v <= hi):
            raise ConfigError(file, where, f"{v!r} is not a whole number in {lo}..{hi}")
    if name == "pair" and v not in ws.models.pairs:
        raise ConfigError(file, where, f"unknown pair {v!r}; the catalogue has {sorted(ws.models.pairs)}")
    if name == "policy" and v not in POLICIES:
        raise ConfigError(file, where, f"unknown policy {v!r}; registered: {sorted(POLICIES)}")
    if name == "category" and v not in ws.settings.acceptance.categories:
        raise ConfigError(file, where, f"unknown category {v!r}; fitted: {list(ws.settings.acceptance.categories)}")
    if name == "tau_scale" and not v > 0:
        raise ConfigError(file, where, f"{v!r} must be > 0")


def _apply(ws, values: dict) -> None:
    """The settings and hardware catalogue a configuration makes (checked against their schemas)."""
    from adsl.dse.axes import configure

    c = configure(ws, values)
    ws.with_overrides(merged(plain(ws.settings.dse.simulation), c.simulation), c.hardware)


def _valid(ws, values: dict) -> bool:
    try:
        _apply(ws, values)
    except (ConfigError, ValueError):
        return False
    return True


def _check_overrides(ws, name: str, v, file: str) -> None:
    """One axis value's settings and hardware catalogue, valid; else an error naming the axis."""
    try:
        _apply(ws, {name: v})
    except (ConfigError, ValueError) as exc:
        raise ConfigError(file, f"dse.axes.{name}", f"{v!r} gives an invalid configuration: {exc}") from exc


def pairs(dse: DseSettings) -> list[str]:
    """Every pair a sweep, its capacity search and its draft-length table simulate."""
    out = [dse.base["pair"]] + [p for a in dse.axes if a.name == "pair" for p in (a.values or ())]
    return sorted(set(out) | {p for _, p in dse.draft_table.runs})


def design(dse: DseSettings) -> pd.DataFrame:
    """One row per configuration: ``configuration`` (its number), ``block`` (grid, A, B or AB:<axis>),
    ``sample`` (its row of A / B) and each axis's value."""
    check(dse)
    names = [a.name for a in dse.axes]
    if dse.sampling == "grid":
        rows = list(itertools.product(*(grid_values(a) for a in dse.axes)))
        df = pd.DataFrame(rows, columns=names)
        df.insert(0, "sample", np.arange(len(df)))
        df.insert(0, "block", "grid")
    else:
        from scipy.stats import qmc  # here: load_workspace checks the settings without scipy.stats

        k, n = len(names), dse.base_points
        u = qmc.Sobol(d=2 * k, scramble=True, seed=dse.seed).random_base2(int(np.log2(n)))
        a, b = u[:, :k], u[:, k:]
        parts = [(BLOCK_A, a), (BLOCK_B, b)]
        for i, name in enumerate(names):
            ab = a.copy()
            ab[:, i] = b[:, i]
            parts.append((ab_block(name), ab))
        frames = []
        for block, m in parts:
            f = pd.DataFrame({a.name: from_unit(a, m[:, i]) for i, a in enumerate(dse.axes)})
            f.insert(0, "sample", np.arange(n))
            f.insert(0, "block", block)
            frames.append(f)
        df = pd.concat(frames, ignore_index=True)
    df.insert(0, "configuration", np.arange(len(df)))
    return df


def chunks(dse: DseSettings) -> int:
    """Jobs the sweep is split into."""
    check(dse)
    return -(-size(dse) // dse.chunk_points)


def chunk(dse: DseSettings, k: int) -> pd.DataFrame:
    """The configurations of chunk ``k``."""
    d = design(dse)
    if not 0 <= k < -(-len(d) // dse.chunk_points):
        raise ValueError(f"chunk {k} is outside 0..{chunks(dse) - 1}")
    return d.iloc[k * dse.chunk_points : (k + 1) * dse.chunk_points]
