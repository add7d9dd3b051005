import numpy as np
import pandas as pd
import pytest

from adsl.profiling.traces import (
    FORMAT_VERSION,
    TABLES,
    TraceError,
    empty_tables,
    read_profile,
    write_profile,
    write_table,
)


def tiny_tables():
    t = empty_tables()
    t["requests"] = pd.DataFrame(
        [
            dict(
                request_id=0,
                dataset="spec_bench",
                category="open_qa",
                source_category="qa",
                question_id="1",
                mode="greedy",
                temperature=1.0,
                seed=7,
                d_max=2,
                draft_model="d",
                target_model="t",
                prompt_len=5,
                generated_len=3,
                wall_time_s=0.1,
                versions="{}",
            )
        ]
    )
    t["steps"] = pd.DataFrame(
        dict(request_id=[0, 0], step=[0, 1], context_len=[5, 7], drafted=[2, 2], accepted=[1, 0], emitted=[2, 1])
    )
    t["drafts"] = pd.DataFrame(
        dict(
            request_id=[0] * 4,
            step=[0, 0, 1, 1],
            pos=[1, 2, 1, 2],
            q_token=[0.9, 0.5, 0.4, 0.3],
            p_token=[0.95, 0.1, 0.2, 0.3],
            accept_prob=[1.0, 0.2, 0.5, 1.0],
            beta=[0.9, 0.5, 0.6, 0.7],
            draft_entropy=[0.3, 1.0, 1.2, 1.4],
            accepted=[True, False, False, False],
        )
    )
    t["positions"] = pd.DataFrame(
        dict(
            request_id=[0, 0, 0],
            pos=[0, 1, 2],
            match=[True, False, True],
            beta=[0.9, 0.5, 0.8],
            draft_top1=[0.9, 0.5, 0.7],
            draft_entropy=[0.3, 1.0, 0.6],
        )
    )
    return t


def test_round_trip(tmp_path):
    write_profile(tiny_tables(), tmp_path)
    prof = read_profile(tmp_path)
    assert len(prof.drafts) == 4 and prof.requests.loc[0, "category"] == "open_qa"
    import pyarrow.parquet as pq

    assert pq.read_schema(tmp_path / "steps.parquet").metadata[b"adsl_trace_format"].decode() == FORMAT_VERSION


@pytest.mark.parametrize(
    ("table", "column", "row", "value", "message"),
    [
        ("drafts", "q_token", 2, 1.5, "outside"),
        ("positions", "beta", 1, np.nan, "finite"),
        ("steps", "emitted", 1, 3, "inconsistent"),
    ],
)
def test_bad_values_name_file_column_row(tmp_path, table, column, row, value, message):
    t = tiny_tables()
    t[table].loc[row, column] = value
    with pytest.raises(TraceError) as err:
        write_profile(t, tmp_path)
    text = str(err.value)
    assert f"{table}.parquet" in text and repr(column if column != "emitted" else "accepted") in text
    assert f"row {row}" in text and message in text


def test_steps_must_match_drafts(tmp_path):
    """Refused when written as a profile; tables written one by one (as checkpoints are) are refused when
    read back as a profile."""
    t = tiny_tables()
    t["drafts"] = t["drafts"].iloc[:3]
    with pytest.raises(TraceError, match="does not match the drafted tokens"):
        write_profile(t, tmp_path)
    assert not list(tmp_path.iterdir())
    for name in TABLES:
        write_table(t[name], tmp_path / f"{name}.parquet", name)
    with pytest.raises(TraceError, match="does not match the drafted tokens"):
        read_profile(tmp_path)


def test_missing_table(tmp_path):
    write_profile(tiny_tables(), tmp_path)
    (tmp_path / "positions.parquet").unlink()
    with pytest.raises(TraceError, match="positions.parquet.*not found"):
        read_profile(tmp_path)
