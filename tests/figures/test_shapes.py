"""The shape decomposition (``adsl.figures.shapes``): per-token terms from an experiment row, hand-computed."""

import dataclasses

import pandas as pd
import pytest

from adsl.figures.shapes import shape_decomposition_table


def _row(system, batch, tput, **kw):
    base = dict(
        pair="OPT-66B",
        system=system,
        batch=batch,
        throughput_tok_s=tput,
        window_tokens=1000.0,
        iterations=50.0,
        micro_batches=1.0,
        mean_draft_length=float("nan"),
        time_s=2.0,
        class_fc_s=1.0,
        class_attention_s=0.25,
        class_softmax_s=0.05,
        class_allreduce_s=0.5,
        class_norm_s=0.1,
        class_act_s=0.1,
        stage_verify_s=1.5,
        stage_draft_s=0.0,
        stage_overlap_s=0.0,
        stage_prefill_s=0.1,
    )
    return base | kw


def test_per_token_terms_gains_and_the_papers_values(ws, tmp_path):
    main = pd.DataFrame(
        [
            _row("GPU-AD", 16, 100.0),
            _row("GPU-AD", 128, 400.0),
            _row("SADDLE", 16, 250.0, mean_draft_length=2.0, stage_draft_s=0.5, stage_overlap_s=0.2),
            _row("SADDLE", 128, 600.0, mean_draft_length=2.0, micro_batches=2.0),
            _row("PIM-SD", 16, 300.0),  # not a system of the shape: left out
        ]
    )
    fig03a = pd.DataFrame([_row("AD", 8, 10.0, micro_batches=5.0), _row("AD", 128, 50.0), _row("SD", 8, 40.0)])
    paths = {n: tmp_path / f"{n}.parquet" for n in ("main", "fig03a")}
    main.to_parquet(paths["main"])
    fig03a.to_parquet(paths["fig03a"])
    paper = tmp_path / "paper.csv"
    paper.write_text("figure,pair,system,baseline,batch,paper_value,source\nfig12,OPT-66B,SADDLE,GPU-AD,128,3.7,x\n")
    sim = dataclasses.replace(ws.settings.simulation, attribution=())
    ws = dataclasses.replace(ws, settings=dataclasses.replace(ws.settings, simulation=sim))
    df = shape_decomposition_table(ws, str(paths["main"]), str(paths["fig03a"]), [], str(paper))
    assert len(df) == 7 and set(df.figure) == {"fig12", "fig03a"}
    s16 = df[(df.system == "SADDLE") & (df.batch == 16)].iloc[0]
    assert s16.gain == pytest.approx(2.5)
    assert s16.wall_us == pytest.approx(2000.0)  # 2 s over 1000 tokens
    assert (s16.fc_us, s16.attention_us, s16.allreduce_us, s16.other_ops_us) == pytest.approx((1000, 300, 500, 200))
    assert s16.exposed_drafting_us == pytest.approx(300.0)  # 0.5 s drafting, 0.2 s of it hidden
    assert s16.idle_us == pytest.approx(2000.0 - 1500.0 - 300.0 - 100.0)
    assert s16.tokens_per_iteration == pytest.approx(1000 / (50 * 16))
    assert s16.drafted_per_iteration == 2.0
    s128 = df[(df.system == "SADDLE") & (df.batch == 128)].iloc[0]
    assert s128.tokens_per_iteration == pytest.approx(1000 * 2 / (50 * 128))  # per round of its micro-batch
    assert s128.paper_value == 3.7 and df.paper_value.notna().sum() == 1 and s128.paper_ratio == "gain"
    assert s128.vs_first_batch_of_baseline == pytest.approx(6.0)
    ad = df[df.system == "AD"].set_index("batch")
    assert ad.loc[128, "vs_first_batch_of_baseline"] == pytest.approx(5.0)
    assert ad.loc[8, "tokens_per_iteration"] == pytest.approx(1000 * 5 / (50 * 8))
    assert ad.loc[8, "exposed_drafting_us"] == 0.0
