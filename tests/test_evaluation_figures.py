"""The evaluation tables (Figs. 12-19, area, paper comparison) on a small simulated experiment."""

import numpy as np
import pandas as pd
import pytest

from adsl.figures import compute_table, render
from adsl.fitting.distributions import fit_confidence
from adsl.fitting.modelfile import write_model
from adsl.sim.experiment import run_experiment


@pytest.fixture(scope="module")
def experiments(ws, tmp_path_factory):
    """Small versions of the configured experiments on a synthetic acceptance model."""
    tmp = tmp_path_factory.mktemp("exp")
    rng = np.random.default_rng(0)
    conf = fit_confidence(np.concatenate([rng.beta(8, 1, 2000), rng.beta(2, 2, 600)]))
    cats = ws.config["simulation"]["categories"]
    paths, taus = {}, {}
    for pair in ("OPT-66B", "Llama3.1-70B", "OPT-175B"):
        for c in cats:
            p = tmp / pair / f"{c}.json"
            p.parent.mkdir(exist_ok=True)
            write_model(
                {"pair": pair, "category": c, "confidence": conf, "joint": {"a": -0.3, "b": 0.9, "s": 0.6, "g": 0.5}}, p
            )
            paths.setdefault(pair, {})[c] = str(p)
        taus[pair] = dict.fromkeys(cats, 0.3)
    cfg = {**ws.config, "simulation": {**ws.config["simulation"], "replicas": 1, "max_seq_len": 160}}
    cfg["simulation"]["max_seq_len_by_pair"] = {"OPT-175B": 160}
    exps = cfg["simulation"]["experiments"] = {
        "main": {**ws.config["simulation"]["experiments"]["main"], "batches": [16, 64]},
        "ablation": {**ws.config["simulation"]["experiments"]["ablation"], "batches": [16, 64]},
        "scheduler": ws.config["simulation"]["experiments"]["scheduler"],
    }
    small = type(ws)(cfg, ws.models, ws.hardware, ws.base)
    out = {}
    for name in exps:
        out[name] = tmp / f"{name}.parquet"
        run_experiment(small, name, paths, taus).to_parquet(out[name])
    return small, out


def test_fig12_and_fig13_normalise_to_gpu_ad(experiments):
    ws, exp = experiments
    for table, metric in (("fig12", "throughput_tok_s"), ("fig13", "tokens_per_joule")):
        df = compute_table(table, ws, experiment=str(exp["main"]))
        assert {"pair", "batch", "system", metric, "normalized"} <= set(df.columns)
        assert set(df.system) == {"GPU-AD", "GPU-SD", "PIM-AD", "PIM-SD", "SADDLE"}
        assert np.allclose(df[df.system == "GPU-AD"].normalized, 1.0)
        one = df[(df.pair == "OPT-66B") & (df.batch == 16)].set_index("system")[metric]
        row = df[(df.pair == "OPT-66B") & (df.batch == 16) & (df.system == "SADDLE")].normalized.iloc[0]
        assert row == pytest.approx(one["SADDLE"] / one["GPU-AD"])


def test_ablation_breakdown_and_scheduler_tables(experiments, tmp_path):
    ws, exp = experiments
    f14 = compute_table("fig14", ws, experiment=str(exp["ablation"]))
    assert np.allclose(f14[f14.system == "PIM-SD"].normalized, 1.0)
    f16 = compute_table("fig16", ws, experiment=str(exp["ablation"]))
    for (_b, system), g in f16.groupby(["batch", "system"]):
        parts = g.set_index("component").time_s
        # the components add up to the end-to-end time (overlap counted negative)
        assert parts.sum() == pytest.approx(g.total_s.iloc[0], rel=1e-9)
        if system == "PIM-SD":
            assert parts["overlap"] == 0.0
    f19 = compute_table("fig19", ws, experiment=str(exp["scheduler"]))
    assert set(f19.scheduler) == {"static", "dynamic"}
    assert np.allclose(f19[f19.scheduler == "static"].speedup_vs_static, 1.0)
    plotted = render("fig14_ablation", ws, table=f14, pdf=tmp_path / "f.pdf")
    assert plotted.equals(f14)


def test_paper_comparison_is_a_ratio_of_means(experiments):
    ws, exp = experiments
    df = compute_table(
        "paper_comparison", ws, experiment=str(exp["main"]), headlines=str(ws.path("data/paper_headlines.csv"))
    )
    raw = pd.read_parquet(exp["main"])
    s = raw[raw.system == "SADDLE"].throughput_tok_s.mean()
    b = raw[raw.system == "PIM-SD"].throughput_tok_s.mean()
    row = df[(df.metric == "throughput") & (df.baseline == "PIM-SD")].iloc[0]
    assert row.ours == pytest.approx(s / b)
    assert row.paper == 1.71 and row.points == 6


def test_area_table_reproduces_section_iv(ws):
    df = compute_table("area", ws, components=str(ws.path("data/area_components.csv")))
    tot = df[df.component == "total"].set_index("die")
    assert tot.loc["DRAM die", "area_mm2"] == pytest.approx(16.256, abs=1e-3)  # the paper's 16.24 mm^2
    assert tot.loc["DRAM die", "share_of_die"] == pytest.approx(0.134, abs=1e-3)
    assert tot.loc["buffer die", "area_mm2"] == pytest.approx(1.62)


def test_fig17_components_cover_the_pass(ws):
    df = compute_table("fig17", ws)
    assert np.allclose(df.groupby("seq_len").share.sum(), 1.0)
    att = df[df.component == "attention"].set_index("seq_len").share
    assert att.is_monotonic_increasing  # attention grows with context; FC does not
