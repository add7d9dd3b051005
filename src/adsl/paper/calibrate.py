"""Calibration of the paper mode's unstated constants: bounded least squares (scipy's ``least_squares``,
trust-region reflective) on the log ratios of simulated to paper values of the training targets only, each
constant searched inside its physical range on its own scale. The interval of a constant comes from the
fit's Jacobian (95 %, the residuals' variance); a constant the targets do not move is reported as such."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from adsl.errors import AdslError
from adsl.io import atomic_path
from adsl.paper.mode import Overrides, PaperMode
from adsl.paper.predict import predictions, training_rows
from adsl.paper.training import Target

FLOOR = 1e-3  # a simulated share of 0 (nothing overlapped) is scored as 0.1 %: finite, and far off
Z95 = 1.959963984540054


@dataclass(frozen=True)
class Fitted:
    """One constant after the fit: its value, 95 % interval, and whether it sits at its range's end."""

    name: str
    value: float
    low: float
    high: float
    ci_low: float
    ci_high: float
    at_edge: str  # "", "low" or "high"
    identified: bool  # whether the training targets constrain it (a finite interval inside the range)
    fitted: bool  # False: not in the fitted subset (held at its range's midpoint)


@dataclass(frozen=True)
class CalibrationResult:
    constants: tuple[Fitted, ...]
    targets: tuple[Target, ...]
    simulated: np.ndarray  # per target, at the fitted values
    evaluations: int
    status: str  # scipy's message

    @property
    def values(self) -> dict[str, float]:
        return {c.name: c.value for c in self.constants}


def residuals(simulated: np.ndarray, targets: tuple[Target, ...]) -> np.ndarray:
    """log(simulated / paper) per target."""
    paper = np.array([t.value for t in targets])
    return np.log(np.maximum(simulated, FLOOR) / paper)


def simulate(ws, mode: PaperMode, values: dict[str, float], targets, model_paths, taus, replicas=None) -> np.ndarray:
    """Each target's simulated value under the paper mode with the constants ``values``."""
    over = mode.overrides(values)
    if replicas is not None:
        over = over | Overrides({"replicas": replicas}, {})
    return predictions(training_rows(over.workspace(ws), model_paths, over.taus(taus)), targets)


class _Budget(Exception):
    """The calibration's simulations are spent: the fit stops at the best point it has seen."""


def subset(targets: tuple[Target, ...], every: int) -> tuple[Target, ...]:
    """Every ``every``-th target (0 or 1: all), for a smoke calibration."""
    return targets if every <= 1 else targets[::every]


def calibrate(ws, mode: PaperMode, targets: tuple[Target, ...], model_paths: dict, taus: dict) -> CalibrationResult:
    """Fit the constants (``mode.fitted``; the others at their range's midpoint) to ``targets``."""
    cal = mode.calibration
    targets = subset(targets, cal.points)
    free = mode.fitted
    held = {c.name: c.from_unit(0.5) for c in mode.constants if c not in free}
    if not targets:
        raise AdslError(f"{mode.file}: calibration.points: no training target left to fit")
    seen: dict[tuple, np.ndarray] = {}  # unit point -> simulated targets
    limit = {"simulations": cal.max_evaluations}  # raised once, for the Jacobian at the best point

    def values_of(u) -> dict[str, float]:
        return held | {c.name: c.from_unit(x) for c, x in zip(free, u, strict=True)}

    def key(u) -> tuple:
        return tuple(np.round(np.clip(u, 0.0, 1.0), 12))

    def run(u) -> np.ndarray:
        if key(u) not in seen:
            if len(seen) >= limit["simulations"]:
                raise _Budget
            seen[key(u)] = simulate(ws, mode, values_of(np.clip(u, 0.0, 1.0)), targets, model_paths, taus, cal.replicas)
        return residuals(seen[key(u)], targets)

    def jacobian(u) -> np.ndarray:
        """Forward differences of ``diff_step`` of the range (backward at the range's high end)."""
        r0 = run(u)
        cols = []
        for i in range(len(u)):
            h = cal.diff_step if u[i] + cal.diff_step <= 1.0 else -cal.diff_step
            v = np.array(u, dtype=float)
            v[i] += h
            cols.append((run(v) - r0) / h)
        return np.column_stack(cols)

    def cost(u) -> float:
        return float(np.sum(residuals(seen[key(u)], targets) ** 2))

    u0 = np.full(len(free), 0.5)
    status = "converged"
    try:
        fit = least_squares(run, u0, jac=jacobian, bounds=(0.0, 1.0), method="trf", x_scale=1.0, max_nfev=10_000)
        status = str(fit.message)
    except _Budget:
        status = f"stopped after {cal.max_evaluations} simulations (calibration.max_evaluations) at the best point"
    u = np.array(min(seen, key=lambda k: cost(np.array(k))))
    n, p = len(targets), len(free)
    dof = max(n - p, 1)
    s2 = cost(u) / dof
    limit["simulations"] = len(seen) + len(free)  # the interval needs the Jacobian at the best point
    jac = jacobian(u)
    cov = s2 * np.linalg.pinv(jac.T @ jac)
    sd = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    fitted = []
    for c in mode.constants:
        if c in free:
            i = free.index(c)
            x, h = float(u[i]), Z95 * float(sd[i])
            identified = bool(np.any(np.abs(jac[:, i]) > 1e-9)) and h < 1.0
            lo, hi = (x - h, x + h) if identified else (0.0, 1.0)
            edge = "low" if x <= cal.edge else "high" if x >= 1.0 - cal.edge else ""
            fitted.append(
                Fitted(c.name, c.from_unit(x), c.low, c.high, c.from_unit(lo), c.from_unit(hi), edge, identified, True)
            )
        else:
            v = held[c.name]
            fitted.append(Fitted(c.name, v, c.low, c.high, c.low, c.high, "", False, False))
    return CalibrationResult(tuple(fitted), targets, seen[key(u)], len(seen), status)


def constants_table(result: CalibrationResult, mode: PaperMode, defaults: dict[str, float]) -> pd.DataFrame:
    """One row per constant: meaning, default value, fitted value, range, 95 % interval, edge flag, source."""
    rows = []
    for f in result.constants:
        c = mode.constant(f.name)
        rows.append(
            dict(
                constant=f.name,
                kind=c.kind,
                meaning=c.meaning,
                default=defaults.get(f.name, np.nan),
                fitted=f.value,
                range_low=f.low,
                range_high=f.high,
                ci95_low=f.ci_low,
                ci95_high=f.ci_high,
                at_edge=f.at_edge,
                identified=f.identified,
                in_fit=f.fitted,
                source=" ".join(c.source.split()),
            )
        )
    return pd.DataFrame(rows)


def residual_table(result: CalibrationResult) -> pd.DataFrame:
    """One row per training target: the paper's value, the paper mode's and their log ratio."""
    df = pd.DataFrame([dataclasses.asdict(t) for t in result.targets]).rename(columns={"value": "paper"})
    df["paper_mode"] = result.simulated
    df["log_ratio"] = residuals(result.simulated, result.targets)
    return df


def figure_residuals(res: pd.DataFrame) -> pd.DataFrame:
    """Per training figure: the median |log ratio| and the number of targets."""
    g = res.assign(abs_log_ratio=res.log_ratio.abs()).groupby("figure", sort=True)
    return pd.DataFrame({"median_abs_log_ratio": g.abs_log_ratio.median(), "targets": g.size()}).reset_index()


def write_constants(result: CalibrationResult, path: str | Path) -> None:
    """The fitted values, as the paper-mode runs read them (``read_constants``)."""
    with atomic_path(path) as tmp:
        Path(tmp).write_text(json.dumps(result.values, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def read_constants(path: str | Path, mode: PaperMode) -> dict[str, float]:
    """Fitted values written by ``write_constants``: every constant of ``mode``, each inside its range."""
    file = str(path)
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise AdslError(f"{file}: cannot read the fitted constants ({exc})") from exc
    names = {c.name for c in mode.constants}
    if not isinstance(raw, dict) or set(raw) != names:
        got = sorted(raw) if isinstance(raw, dict) else type(raw).__name__
        raise AdslError(f"{file}: expected the constants {sorted(names)}, got {got}")
    for c in mode.constants:
        v = raw[c.name]
        if isinstance(v, bool) or not isinstance(v, int | float) or not c.low <= v <= c.high:
            raise AdslError(f"{file}: {c.name}: {v!r} outside its range [{c.low}, {c.high}]")
    return {k: float(v) for k, v in raw.items()}
