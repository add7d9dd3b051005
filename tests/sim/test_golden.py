"""The simulator's golden set (``tools/golden.py``): the 76 benchmark points and the whole simulation stage
(every experiment, attribution step, timeline and serving table) recomputed from the pinned inputs in
``tests/sim/golden/`` give what is recorded there, to the bit on every x86-64 processor with the numpy and
scipy that recorded it (``golden.same_numerics``: measured on three processor classes, docs/testing.md); under
other library versions the same rows and text, numbers within 5 % and intervals within what as many
replicas give (``adsl.figures.agreement.interval_ratio_bound``; a structural change still fails)."""

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from adsl.figures.agreement import interval_ratio_bound

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import golden  # noqa: E402

SAME_KIND = any(golden.same_numerics(kind) for kind in golden.machines())


# what a point's number of replicas moves (``simulation.precision``): one ulp that flips an acceptance can
# move a point's interval across its target, and then the point runs another block
BY_REPLICAS = (
    "replicas",
    "precision_met",
    "throughput_std",
    "throughput_ci95",
    "tokens_per_j_ci95",
    "throughput_replicas",
    "tokens_per_j_replicas",
)


def _close(new: pd.DataFrame, old: pd.DataFrame, name: str) -> None:
    """Another processor: the same rows, columns and text, numbers within 5 %; where a point ran another
    number of replicas (at most 5 % of the points), its interval columns are not compared."""
    assert list(new.columns) == list(old.columns) and len(new) == len(old), name
    same = (new["replicas"] == old["replicas"]).to_numpy() if "replicas" in old else np.ones(len(old), bool)
    assert same.mean() >= 0.95, f"{name}: {int((~same).sum())} points ran another number of replicas"
    for col in new.columns:
        rows = same if col in BY_REPLICAS else slice(None)
        a, b = new[col][rows], old[col][rows]
        if col.endswith(("_ci95", "_std")) and pd.api.types.is_numeric_dtype(old[col]):
            # an interval from n replicas: within the range two sets of n replicas give, never a fixed tolerance
            n = old["replicas"][rows] if "replicas" in old else pd.Series(4, index=old.index)[rows]
            q = np.array([interval_ratio_bound(int(k)) for k in n])
            x, y = a.to_numpy(float), b.to_numpy(float)
            drawn = (x != 0) | (y != 0)
            ratio = np.divide(x, y, out=np.zeros_like(x), where=y != 0)
            ok = ~drawn | ((ratio >= 1 / q) & (ratio <= q)) | (np.isnan(x) & np.isnan(y))
            assert ok.all(), f"{name}.{col}: an interval beyond its F range at rows {np.flatnonzero(~ok)[:5]}"
        elif pd.api.types.is_numeric_dtype(old[col]):
            pd.testing.assert_series_equal(a, b, rtol=0.05, atol=1e-12, check_dtype=False, obj=name)
        elif col.endswith("_replicas"):  # each replica's value (a list a row): numbers too
            np.testing.assert_allclose(np.concatenate(list(a)), np.concatenate(list(b)), rtol=0.05, err_msg=name)
        else:
            assert a.equals(b), (name, col)


def test_the_benchmark_points_are_the_golden_ones():
    new, old = golden.bench_rows(), pd.read_parquet(golden.GOLDEN / "bench.parquet")
    if SAME_KIND:
        pd.testing.assert_frame_equal(new, old, check_exact=True)
    else:
        _close(new, old, "bench")


@pytest.mark.slow
def test_the_simulation_stage_is_the_golden_one(tmp_path):
    tables = golden.stage_tables(golden.GOLDEN / "results")
    recorded = {
        str(p.relative_to(golden.GOLDEN / "results"))
        for pat in golden.OUTPUTS
        for p in golden.GOLDEN.glob(f"results/{pat}")
    }
    assert set(tables) == recorded
    for name, (same, diff) in golden.compare(tables, golden.GOLDEN / "results").items():
        if SAME_KIND:
            assert same, f"{name}: {diff}"
        else:
            read = pd.read_parquet if name.endswith(".parquet") else pd.read_csv
            _close(read(golden._written(name, tables[name], tmp_path)), read(golden.GOLDEN / "results" / name), name)
