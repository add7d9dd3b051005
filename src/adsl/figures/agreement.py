"""When two runs of a gallery table agree: to the bit where no acceptance draw enters, statistically where
one does.

Across x86-64 processors the simulator is bit-identical given the same inputs (``tools/golden.py check``),
but the fits are not: numpy and OpenBLAS pick their kernels by processor, so a fitted parameter moves in
its last digits, the calibration's bounded searches (``adsl.fitting.paper_calibration``: tolerance 1e-3
on a shift, 1e-2 on the continuation term) can end elsewhere within their tolerance, and a draw whose
probability moved by one ulp can flip, after which a replica's requests diverge. What the draws do not
reach stays bit-identical (the cost model, the profile's own rates, every decode without acceptance
draws: GPU-AD and PIM-AD); everything they reach is a new sample of the same statistic. Each gallery
table therefore names, per column, which of the two it is (``RULES``), and ``disagreements`` compares two
versions of it:

- ``exact``: equal as printed;
- ``Sampled`` (a mean over replicas and its 95 % half-width h): the two means within the 95 % half-width
  of their difference, sqrt(h1^2 + h2^2); two half-widths of 0 (no draw) must give equal means;
- ``intervals`` (a 95 % half-width from ``replicas`` replicas, Student t): the ratio of the two within
  the two-sided 99 % range of the ratio of two sample standard deviations of ``replicas`` draws each,
  sqrt(F(n - 1, n - 1)) (1/6.9 to 6.9 for 4 replicas);
- the calibrated acceptance rates of Fig. 4a: within sqrt(2) x the 95 % half-width of a rate estimated
  on the calibration's ``streams`` requests (``calibration_half_widths``);
- the timeline (one replica's few passes): each system's span and each kind of segment's mean duration
  within t(0.995, K - 1) x sqrt(2) x their standard deviation over K other seeds
  (``timeline_spread``) plus one printed digit, the same systems and configurations.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from adsl.io import as_written

INTERVAL_LEVEL = 0.99  # two-sided level of the half-width ratio's range
TIMELINE_LEVEL = 0.99  # two-sided level of the timeline's statistics against their spread over seeds
TIMELINE_KEYS = ["system", "device", "kind"]


@dataclass(frozen=True)
class Sampled:
    """A mean over replicas and its 95 % half-width: a column of the table, or computed from it."""

    column: str
    half_width: str | Callable[[pd.DataFrame], pd.Series]

    def half(self, df: pd.DataFrame) -> pd.Series:
        return df[self.half_width] if isinstance(self.half_width, str) else self.half_width(df)


@dataclass(frozen=True)
class TableRule:
    """How a gallery table's columns compare across processors (columns not named: text, compared exactly)."""

    exact: tuple[str, ...] = ()
    means: tuple[Sampled, ...] = ()
    intervals: tuple[str, ...] = ()
    calibrated: str | None = None  # a rate fitted on sampled streams, per ``category``
    timeline: bool = False


@dataclass(frozen=True)
class Disagreement:
    table: str
    column: str
    row: int | str
    fresh: float
    committed: float
    allowed: str

    def __str__(self) -> str:
        return f"{self.table}.{self.column} row {self.row}: {self.fresh!r} against {self.committed!r} ({self.allowed})"


def _throughput_half_width(df: pd.DataFrame) -> pd.Series:
    # Fig. 12 divides by GPU-AD, whose throughput carries no draw: the ratio's interval is the
    # throughput's own over GPU-AD's value
    return df.normalized_ci95 * df.throughput_tok_s / df.normalized


RULES: dict[str, TableRule] = {
    "fig04a_acceptance_rate": TableRule(
        exact=(
            "draft_length",
            "acceptance_rate",
            "tokens_per_verification",
            "mean_accepted",
            "steps",
            "requests",
            "paper_acceptance_rate",
        ),
        calibrated="calibrated_acceptance_rate",
    ),
    "fig06_roofline": TableRule(
        exact=(
            "batch",
            "draft_length",
            "intensity_flop_per_byte",
            "gpu_attainable_tflops",
            "pim_attainable_tflops",
            "attainable_tflops",
        )
    ),
    "fig12_throughput": TableRule(
        exact=("batch", "fits_memory", "limit_tok_s", "limit_normalized"),
        means=(Sampled("normalized", "normalized_ci95"), Sampled("throughput_tok_s", _throughput_half_width)),
        intervals=("normalized_ci95",),
    ),
    "fig14_ablation": TableRule(
        exact=("batch",),
        means=(Sampled("throughput_tok_s", "throughput_ci95"), Sampled("normalized", "normalized_ci95")),
        intervals=("throughput_ci95", "normalized_ci95"),
    ),
    "paper_comparison": TableRule(
        exact=("paper", "points"),
        means=(
            Sampled("ours", "ours_ci95"),
            Sampled("ratio_ours_to_paper", lambda df: df.ours_ci95 / df.paper),
        ),
        intervals=("ours_ci95",),
    ),
    "timeline": TableRule(timeline=True),
}


def interval_ratio_bound(replicas: int, level: float = INTERVAL_LEVEL) -> float:
    """The largest ratio of two 95 % half-widths from ``replicas`` replicas each that the same statistic
    gives with probability ``level``: sqrt of the F(n - 1, n - 1) quantile."""
    return math.sqrt(stats.f.ppf(0.5 + level / 2, replicas - 1, replicas - 1))


def calibration_half_widths(models: Mapping[str, dict]) -> dict[str, float]:
    """Per category, the 95 % half-width of an acceptance rate estimated on the calibration's streams:
    1.96 x the model's spread of per-request rates over sqrt(streams)."""
    out = {}
    for category, model in models.items():
        cal = model["calibration"]
        out[category] = 1.96 * float(cal["request_rate_sd"]["model"]) / math.sqrt(int(cal["streams"]))
    return out


def timeline_statistics(df: pd.DataFrame) -> pd.Series:
    """Each system's span (ms) and each (system, device, kind)'s mean segment duration (ms)."""
    dur = df.assign(duration_ms=df.end_ms - df.start_ms).groupby(TIMELINE_KEYS).duration_ms.mean()
    span = df.groupby("system").end_ms.max()
    span.index = pd.MultiIndex.from_tuples([(s, "span", "") for s in span.index], names=TIMELINE_KEYS)
    return pd.concat([span, dur]).sort_index()


def timeline_spread(ws, models: list[str], tau: str, seeds: int = 8) -> pd.DataFrame:
    """The timeline's statistics (``timeline_statistics``) over ``seeds`` other seeds: one column a seed."""
    from adsl.sim.timeline import timeline_table

    runs = {}
    for k in range(1, seeds + 1):
        settings = dataclasses.replace(ws.settings, seed=ws.settings.seed + k)
        table = timeline_table(dataclasses.replace(ws, settings=settings), models, tau)
        runs[k] = timeline_statistics(as_written(table))
    return pd.DataFrame(runs)


def _values(name, column, fresh, committed, allowed_of) -> list[Disagreement]:
    out = []
    for i, (a, b) in enumerate(zip(fresh, committed, strict=True)):
        if pd.isna(a) and pd.isna(b):
            continue
        bad, why = allowed_of(i, a, b)
        if bad:
            out.append(Disagreement(name, column, i, float(a), float(b), why))
    return out


def _exact(name, col, fresh, committed):
    def rule(i, a, b):
        return not (a == b), "equal (no acceptance draw)"

    return _values(name, col, fresh[col], committed[col], rule)


def _mean(name, spec: Sampled, fresh, committed):
    hf, hc = spec.half(fresh).to_numpy(), spec.half(committed).to_numpy()

    def rule(i, a, b):
        if hf[i] == 0 and hc[i] == 0:
            return not (a == b), "equal: both half-widths 0"
        h = math.hypot(hf[i], hc[i])
        return not (abs(a - b) <= h), f"|difference| <= {h:.4g}, the 95 % half-width of a difference"

    return _values(name, spec.column, fresh[spec.column], committed[spec.column], rule)


def _interval(name, col, fresh, committed, replicas):
    q = interval_ratio_bound(replicas)

    def rule(i, a, b):
        if a == 0 or b == 0:
            return not (a == b), "equal: a half-width of 0 (no draw)"
        return not (1 / q <= a / b <= q), f"ratio within [{1 / q:.3g}, {q:.3g}] ({replicas} replicas)"

    return _values(name, col, fresh[col], committed[col], rule)


def _calibrated(name, col, fresh, committed, half_widths):
    def rule(i, a, b):
        h = math.sqrt(2) * half_widths[fresh.category.iloc[i]]
        return not (abs(a - b) <= h), f"|difference| <= {h:.3g}, the calibration streams' sampling error"

    return _values(name, col, fresh[col], committed[col], rule)


def _timeline(name, fresh, committed, spread: pd.DataFrame) -> list[Disagreement]:
    out = []
    for col in ("system", "configuration"):
        if fresh[["system", col]].drop_duplicates().values.tolist() != (
            committed[["system", col]].drop_duplicates().values.tolist()
        ):
            out.append(Disagreement(name, col, "all", np.nan, np.nan, "the same systems and configurations"))
    a, b = timeline_statistics(fresh), timeline_statistics(committed)
    # six significant digits of a time up to ``top`` ms: a duration or span is known to one such digit
    top = max(fresh.end_ms.abs().max(), committed.end_ms.abs().max())
    printed = 10.0 ** (math.floor(math.log10(top)) - 5)
    for key in a.index.union(b.index):
        seen = spread.loc[key].dropna() if key in spread.index else pd.Series(dtype=float)
        label = " / ".join(k for k in key if k)
        if key not in a.index or key not in b.index:
            if len(seen) == spread.shape[1]:  # present under every other seed: its absence is no chance
                present = a.get(key, np.nan), b.get(key, np.nan)
                out.append(Disagreement(name, label, "all", *present, "present in both"))
            continue
        if len(seen) < 3:
            continue  # too rare under other seeds to have a spread
        t = stats.t.ppf(0.5 + TIMELINE_LEVEL / 2, len(seen) - 1)
        h = t * math.sqrt(2) * float(seen.std(ddof=1)) + printed
        if not abs(a[key] - b[key]) <= h:
            out.append(Disagreement(name, label, "mean", a[key], b[key], f"|difference| <= {h:.4g} ms (seeds)"))
    return out


def disagreements(
    name: str,
    fresh: pd.DataFrame,
    committed: pd.DataFrame,
    replicas: int,
    calibration: Mapping[str, float] | None = None,
    timeline: pd.DataFrame | None = None,
) -> list[Disagreement]:
    """Where ``fresh`` and ``committed`` (versions of gallery table ``name``) disagree beyond what another
    processor explains (``RULES``). ``calibration``: ``calibration_half_widths`` of the fresh run (Fig. 4a);
    ``timeline``: ``timeline_spread`` of the fresh run."""
    rule = RULES[name]
    if rule.timeline:
        if timeline is None:
            raise ValueError("the timeline is compared against its spread over seeds: pass timeline_spread(...)")
        return _timeline(name, fresh, committed, timeline)
    if list(fresh.columns) != list(committed.columns) or len(fresh) != len(committed):
        return [Disagreement(name, "columns", "all", len(fresh), len(committed), "the same columns and rows")]
    numeric = {*rule.exact, *(m.column for m in rule.means), *rule.intervals, rule.calibrated}
    out = [
        Disagreement(name, c, "all", np.nan, np.nan, "the same text")
        for c in fresh.columns
        if c not in numeric and not fresh[c].equals(committed[c])
    ]
    for col in rule.exact:
        out += _exact(name, col, fresh, committed)
    for spec in rule.means:
        out += _mean(name, spec, fresh, committed)
    for col in rule.intervals:
        out += _interval(name, col, fresh, committed, replicas)
    if rule.calibrated:
        if calibration is None:
            raise ValueError(f"{name}: pass calibration_half_widths(...) of the fresh run")
        out += _calibrated(name, rule.calibrated, fresh, committed, calibration)
    return out
