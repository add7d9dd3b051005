"""The assumption ledger, the waterfall's steps and the reproduction table (``adsl.paper.ledger``,
``adsl.paper.reproduction``), on made-up rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from adsl.paper.ledger import BASELINES, default_value, headlines
from adsl.paper.mode import read_paper_mode
from adsl.paper.reproduction import paper_path, reproduction_table
from adsl.paper.training import read_training


@pytest.fixture(scope="module")
def mode(root):
    return read_paper_mode(root / "config" / "paper.yaml", root)


def _rows(gain: dict[str, float]) -> pd.DataFrame:
    """Main-experiment rows of two pairs and two batches: each system at ``gain[system]`` x GPU-AD."""
    rows = []
    for pair in ("P", "Q"):
        for batch, base in ((16, 100.0), (64, 300.0)):
            for system, g in gain.items():
                rows.append(dict(pair=pair, batch=batch, system=system, throughput_tok_s=base * g, tokens_per_j=g))
    return pd.DataFrame(rows)


def test_headlines_are_the_papers_average_gains_of_saddle_over_each_baseline():
    gain = {"GPU-AD": 1.0, "GPU-SD": 1.5, "PIM-AD": 2.0, "PIM-SD": 2.5, "SADDLE": 5.0}
    h = headlines(_rows(gain))
    for base in BASELINES:
        assert h[f"throughput/{base}"] == pytest.approx(5.0 / gain[base])
        assert h[f"energy_efficiency/{base}"] == pytest.approx(5.0 / gain[base])


def test_with_every_item_switched_back_the_configuration_is_the_default(mode, ws):
    values = {c.name: c.from_unit(0.3) for c in mode.constants}
    names = {c.name for c in mode.choices} | {c.name for c in mode.constants}
    back = mode.overrides(values, without=names)
    assert back.simulation == {} and back.hardware == {} and back.tau_scale == 1.0
    full = mode.overrides(values, without=set())
    assert full == mode.overrides(values)
    assert default_value(ws, "hardware.pim_stacks.HBM3-PIM.call_fixed_s") == 1.5e-6
    assert default_value(ws, "tau.scale") == 1.0


def test_reproduction_rows_hold_both_modes_and_the_paper_value_for_training_points_only(tmp_path, training_file):
    targets = tuple(t for t in read_training(training_file) if t.figure == "fig12")
    systems = ["GPU-AD", "GPU-SD", "PIM-AD", "PIM-SD", "SADDLE"]
    rows = []
    for batch in (16, 32, 64, 128):
        for i, s in enumerate(systems):
            rows.append(
                dict(
                    experiment="main",
                    system=s,
                    batch=batch,
                    draft_length=8 if "SD" in s or s == "SADDLE" else 0,
                    throughput_tok_s=100.0 * (1 + i),
                    tokens_per_j=1.0,
                    time_s=1.0,
                    window_tokens=1.0,
                    stage_verify_s=0.5,
                    stage_draft_s=0.5,
                )
            )
    default = pd.DataFrame(rows)
    paper = default.assign(throughput_tok_s=default.throughput_tok_s * np.where(default.system == "SADDLE", 2.0, 1.0))
    table = pd.DataFrame(dict(pair=["P"], batch=[16], system=["SADDLE"], normalized=[2.0]))
    table.to_csv(tmp_path / "d.csv", index=False)
    table.assign(normalized=4.0).to_csv(tmp_path / "p.csv", index=False)
    out = reproduction_table(
        {"fig12": str(tmp_path / "d.csv")}, {"fig12": str(tmp_path / "p.csv")}, targets, default, paper
    )
    train = out[out.kind == "training"]
    assert len(train) == len(targets) and train.paper.notna().all()
    saddle = train[train.point.str.contains("SADDLE")]
    assert np.allclose(saddle.paper_mode / saddle.default, 2.0)
    assert np.allclose(train.log_ratio_paper_mode, np.log(train.paper_mode / train.paper))
    fig = out[out.kind == "figure"]
    assert fig.paper.isna().all()  # test-set figures carry no paper value
    assert fig.set_index("quantity").loc["normalized", ["default", "paper_mode"]].tolist() == [2.0, 4.0]
    assert paper_path("results/simulation/fig12.csv") == "results/paper/simulation/fig12.csv"
    assert paper_path("data/paper_headlines.csv") == "data/paper_headlines.csv"
