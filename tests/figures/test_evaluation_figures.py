"""The evaluation tables (Figs. 12-19, area, paper comparison) on a small simulated experiment."""

import numpy as np
import pandas as pd
import pytest

from adsl.figures import compute_table, render
from adsl.fitting.distributions import fit_confidence
from adsl.fitting.modelfile import write_model
from adsl.sim.experiment import ci95, ratio_ci95, run_experiment


@pytest.fixture(scope="module")
def experiments(ws, tmp_path_factory):
    """Small versions of the configured experiments on a synthetic acceptance model."""
    tmp = tmp_path_factory.mktemp("exp")
    rng = np.random.default_rng(0)
    conf = fit_confidence(np.concatenate([rng.beta(8, 1, 2000), rng.beta(2, 2, 600)]))
    cats = ws.settings.simulation.categories
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
    exps = {
        "main": {"batches": [16, 64]},
        "ablation": {"batches": [16, 64]},
        "scheduler": {},
        "small_batch": {"batches": [2]},
        "small_batch_light": {"batches": [2]},
    }
    small = ws.with_overrides(
        simulation={"replicas": 1, "max_seq_len": 160, "max_seq_len_by_pair": {"OPT-175B": 160}, "experiments": exps}
    )
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
    # each ratio's interval from the replicas paired with PIM-SD's at the same batch
    raw = pd.read_parquet(exp["ablation"]).set_index(["system", "batch"]).throughput_replicas
    for r in f14.itertuples():
        want = ratio_ci95(raw[(r.system, r.batch)], raw[("PIM-SD", r.batch)], r.normalized)
        assert r.normalized_ci95 == want or (np.isnan(want) and np.isnan(r.normalized_ci95))
    f16 = compute_table("fig16", ws, experiment=str(exp["ablation"]))
    for _key, g in f16.groupby(["batch", "system"]):
        parts = g.set_index("component").time_s
        # the components add up to the end-to-end time (overlap counted negative)
        assert parts.sum() == pytest.approx(g.total_s.iloc[0], rel=1e-9)
        # drafting hidden under verification counts negative (PIM-SD overlaps its micro-batches too)
        assert parts["overlap"] <= 0.0
    # both systems' bars are the time to emit the same tokens: PIM-SD's window's, SADDLE's scaled to it
    raw = pd.read_parquet(exp["ablation"]).set_index(["system", "batch"])
    for b, g in f16.groupby("batch"):
        assert g.tokens.nunique() == 1 and g.tokens.iloc[0] == raw.loc[("PIM-SD", b), "window_tokens"]
        saddle = g[g.system == "SADDLE"].total_s.iloc[0]
        per_token = raw.loc[("SADDLE", b), "time_s"] / raw.loc[("SADDLE", b), "window_tokens"]
        assert saddle == pytest.approx(per_token * g.tokens.iloc[0], rel=1e-12)
    f19 = compute_table("fig19", ws, experiment=str(exp["scheduler"]))
    assert set(f19.scheduler) == {"static", "dynamic"}
    assert np.allclose(f19[f19.scheduler == "static"].speedup_vs_static, 1.0)
    plotted = render("fig14_ablation", ws, table=f14, pdf=tmp_path / "f.pdf")
    assert plotted.equals(f14)


def test_paper_comparison_uses_the_papers_averaging(ws, tmp_path):
    """Hand-computed: mean over the points of SADDLE / GPU-AD over the same mean for the baseline (the
    paper's averaging), which differs here from the ratio of mean raw values."""
    tput = {"GPU-AD": (100, 200), "GPU-SD": (150, 300), "PIM-AD": (200, 300), "PIM-SD": (100, 400)}
    tput["SADDLE"] = (300, 400)
    tpj = {"GPU-AD": (1, 4), "GPU-SD": (2, 2), "PIM-AD": (1, 8), "PIM-SD": (3, 2), "SADDLE": (3, 4)}
    rows = [
        dict(pair="OPT-66B", batch=b, system=s, throughput_tok_s=float(tput[s][i]), tokens_per_j=float(tpj[s][i]))
        for s in tput
        for i, b in enumerate((16, 32))
    ]
    path = tmp_path / "main.parquet"
    pd.DataFrame(rows).to_parquet(path)
    df = compute_table("paper_comparison", ws, experiment=str(path), headlines=str(ws.path("data/paper_headlines.csv")))
    # SADDLE / GPU-AD: throughput (3, 2) -> 2.5, energy (3, 1) -> 2
    expected = {
        ("throughput", "GPU-AD"): 2.5,
        ("throughput", "GPU-SD"): 2.5 / 1.5,  # (1.5, 1.5); the ratio of raw means would be 350 / 225
        ("throughput", "PIM-AD"): 2.5 / 1.75,  # (2, 1.5)
        ("throughput", "PIM-SD"): 2.5 / 1.5,  # (1, 2)
        ("energy_efficiency", "GPU-AD"): 2.0,
        ("energy_efficiency", "GPU-SD"): 2.0 / 1.25,  # (2, 0.5)
        ("energy_efficiency", "PIM-AD"): 2.0 / 1.5,  # (1, 2)
        ("energy_efficiency", "PIM-SD"): 2.0 / 1.75,  # (3, 0.5)
    }
    paper = {("throughput", "GPU-AD"): 3.36, ("throughput", "GPU-SD"): 2.88, ("throughput", "PIM-AD"): 1.94}
    paper |= {("throughput", "PIM-SD"): 1.71, ("energy_efficiency", "GPU-AD"): 6.81}
    paper |= {("energy_efficiency", "GPU-SD"): 5.96, ("energy_efficiency", "PIM-AD"): 2.32}
    paper |= {("energy_efficiency", "PIM-SD"): 1.45}
    assert len(df) == len(expected)
    for _, row in df.iterrows():
        key = (row.metric, row.baseline)
        assert row.ours == pytest.approx(expected[key], rel=1e-12), key
        assert row.paper == paper[key]
        assert row.ratio_ours_to_paper == pytest.approx(expected[key] / paper[key], rel=1e-12), key
        assert row.points == 2
    headlines = pd.read_csv(ws.path("data/paper_headlines.csv"))
    assert df.source.tolist() == headlines.source.tolist()


def test_paper_comparison_gives_the_gains_interval_over_the_replicas(ws, tmp_path):
    """Each replica alone gives a gain (replica 1: SADDLE / GPU-AD (3, 2) over PIM-SD / GPU-AD (1, 2) = 2.5 / 1.5;
    replica 2: (2, 2) over (1, 2) = 2 / 1.5); the interval is Student t over those two, t(0.975, 1) x |5/3 - 4/3|
    / 2; normalised to PIM-AD instead, 17 / 11 and 14 / 11. Tokens/J: SADDLE (2, 1) over everyone's 1, so the
    gain over every baseline is 2 then 1. Without a metric's per-replica column the interval is NaN."""
    from adsl.figures.breakdown import paper_gain_ci95

    reps = {"GPU-AD": ([100, 100], [200, 200]), "SADDLE": ([300, 200], [400, 400]), "PIM-SD": ([100, 100], [400, 400])}
    reps |= {"GPU-SD": ([150, 150], [300, 300]), "PIM-AD": ([200, 200], [300, 300])}
    rows = [
        dict(
            pair="OPT-66B",
            batch=b,
            system=s,
            throughput_tok_s=float(np.mean(v[i])),
            throughput_replicas=[float(x) for x in v[i]],
            tokens_per_j=1.5 if s == "SADDLE" else 1.0,
            tokens_per_j_replicas=[2.0, 1.0] if s == "SADDLE" else [1.0, 1.0],
        )
        for s, v in reps.items()
        for i, b in enumerate((16, 32))
    ]
    path = tmp_path / "main.parquet"
    pd.DataFrame(rows).to_parquet(path)
    df = compute_table("paper_comparison", ws, experiment=str(path), headlines=str(ws.path("data/paper_headlines.csv")))
    got = df.set_index(["metric", "baseline"]).ours_ci95
    assert got[("throughput", "PIM-SD")] == pytest.approx(12.706204736174694 * (5 / 3 - 4 / 3) / 2, rel=1e-12)
    assert got[("throughput", "GPU-AD")] == pytest.approx(12.706204736174694 * (2.5 - 2.0) / 2, rel=1e-12)
    assert got[[("throughput", "GPU-SD"), ("throughput", "PIM-AD")]].gt(0).all()
    t = 12.706204736174694
    assert all(got[("energy_efficiency", b)] == pytest.approx(t / 2, rel=1e-12) for b in ("GPU-AD", "PIM-SD"))
    wide = pd.read_parquet(path)
    by_pim_ad = paper_gain_ci95(wide, "throughput_replicas", "SADDLE", "PIM-SD", norm="PIM-AD")
    assert by_pim_ad == pytest.approx(t * (17 / 11 - 14 / 11) / 2, rel=1e-12)
    assert np.isnan(
        paper_gain_ci95(wide.drop(columns="throughput_replicas"), "throughput_replicas", "SADDLE", "GPU-AD")
    )


def test_paper_comparison_draws_our_interval_on_each_of_our_bars(ws):
    """One error bar per bar of ours, centred on it at its height and as long as its interval; none on the
    paper's bars."""
    import matplotlib.pyplot as plt
    from matplotlib.container import ErrorbarContainer

    from adsl.figures.breakdown import fig_paper_comparison

    rows = [
        dict(metric=m, baseline=b, ours=o + k, ours_ci95=0.01 * (k + 1) + e, paper=3.0 + k)
        for k, b in enumerate(("GPU-AD", "PIM-SD"))
        for m, o, e in (("throughput", 1.5, 0.0), ("energy_efficiency", 1.2, 0.05))
    ]
    df = pd.DataFrame(rows)
    fig, _ = fig_paper_comparison(ws, df)
    drawn = []
    for ax in fig.axes:
        ours = ax.containers[0]
        for c in (c for c in ax.containers if isinstance(c, ErrorbarContainer)):
            x, y = c.lines[0].get_xdata()[0], c.lines[0].get_ydata()[0]
            top = c.lines[2][0].get_segments()[0][1][1]
            assert any(abs(b.get_x() + b.get_width() / 2 - x) < 1e-9 and b.get_height() == y for b in ours)
            drawn.append((round(y, 9), round(top - y, 9)))
    plt.close(fig)
    assert sorted(drawn) == sorted((round(r["ours"], 9), round(r["ours_ci95"], 9)) for r in rows)


def test_the_attribution_gives_each_steps_gain_its_interval(ws, tmp_path):
    """Each step's gain over each baseline carries ``paper_gain_ci95`` of that step's table, and the figure
    draws it as an error bar at every step of every baseline's line."""
    import matplotlib.pyplot as plt
    from matplotlib.container import ErrorbarContainer

    from adsl.figures.attribution import fidelity_attribution
    from adsl.figures.breakdown import paper_gain_ci95

    rng = np.random.default_rng(3)
    steps = []
    for step in (0, 1):
        rows = []
        for s in ("GPU-AD", "GPU-SD", "PIM-AD", "PIM-SD", "SADDLE"):
            for b in (16, 32):
                tput, tpj = rng.uniform(100, 200, 4), rng.uniform(1, 2, 4)
                rows.append(
                    dict(
                        step=step,
                        pair="OPT-66B",
                        batch=b,
                        system=s,
                        throughput_tok_s=tput.mean(),
                        throughput_replicas=list(tput),
                        tokens_per_j=tpj.mean(),
                        tokens_per_j_replicas=list(tpj),
                    )
                )
        steps.append(tmp_path / f"step{step}.parquet")
        pd.DataFrame(rows).to_parquet(steps[-1])
    heads = str(ws.path("data/paper_headlines.csv"))
    df = compute_table("fidelity_attribution", ws, steps=[str(p) for p in steps], headlines=heads)
    assert len(df) == 2 * 2 * 4
    for r in df.itertuples():
        col = "throughput_replicas" if r.metric == "throughput" else "tokens_per_j_replicas"
        want = paper_gain_ci95(pd.read_parquet(steps[r.step]), col, "SADDLE", r.baseline)
        assert r.gain_ci95 == want > 0, (r.step, r.metric, r.baseline)
    fig, _ = fidelity_attribution(ws, df)
    bars = [[c for c in ax.containers if isinstance(c, ErrorbarContainer)] for ax in fig.axes]
    plt.close(fig)
    assert [len(b) for b in bars] == [4, 4] and all(len(c.lines[2][0].get_segments()) == 2 for b in bars for c in b)


def test_fig19_gives_the_schedulers_speedup_its_paired_interval(ws, tmp_path):
    """SADDLE over SADDLE-s at each pair: the speedup and its interval from the replicas paired with the static
    placement's, none for the static placement over itself; one error bar per dynamic bar."""
    import matplotlib.pyplot as plt
    from matplotlib.container import ErrorbarContainer

    from adsl.figures.evaluation import fig19_scheduler

    reps = {("A", "SADDLE-s"): [100.0, 110.0, 90.0], ("A", "SADDLE"): [120.0, 125.0, 110.0]}
    reps |= {("B", "SADDLE-s"): [200.0, 220.0, 210.0], ("B", "SADDLE"): [200.0, 230.0, 220.0]}
    rows = [
        dict(pair=p, system=s, throughput_tok_s=float(np.mean(v)), throughput_replicas=v, pim_util=0.5, gpu_util=0.5)
        | dict(throughput_ci95=ci95(np.array(v)), draft_fc_on_pim=0.0, target_attention_on_pim=1.0, class_fc_s=1.0)
        for (p, s), v in reps.items()
    ]
    pd.DataFrame(rows).to_parquet(tmp_path / "scheduler.parquet")
    df = compute_table("fig19", ws, experiment=str(tmp_path / "scheduler.parquet"))
    got = df.set_index(["pair", "system"])
    for p in ("A", "B"):
        r = got.loc[(p, "SADDLE"), "speedup_vs_static"]
        assert got.loc[(p, "SADDLE"), "speedup_ci95"] == ratio_ci95(reps[(p, "SADDLE")], reps[(p, "SADDLE-s")], r) > 0
        assert got.loc[(p, "SADDLE-s"), "speedup_ci95"] == 0.0
    fig, _ = fig19_scheduler(ws, df)
    errs = [c for c in fig.axes[1].containers if isinstance(c, ErrorbarContainer)]
    plt.close(fig)
    assert sorted(round(c.lines[2][0].get_segments()[0][1][1] - c.lines[0].get_ydata()[0], 9) for c in errs) == sorted(
        round(got.loc[(p, "SADDLE"), "speedup_ci95"], 9) for p in ("A", "B")
    )


def test_the_policy_gaps_give_each_mean_its_interval_over_the_replicas(ws, tmp_path):
    """Fixed d over the oracle at two points, per replica: replica 1 (50/100, 80/100) -> mean 0.65, replica 2
    (150/200, 60/100) -> 0.675; the interval is t(0.975, 1) x 0.025 / 2; the oracle over itself has none."""
    reps = {("fixed", 16): [50.0, 150.0], ("fixed", 32): [80.0, 60.0]}
    reps |= {("oracle", 16): [100.0, 200.0], ("oracle", 32): [100.0, 100.0]}
    rows = [
        dict(pair="p", system="SADDLE", batch=b, policy=k, throughput_tok_s=float(np.mean(v)), throughput_replicas=v)
        | dict(mean_draft_length=2.0)
        for (k, b), v in reps.items()
    ]
    pd.DataFrame(rows).to_parquet(tmp_path / "policies.parquet")
    df = compute_table("policy_gaps", ws, experiment=str(tmp_path / "policies.parquet")).set_index("policy")
    assert df.loc["fixed", "mean_vs_oracle"] == pytest.approx((100 / 150 + 70 / 100) / 2, rel=1e-12)
    assert df.loc["fixed", "mean_vs_oracle_ci95"] == pytest.approx(12.706204736174694 * 0.025 / 2, rel=1e-12)
    assert df.loc["oracle", "mean_vs_oracle_ci95"] == 0.0


def test_the_policy_gap_table_reads_every_column_off_the_points(ws, tmp_path):
    """Two systems x two batches x three policies, computed here point by point: each (system, policy) row in the
    policies' own order, its mean, min and max share of the oracle, its wins among the observable policies, its
    points, and its interval from the first replicas every row has (one row has a fourth); without the
    per-replica column the same rows with no interval."""
    from scipy import stats

    rng = np.random.default_rng(5)
    rows = []
    for system in ("SADDLE", "GPU-SD"):
        for batch in (16, 32):
            for policy in ("goodput", "oracle", "running_product"):
                v = list(rng.uniform(50, 150, 4 if (system, batch, policy) == ("SADDLE", 16, "goodput") else 3))
                rows.append(
                    dict(pair="p", system=system, batch=batch, policy=policy, throughput_tok_s=float(np.mean(v)))
                    | dict(throughput_replicas=v, mean_draft_length=2.0)
                )
    raw = pd.DataFrame(rows)
    raw.to_parquet(tmp_path / "policies.parquet")
    df = compute_table("policy_gaps", ws, experiment=str(tmp_path / "policies.parquet"))
    cols = ["system", "policy", "mean_vs_oracle", "mean_vs_oracle_ci95", "min_vs_oracle", "max_vs_oracle", "wins"]
    assert list(df.columns) == [*cols, "points"]
    order = [(s, p) for s in ("GPU-SD", "SADDLE") for p in ("running_product", "goodput", "oracle")]
    assert list(zip(df.system, df.policy, strict=True)) == order
    at = raw.set_index(["system", "batch", "policy"])
    t = stats.t.ppf(0.975, 2)
    for r in df.itertuples():
        ratio = [
            at.loc[(r.system, b, r.policy)].throughput_tok_s / at.loc[(r.system, b, "oracle")].throughput_tok_s
            for b in (16, 32)
        ]
        assert (r.mean_vs_oracle, r.min_vs_oracle, r.max_vs_oracle, r.points) == (
            np.mean(ratio),
            min(ratio),
            max(ratio),
            2,
        )
        best = [at.loc[r.system].loc[b].drop("oracle").throughput_tok_s.idxmax() for b in (16, 32)]
        assert r.wins == best.count(r.policy) and isinstance(r.wins, int | np.integer)
        each = [
            np.mean(
                [
                    at.loc[(r.system, b, r.policy)].throughput_replicas[i]
                    / at.loc[(r.system, b, "oracle")].throughput_replicas[i]
                    for b in (16, 32)
                ]
            )
            for i in range(3)
        ]
        assert r.mean_vs_oracle_ci95 == pytest.approx(t * np.std(each, ddof=1) / np.sqrt(3), rel=1e-9, abs=1e-15)
    table = compute_table("policies", ws, experiment=str(tmp_path / "policies.parquet"))
    keep = ["pair", "system", "batch", "policy", "throughput_tok_s", "oracle_tok_s", "vs_oracle", "mean_draft_length"]
    assert list(table.columns) == [*keep, "best_observable"] and list(table.index) == list(range(12))
    raw.drop(columns="throughput_replicas").to_parquet(tmp_path / "plain.parquet")
    plain = compute_table("policy_gaps", ws, experiment=str(tmp_path / "plain.parquet"))
    assert plain.drop(columns="mean_vs_oracle_ci95").equals(df.drop(columns="mean_vs_oracle_ci95"))
    assert plain.mean_vs_oracle_ci95.isna().all() and list(plain.columns) == list(df.columns)
    assert plain.mean_vs_oracle_ci95.dtype == np.float64  # a number column, as with the replicas


def test_paper_comparison_names_what_is_missing(ws, tmp_path):
    from adsl.figures.breakdown import paper_average_gain

    rows = pd.DataFrame(
        {"pair": "p", "batch": 1, "system": ["GPU-AD", "SADDLE"], "throughput_tok_s": [1.0, 2.0], "tokens_per_j": 1.0}
    )
    with pytest.raises(ValueError, match=r"paper average: no throughput_tok_s rows for \['PIM-SD'\]"):
        paper_average_gain(rows, "throughput_tok_s", "SADDLE", "PIM-SD")
    path, heads = tmp_path / "main.parquet", tmp_path / "heads.csv"
    rows.to_parquet(path)
    pd.DataFrame({"source": ["s"], "metric": ["latency"], "baseline": ["GPU-AD"], "paper_value": [2.0]}).to_csv(
        heads, index=False
    )
    with pytest.raises(ValueError, match=r"metric 'latency' unknown; known: \['energy_efficiency', 'throughput'\]"):
        compute_table("paper_comparison", ws, experiment=str(path), headlines=str(heads))


def test_fig15b_shows_saddle_with_tau_lowered_under_light_load(experiments):
    """Fig. 15b's sixth series: SADDLE from experiment small_batch_light (tau x 0.5 with at most 8
    requests in flight), normalised to the same GPU-AD; its drafts are longer than SADDLE's."""
    ws, exp = experiments
    df = compute_table("fig15b", ws, experiment=str(exp["small_batch"]), light=str(exp["small_batch_light"]))
    light = df[df.system == "SADDLE, tau x 0.5 at light load"]
    assert len(light) == 1 and (light.tau_factor == 0.5).all()
    assert (df[df.system != "SADDLE, tau x 0.5 at light load"].tau_factor == 1.0).all()
    ad = df[df.system == "GPU-AD"].throughput_tok_s.iloc[0]
    np.testing.assert_allclose(light.normalized, light.throughput_tok_s / ad)
    plain, lowered = (pd.read_parquet(exp[n]) for n in ("small_batch", "small_batch_light"))
    saddle = plain[plain.system == "SADDLE"]
    assert lowered.mean_draft_length.iloc[0] > saddle.mean_draft_length.iloc[0]
    # each bar's 95 % interval over GPU-AD's throughput, which has none (no acceptance streams; here one
    # replica, so every interval is NaN, as the table says)
    np.testing.assert_allclose(df.normalized_ci95, df.throughput_ci95 / ad)


def test_fig15b_draws_an_interval_on_every_bar_that_has_one(ws):
    """One error bar per bar with an interval, centred on its bar at its height; none on the AD systems."""
    import matplotlib.pyplot as plt
    from matplotlib.container import BarContainer, ErrorbarContainer

    from adsl.figures.evaluation import fig15b_small_batch

    rows = [
        dict(batch=b, system=s, normalized=v * b, normalized_ci95=e * b)
        for b in (1, 2)
        for s, v, e in (("GPU-AD", 1.0, 0.0), ("PIM-SD", 5.0, 0.2), ("SADDLE", 3.0, 0.1))
    ]
    fig, _ = fig15b_small_batch(ws, pd.DataFrame(rows))
    ax = fig.axes[0]
    bars = [c for c in ax.containers if isinstance(c, BarContainer)]
    errs = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    plt.close(fig)
    centres = {round(b.get_x() + b.get_width() / 2, 9) for c in bars for b in c}
    drawn = sorted((c.lines[0].get_ydata()[0], c.lines[2][0].get_segments()[0][1][1]) for c in errs)
    assert drawn == sorted(
        (r["normalized"], r["normalized"] + r["normalized_ci95"]) for r in rows if r["normalized_ci95"]
    )
    assert all(round(c.lines[0].get_xdata()[0], 9) in centres for c in errs)


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


def test_serving_sweep_rises_to_saturation_and_draws(experiments, tmp_path):
    """The open-loop table on the synthetic model: every run and load present, throughput rising with
    the offered rate, p99 above p50, and the figure drawn from it."""
    ws, _ = experiments
    model_dir = tmp_path / "OPT-66B"
    model_dir.mkdir()
    conf = fit_confidence(np.random.default_rng(1).beta(6, 1.5, 3000))
    models = []
    for c in ws.settings.simulation.categories:
        models.append(str(model_dir / f"{c}.json"))
        write_model(
            {"pair": "OPT-66B", "category": c, "confidence": conf, "joint": {"a": -0.3, "b": 0.9, "s": 0.6, "g": 0.5}},
            models[-1],
        )
    tau = tmp_path / "tau.csv"
    pd.DataFrame({"pair": "OPT-66B", "category": list(ws.settings.simulation.categories), "tau": 0.3}).to_csv(
        tau, index=False
    )
    small = ws.with_overrides(
        simulation={
            "open_loop": {
                "systems": ["GPU-AD", "SADDLE"],
                "policies": ["fixed"],
                "slots": 8,
                "requests": 60,
                "warmup": 5,
                "loads": [0.3, 1.0],
                "prompt_len": {"median": 40, "sigma": 0.3},
                "output_len": {"median": 40, "sigma": 0.5, "min": 8},
            }
        }
    )
    df = compute_table("serving", small, models=models, tau=str(tau))
    assert list(dict.fromkeys(df.label)) == ["GPU-AD", "SADDLE", "SADDLE (fixed)"]
    for _, run in df.groupby("label"):
        assert list(run.load) == [0.3, 1.0]
        assert run.achieved_tok_s.is_monotonic_increasing
        np.testing.assert_allclose(run.rate_req_s, run.load * run.capacity_req_s)
    assert (df.tpot_p99_s >= df.tpot_p50_s).all() and (df.ttft_p50_s > 0).all() and (df.completed > 0).all()
    files = {ext: tmp_path / f"s.{ext}" for ext in ("pdf", "png", "csv")}
    plotted = render("serving_latency_throughput", small, table=df, **files)
    assert set(plotted.label) == set(df.label) and files["png"].stat().st_size > 10_000


def _fig16_rows(overlap: float) -> pd.DataFrame:
    parts = {"verification": 0.7, "prediction": 0.2, "prefill": 0.1, "overlap": overlap}
    return pd.DataFrame(
        [
            dict(batch=b, system=s, component=c, normalized=v)
            for b in (16, 64)
            for s in ("PIM-SD", "SADDLE")
            for c, v in parts.items()
        ]
    )


def _legend(fig) -> list[str]:
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
    return [t.get_text() for leg in legends for t in leg.get_texts()]


@pytest.mark.parametrize("overlap", [0.0, -0.05])
def test_fig16s_legend_lists_the_parts_some_bar_has(ws, overlap):
    """A part that is zero in every bar (overlap, with exclusive stacks) leaves the legend, and the figure says
    it is zero; where some bar hides time, the hatched part is listed."""
    import matplotlib.pyplot as plt

    from adsl.figures.breakdown import fig16_latency_breakdown

    fig, _ = fig16_latency_breakdown(ws, _fig16_rows(overlap))
    texts = [t.get_text() for t in fig.axes[0].texts]
    plt.close(fig)
    assert _legend(fig) == ["verification", "prediction", "prefill", *(["overlap"] if overlap else [])]
    assert any("overlap: 0" in t for t in texts) == (overlap == 0)


def test_the_timelines_legend_lists_the_kinds_of_pass_it_shows(ws):
    import matplotlib.pyplot as plt

    from adsl.figures.timeline import timeline

    df = pd.DataFrame(
        dict(
            system=["PIM-SD", "PIM-SD", "SADDLE"],
            configuration="c",
            device=["GPU", "PIM", "PIM"],
            kind=["verification", "drafting", "verification"],
            start_ms=[0.0, 1.0, 0.0],
            end_ms=[1.0, 2.0, 1.5],
        )
    )
    fig, _ = timeline(ws, df)
    plt.close(fig)
    assert _legend(fig) == ["drafting", "verification"]  # in the kinds' own order, no prefill or eager drafting


def test_a_normalised_interval_is_given_only_over_a_base_without_one():
    """``normalized_ci95`` is a system's half-width over the base's value where the base decodes the same in
    every replica (interval 0), and NaN where the base's own value is uncertain (its ratio's interval would
    need the replicas' ratios)."""
    from adsl.figures.evaluation import _normalized

    df = pd.DataFrame(
        dict(
            batch=[16, 16, 64, 64],
            system=["GPU-AD", "SADDLE", "GPU-AD", "SADDLE"],
            throughput_tok_s=[100.0, 250.0, 400.0, 600.0],
            throughput_ci95=[0.0, 5.0, 8.0, 12.0],
        )
    )
    out = _normalized(df, "throughput_tok_s", "GPU-AD", ["batch"], "throughput_ci95").set_index(["batch", "system"])
    assert out.loc[(16, "SADDLE"), "normalized"] == 2.5 and out.loc[(16, "SADDLE"), "normalized_ci95"] == 0.05
    assert out.loc[(16, "GPU-AD"), "normalized_ci95"] == 0.0
    assert out.loc[[(64, "GPU-AD"), (64, "SADDLE")], "normalized_ci95"].isna().all()
    assert "normalized_ci95" not in _normalized(df, "throughput_tok_s", "GPU-AD", ["batch"])


def test_fig14_table_gives_each_ratio_its_paired_interval(ws, tmp_path):
    """Fig. 14's table over PIM-SD from an ablation table with three replicas a point: the ratio, its
    interval from the paired replicas, none for PIM-SD over itself; nothing else in the table."""
    reps = {("PIM-SD", 16): [90.0, 110.0, 100.0], ("SADDLE", 16): [240.0, 270.0, 240.0]}
    reps |= {("PIM-SD", 32): [200.0, 220.0, 210.0], ("SADDLE", 32): [200.0, 240.0, 220.0]}
    rows = [
        dict(batch=b, system=s, throughput_tok_s=float(np.mean(v)), throughput_ci95=1.0, throughput_replicas=v)
        for (s, b), v in reps.items()
    ]
    pd.DataFrame(rows).to_parquet(tmp_path / "ablation.parquet")
    df = compute_table("fig14", ws, experiment=str(tmp_path / "ablation.parquet"))
    cols = ["batch", "system", "throughput_tok_s", "throughput_ci95", "normalized", "normalized_ci95"]
    assert list(df.columns) == cols and list(df.index) == [0, 1, 2, 3]
    got = df.set_index(["system", "batch"]).normalized_ci95
    assert got[("SADDLE", 16)] == ratio_ci95(reps[("SADDLE", 16)], reps[("PIM-SD", 16)], 2.5) > 0
    assert got[("SADDLE", 32)] == ratio_ci95(reps[("SADDLE", 32)], reps[("PIM-SD", 32)], 220.0 / 210.0) > 0
    assert got[("PIM-SD", 16)] == got[("PIM-SD", 32)] == 0.0


def test_a_normalised_interval_over_an_uncertain_base_comes_from_the_paired_replicas():
    """Over a base with an interval of its own the replicas' paired throughputs give the ratio's interval
    (``ratio_ci95``); over a base without one it stays the system's half-width over the base's value; the base
    over itself has none; with no replicas column it stays NaN."""
    from adsl.figures.evaluation import _normalized
    from adsl.sim.experiment import ratio_ci95

    reps = [[90.0, 110.0, 100.0], [240.0, 270.0, 240.0], [100.0] * 3, [240.0, 260.0, 250.0], [1.0, 2.0]]
    df = pd.DataFrame(
        dict(
            batch=[16, 16, 64, 64, 32],  # no base at batch 32
            system=["PIM-SD", "SADDLE", "PIM-SD", "SADDLE", "SADDLE"],
            throughput_tok_s=[100.0, 250.0, 100.0, 250.0, 1.5],
            throughput_ci95=[24.8, 42.9, 0.0, 24.8, 6.4],
            throughput_replicas=reps,
        )
    )
    out = _normalized(df, "throughput_tok_s", "PIM-SD", ["batch"], "throughput_ci95", "throughput_replicas")
    out = out.set_index(["batch", "system"]).normalized_ci95
    assert out[(16, "SADDLE")] == ratio_ci95(reps[1], reps[0], 2.5) and 0 < out[(16, "SADDLE")] < 42.9 / 100
    assert out[(16, "PIM-SD")] == 0.0
    assert out[(64, "SADDLE")] == 24.8 / 100 and out[(64, "PIM-SD")] == 0.0
    assert np.isnan(out[(32, "SADDLE")])
    plain = _normalized(df, "throughput_tok_s", "PIM-SD", ["batch"], "throughput_ci95")
    assert plain.set_index(["batch", "system"]).normalized_ci95[[(16, "SADDLE"), (16, "PIM-SD")]].isna().all()


def test_fig18_labels_each_bar_with_its_utilisation_an_idle_device_too(ws):
    """Every bar carries its value to two decimals, so a device at 0 (no bar to see) still reads 0.00; the x axis
    names what it lists."""
    import matplotlib.pyplot as plt

    from adsl.figures.evaluation import fig18_utilization

    rows = [
        dict(pair=p, system=s, device=d, utilization=u)
        for p in ("OPT-66B", "Llama3.1-70B")
        for s, g, m in (
            ("PIM-AD", 0.55, 0.04),
            ("PIM-SD", 0.77, 0.0 if p == "Llama3.1-70B" else 0.08),
            ("SADDLE", 0.5, 0.2),
        )
        for d, u in (("GPU", g), ("PIM", m))
    ]
    fig, _ = fig18_utilization(ws, pd.DataFrame(rows))
    labels = {ax.get_title(): sorted(t.get_text() for t in ax.texts) for ax in fig.axes}
    xlabels = {ax.get_xlabel() for ax in fig.axes}
    plt.close(fig)
    assert labels["pair = OPT-66B"] == sorted(["0.55", "0.77", "0.50", "0.04", "0.08", "0.20"])
    assert labels["pair = Llama3.1-70B"] == sorted(["0.55", "0.77", "0.50", "0.04", "0.00", "0.20"])
    assert xlabels == {"System"}
