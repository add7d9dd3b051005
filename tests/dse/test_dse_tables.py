"""The numbers behind the dse figures and the deployable draft-length table."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adsl.dse.schedule import counterpart, draft_length_table, schedules, write_schedules
from adsl.figures.dse import _front, pareto_table, winner_table
from tests.dse.helpers import ACCEPTANCE, sweep_workspace

SYSTEMS = ["GPU-AD", "GPU-SD", "PIM-AD", "PIM-SD", "SADDLE"]


def _points(tmp_path, rows):
    df = pd.DataFrame(
        rows,
        columns=[
            "configuration",
            "batch",
            "pim_stacks_per_gpu",
            "system",
            "throughput_tok_s",
            "tokens_per_j",
            "fits_memory",
        ],
    )
    path = tmp_path / "points.parquet"
    df.to_parquet(path)
    return str(path)


def test_the_winner_map_counts_winners_and_averages_gains_per_cell(tmp_path):
    ws = sweep_workspace(
        {
            "winner_axes": ["batch", "pim_stacks_per_gpu"],
            "axes": {"batch": {"values": [8, 64]}, "pim_stacks_per_gpu": {"values": [5]}},
        }
    )
    rows = []
    # batch 8: PIM-SD wins twice; batch 64: SADDLE wins once, and once PIM-SD wins because SADDLE does not fit
    tput = {
        0: (8, {"GPU-SD": 100, "PIM-SD": 400, "SADDLE": 200}, {}),
        1: (8, {"GPU-SD": 100, "PIM-SD": 300, "SADDLE": 150}, {}),
        2: (64, {"GPU-SD": 100, "PIM-SD": 300, "SADDLE": 600}, {}),
        3: (64, {"GPU-SD": 100, "PIM-SD": 300, "SADDLE": 900}, {"SADDLE": False}),
    }
    for c, (batch, t, fits) in tput.items():
        for s in SYSTEMS:
            rows.append((c, batch, 5, s, t.get(s, 50.0), 1.0, fits.get(s, True)))
    df = winner_table(ws, _points(tmp_path, rows))
    small, large = df.set_index("x").loc[8], df.set_index("x").loc[64]
    assert (small.winner, small.winner_share, small.wins_SADDLE) == ("PIM-SD", 1.0, 0.0)
    assert small.gain_vs_rival == pytest.approx(np.sqrt(0.5 * 0.5))
    assert small.gain_vs_gpu_sd == pytest.approx(np.sqrt(2.0 * 1.5))
    assert (large.wins_SADDLE, large["wins_PIM-SD"]) == (0.5, 0.5)
    assert large.gain_vs_rival == pytest.approx(2.0)  # the configuration SADDLE does not fit is left out
    assert int(large.configurations) == 2


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), min_size=1, max_size=25))
def test_the_pareto_front_is_exactly_the_undominated_points(points):
    a = np.array([p[0] for p in points], float)
    b = np.array([p[1] for p in points], float)
    on = _front(a, b)
    for i in range(a.size):
        dominated = any(a[j] >= a[i] and b[j] >= b[i] and (a[j] > a[i] or b[j] > b[i]) for j in range(a.size))
        duplicate_before = any(a[j] == a[i] and b[j] == b[i] and on[j] for j in range(a.size) if j != i)
        assert on[i] == (not dominated and not duplicate_before)


def test_the_pareto_table_marks_each_systems_front(tmp_path):
    rows = [
        (0, 8, 5, "SADDLE", 100, 3.0, True),
        (1, 8, 5, "SADDLE", 200, 2.0, True),
        (2, 8, 5, "SADDLE", 150, 1.0, True),
    ]
    rows += [(3, 8, 5, "SADDLE", 999, 9.0, False)]  # does not fit: not drawn
    cap = tmp_path / "capacity.csv"
    pd.DataFrame(
        {
            "configuration": [0, 1, 2],
            "system": "SADDLE",
            "capacity_req_s": [5.0, 4.0, 6.0],
            "cost_proxy": [10.0, 12.0, 12.0],
        }
    ).to_csv(cap)
    df = pareto_table(None, _points(tmp_path, rows), str(cap))
    energy = df[df.panel == "energy"].set_index("configuration")
    assert list(energy.front.loc[[0, 1, 2]]) == [True, True, False] and 3 not in energy.index
    capacity = df[df.panel == "capacity"].set_index("configuration")
    assert list(capacity.front.loc[[0, 1, 2]]) == [True, False, True]


def test_the_draft_length_table_picks_the_fastest_d_per_bucket(model_paths, taus, tmp_path):
    ws = sweep_workspace(
        {
            "simulation": {"replicas": 2, "batching": {"requests_per_slot": 3}},
            "draft_table": {
                "runs": [{"system": "PIM-SD", "pair": "OPT-66B"}],
                "batches": [2, 128],
                "seq_lens": [512],
                "draft_lengths": [1, 4],
            },
        }
    )
    df = draft_length_table(ws, list(model_paths["OPT-66B"].values()), str(ACCEPTANCE / "tau.csv"))
    assert list(df.batch) == [2, 128] and set(df.columns) >= {"tok_s_d0", "tok_s_d1", "tok_s_d4"}
    t = df[["tok_s_d0", "tok_s_d1", "tok_s_d4"]].to_numpy()
    assert list(df.best_d) == [[0, 1, 4][i] for i in t.argmax(axis=1)]
    assert (df.best_tok_s == t.max(axis=1)).all()
    # the configured d (8) was not simulated: no gain over it; the best single d is one of the lengths run
    assert df.gain_vs_configured.isna().all() and set(df.best_single_d) <= {1, 4}
    assert (df.gain_vs_best_single >= 1.0).all()
    # short drafts at batch 2 lose to longer ones; at batch 128 speculation is off or d = 1 (docs/dse.md)
    assert df.best_d.iloc[0] == 4 and df.best_d.iloc[1] in (0, 1)
    csv = tmp_path / "t.csv"
    df.to_csv(csv, index=False)
    write_schedules(str(csv), str(tmp_path / "s.json"))
    snippet = json.loads((tmp_path / "s.json").read_text())
    assert snippet == schedules(df)
    entry = snippet["PIM-SD / OPT-66B"]["seq_len 512"]
    assert entry["tensorrt_llm"]["draft_len_schedule"] == {"2": int(df.best_d.iloc[0]), "128": int(df.best_d.iloc[1])}
    assert entry["vllm"]["speculative_config"]["num_speculative_tokens"] == int(df.best_single_d.iloc[0])


def test_a_speculative_systems_counterpart_is_its_autoregressive_twin():
    assert (counterpart("GPU-SD"), counterpart("PIM-SD"), counterpart("SADDLE"), counterpart("GPU-AD")) == (
        "GPU-AD",
        "PIM-AD",
        None,
        None,
    )
