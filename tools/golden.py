"""The simulator's golden set: what it gives today, kept so that a rewrite of the core is held to it.

    python tools/golden.py record --results RUN/results   # the inputs of a workflow run (snakemake --cores 2,
                                                          # then snakemake policies serving --cores 2)
    python tools/golden.py check [--only bench]           # recompute and compare, field by field
    python tools/golden.py check --add-machine            # and list this machine if every table is identical

``tests/sim/golden/`` holds:
- ``bench.parquet``: the 76 configuration points of ``benchmarks/bench_sim.py`` (synthetic acceptance
  models, no workflow inputs), one ``run_point`` row each;
- ``results/``: laid out as a run's ``results/``: the inputs of the simulation stage (the acceptance models
  and tau, the policy zoo's gap table) and what it made from them: every experiment, every attribution
  step, and the two tables that simulate themselves (timeline, serving).

``check`` reruns all of it with the golden inputs and reports, per table, whether it is identical to the
bit and else the largest relative difference per column (tests/sim/test_golden.py runs it, marked slow).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "sim" / "golden"
SIMULATING_TABLES = ("timeline", "serving")  # registry tables that run the simulator themselves
INPUTS = ("acceptance/*/*.json", "acceptance/tau.csv", "simulation/policy_gaps.csv")
OUTPUTS = ("experiments/*.parquet", "attribution/*.parquet", *(f"simulation/{t}.csv" for t in SIMULATING_TABLES))


def machine() -> dict:
    from adsl.provenance import machine as this_machine

    return this_machine()


def _workspace():
    """The shipped configuration, its catalogues named by absolute paths (the stage runs inside the golden
    folder)."""
    from adsl.config import read_yaml
    from adsl.workspace import load_workspace

    cfg = read_yaml(ROOT / "config" / "config.yaml")
    cfg["catalogues"] = {k: str(ROOT / v) for k, v in cfg["catalogues"].items()}
    return load_workspace(cfg, base=ROOT)


def bench_rows() -> pd.DataFrame:
    """The 76 points of benchmarks/bench_sim.py, one run_point row each, as the golden set stores them (read back
    from Parquet: a list column, such as each replica's throughput, reads back as arrays)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_sim import bench_points, synthetic_models

    from adsl.sim.experiment import Point, run_point

    ws = _workspace()
    sim = ws.settings.simulation
    models = synthetic_models(sim.categories)
    taus = dict.fromkeys(sim.categories, 0.3)
    rows = [run_point(ws, sim, Point(*p), models, taus) for p in bench_points()]
    buf = io.BytesIO()
    pd.DataFrame(rows).to_parquet(buf, index=False)
    return pd.read_parquet(buf)


@contextlib.contextmanager
def _inside(folder: Path):
    here = Path.cwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(here)


def stage_tables(results: Path) -> dict[str, pd.DataFrame]:
    """Every experiment, attribution step and simulating table, from the inputs under ``results``."""
    from adsl import paths
    from adsl.figures.registry import registry
    from adsl.fitting.tau import read_taus
    from adsl.sim.attribution import run_step
    from adsl.sim.experiment import run_experiment

    ws = _workspace()
    sim = ws.settings.simulation
    out = {}
    with _inside(results.parent):  # the registry names inputs relative to a run's folder
        taus = read_taus(paths.TAU)
        models = {p: {c: paths.pair_model(p, c) for c in sim.categories} for p in ws.settings.acceptance.pairs}
        for name in sim.experiments:
            out[f"experiments/{name}.parquet"] = run_experiment(ws, name, models, taus)
        for i in range(len(sim.attribution)):
            out[f"attribution/step{i}.parquet"] = run_step(ws, i, models, taus)
        reg = registry()
        for name in SIMULATING_TABLES:
            spec = reg.tables[name]
            inputs = spec.inputs(ws.settings, lambda p: str(p if Path(p).exists() else ROOT / p))
            out[f"simulation/{name}.csv"] = spec.function(ws, **inputs, **spec.options)
    return out


def _written(name: str, df: pd.DataFrame, folder: Path) -> Path:
    """``df`` as the workflow writes it (Parquet, or CSV through adsl.io.write_csv)."""
    from adsl.io import write_csv

    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".parquet":
        df.to_parquet(path, index=False)
    else:
        write_csv(df, path)
    return path


def record(results: Path) -> None:
    """The golden set from a run's inputs (``results``: its acceptance models, tau and the policy zoo's gap
    table) and what this checkout's simulator makes of them; how it differs from the run's own tables is
    printed (the run may have been made by another version)."""
    if GOLDEN.exists():
        shutil.rmtree(GOLDEN)
    (GOLDEN / "results").mkdir(parents=True)
    for pattern in INPUTS:
        for f in sorted(results.glob(pattern)):
            dest = GOLDEN / "results" / f.relative_to(results)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, dest)
    tables = stage_tables(GOLDEN / "results")
    for name, df in tables.items():
        _written(name, df, GOLDEN / "results")
    bench_rows().to_parquet(GOLDEN / "bench.parquet", index=False)
    _write_machines([machine()])
    for name in tables:
        if (results / name).is_file():
            same = (results / name).read_bytes() == (GOLDEN / "results" / name).read_bytes()
            read = pd.read_parquet if name.endswith(".parquet") else pd.read_csv
            diff = "" if same else _differences(read(GOLDEN / "results" / name), read(results / name))
            print(f"{'same' if same else 'differs':8s} from the run's: {name} {diff}")
    print(f"recorded {len(tables)} tables and {len(pd.read_parquet(GOLDEN / 'bench.parquet'))} bench points")


def _differences(new: pd.DataFrame, old: pd.DataFrame) -> str:
    """Columns gained or lost, and the largest relative change of each column both have."""
    if len(new) != len(old):
        return f"{len(new)} rows vs {len(old)}"
    worst = [f"lost {c}" for c in old.columns if c not in new.columns]
    worst += [f"gained {c}" for c in new.columns if c not in old.columns]
    for col in [c for c in new.columns if c in old.columns]:
        a, b = new[col], old[col]
        if a.equals(b):
            continue
        if pd.api.types.is_numeric_dtype(a) and pd.api.types.is_numeric_dtype(b):
            x, y = a.to_numpy(float), b.to_numpy(float)
            both = np.isfinite(x) & np.isfinite(y)
            nan_same = (np.isnan(x) == np.isnan(y)).all()
            rel = np.max(np.abs(x[both] - y[both]) / np.maximum(np.abs(y[both]), 1e-300), initial=0.0)
            worst.append(f"{col} {rel:.2e}" + ("" if nan_same else " (NaN pattern)"))
        else:
            worst.append(f"{col} (text)")
    return ", ".join(worst)


def _content(path: Path):
    """A written table's content: a CSV's bytes; a Parquet file's Arrow table without its metadata (pandas
    writes its own version there)."""
    if path.suffix != ".parquet":
        return path.read_bytes()
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(path).replace_schema_metadata(None).combine_chunks()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def compare(new: dict[str, pd.DataFrame], golden: Path) -> dict[str, tuple[bool, str]]:
    """Per table: (identical to the bit as written, what differs)."""
    report = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, df in new.items():
            path = _written(name, df, Path(tmp))
            old = golden / name
            same = _content(path) == _content(old)
            read = pd.read_parquet if path.suffix == ".parquet" else pd.read_csv
            report[name] = (same, "" if same else _differences(read(path), read(old)))
    return report


def same_numerics(kind: dict) -> bool:
    """Whether this machine computes as ``kind`` did: any x86-64 processor (the golden set is the same to
    the bit on an AVX-512 Xeon, an AVX-512 Zen 4 and an AVX2-only Zen 3: docs/testing.md) with the same
    numpy and scipy."""
    from adsl.provenance import computes_alike

    here = machine()
    return here["machine"] == "x86_64" and computes_alike(here, kind, vector_extensions=False)


def machines() -> list[dict]:
    """The kinds of machine known to give the golden set to the bit: the one that recorded it, and those a
    full ``check --add-machine`` found identical since (numpy's kernels follow the vector extensions, so
    two processor models with the same extensions can agree)."""
    return json.loads((GOLDEN / "machine.json").read_text())


def _write_machines(kinds: list[dict]) -> None:
    (GOLDEN / "machine.json").write_text(json.dumps(kinds, indent=1, sort_keys=True) + "\n")


def check(only: str | None = None, add_machine: bool = False) -> dict[str, tuple[bool, str]]:
    """Recompute and compare; per table (identical to the bit, what differs)."""
    report = {}
    bench = bench_rows()
    old = pd.read_parquet(GOLDEN / "bench.parquet")
    same = bench.equals(old)
    report["bench.parquet"] = (same, "" if same else _differences(bench, old))
    if only != "bench":
        report.update(compare(stage_tables(GOLDEN / "results"), GOLDEN / "results"))
    for name, (same, diff) in report.items():
        print(f"{'same' if same else 'DIFFERS':8s} {name} {diff}")
    if add_machine and only is None and all(same for same, _ in report.values()) and machine() not in machines():
        _write_machines([*machines(), machine()])
        print("this kind of machine gives the golden set to the bit: added to machine.json")
    return report


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("record")
    r.add_argument("--results", type=Path, required=True, help="a workflow run's results/ folder")
    c = sub.add_parser("check")
    c.add_argument("--only", choices=["bench"])
    c.add_argument("--add-machine", action="store_true", help="if every table is identical, list this machine")
    args = p.parse_args(argv)
    if args.command == "record":
        record(args.results.resolve())
    else:
        check(args.only, args.add_machine)


if __name__ == "__main__":
    main()
