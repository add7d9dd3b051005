"""End-to-end profiling on tiny models: resumable runner, trace tables, Fig. 4 tables."""

import pandas as pd
import pytest

from tests.profiling.conftest import perturbed, tiny_llama

torch = pytest.importorskip("torch")
from adsl.profiling.loop import CausalLM  # noqa: E402
from adsl.profiling.run import build_plan, run_profile  # noqa: E402
from adsl.profiling.traces import read_profile  # noqa: E402
from adsl.settings import ProfilingRun as RunSpec  # noqa: E402


class CharTokenizer:
    """Maps characters to ids of the tiny vocabulary; no chat template."""

    eos_token_id = 1
    pad_token_id = 2
    chat_template = None

    def __call__(self, text):
        return {"input_ids": [0] + [3 + (ord(c) % 45) for c in text[:20]]}


@pytest.fixture(scope="module")
def tiny_pair():
    target = tiny_llama(0)
    return CausalLM(perturbed(target, 0.3, 1)), CausalLM(target), CharTokenizer()


def prompts():
    return pd.DataFrame(
        dict(
            dataset="spec_bench",
            category=["summarization", "summarization", "qa", "writing"],
            question_id=["1", "2", "3", "4"],
            turns=[["Summarise this"], ["Another text"], ["Who wrote it?"], ["A poem please"]],
            paper_category=["summarization", "summarization", "open_qa", "creative_writing"],
        )
    )


def plan():
    runs = [
        RunSpec("greedy", 4, 24, 24, 1.0, True, {"summarization": 2, "qa": 1, "writing": 1}),
        RunSpec("sample", 4, 16, 16, 1.0, False, {"qa": 1}),
    ]
    return build_plan(prompts(), runs)


def test_resume_gives_the_same_tables(tiny_pair, tmp_path):
    p = plan()
    full = run_profile(p, "d", "t", tmp_path / "full", tmp_path / "ck_full", models=tiny_pair, progress=False)
    # interrupted: only the first two requests, then resume the rest
    run_profile(p.iloc[:2], "d", "t", tmp_path / "part", tmp_path / "ck_part", models=tiny_pair, progress=False)
    resumed = run_profile(p, "d", "t", tmp_path / "part", tmp_path / "ck_part", models=tiny_pair, progress=False)
    for name in full:
        a, b = full[name], resumed[name]
        if name == "requests":
            a, b = a.drop(columns="wall_time_s"), b.drop(columns="wall_time_s")
        pd.testing.assert_frame_equal(a, b)
    prof = read_profile(tmp_path / "full")
    assert set(prof.requests["mode"]) == {"greedy", "sample"}
    assert (prof.requests.generated_len >= prof.requests.request_id.map(lambda i: 24 if i < 4 else 16)).all()
    assert prof.positions.request_id.nunique() == 4  # teacher-forced only for the greedy run


def test_fig04_tables_from_a_profile(tiny_pair, tmp_path, ws):
    from adsl.figures import render

    run_profile(plan(), "d", "t", tmp_path / "prof", tmp_path / "ck", models=tiny_pair, progress=False)
    paper = ws.path(ws.settings.anchors_dir) / "paper_fig04a.csv"
    a = render("fig04a_acceptance_rate", ws, pdf=tmp_path / "a.pdf", profile=str(tmp_path / "prof"), paper=paper)
    assert set(a.draft_length) == {4, 8, 12}
    assert a.acceptance_rate.between(0, 1).all()
    assert a.paper_acceptance_rate.notna().any()
    b = render("fig04b_accepted_per_iteration", ws, pdf=tmp_path / "b.pdf", profile=str(tmp_path / "prof"))
    assert b.accepted.between(0, 4).all() and b.iteration.min() == 1


def test_resume_from_a_committed_partial_profile(tiny_pair, tmp_path):
    from adsl.profiling.run import snapshot

    p = plan()
    full = run_profile(p, "d", "t", tmp_path / "full", tmp_path / "ck_full", models=tiny_pair, progress=False)
    run_profile(p.iloc[:3], "d", "t", tmp_path / "part", tmp_path / "ck_a", models=tiny_pair, progress=False)
    assert snapshot(tmp_path / "ck_a", tmp_path / "partial") == 3
    # another machine: no checkpoints, only the committed partial profile
    resumed = run_profile(
        p, "d", "t", tmp_path / "b", tmp_path / "ck_b", models=tiny_pair, progress=False, seed_from=tmp_path / "partial"
    )
    for name in full:
        a, b = full[name], resumed[name]
        if name == "requests":
            a, b = a.drop(columns="wall_time_s"), b.drop(columns="wall_time_s")
        pd.testing.assert_frame_equal(a.reset_index(drop=True), b.reset_index(drop=True), check_dtype=False)


def test_a_checkpoint_of_another_prompt_is_refused(tiny_pair, tmp_path):
    from adsl.profiling.traces import TraceError

    p = plan()
    run_profile(p, "d", "t", tmp_path / "a", tmp_path / "ck", models=tiny_pair, progress=False)
    # the first run edited to one summarization prompt: request 1 is now the qa prompt
    moved = p.drop(index=1).assign(request_id=range(len(p) - 1))
    with pytest.raises(TraceError, match=r"1/manifest\.json: checkpoint of request 1 has question_id"):
        run_profile(moved, "d", "t", tmp_path / "b", tmp_path / "ck", models=tiny_pair, progress=False)
    assert not (tmp_path / "b").exists()


def test_a_later_run_extends_a_category_without_renumbering(tiny_pair, tmp_path):
    base = RunSpec("greedy", 4, 24, 24, 1.0, True, {"summarization": 1})
    more = RunSpec("greedy", 4, 24, 24, 1.0, True, {"summarization": 1}, skip={"summarization": 1})
    first = build_plan(prompts(), [base])
    extended = build_plan(prompts(), [base, more])
    assert extended.iloc[: len(first)].question_id.tolist() == first.question_id.tolist()
    assert extended.question_id.iloc[-1] not in set(first.question_id)
    run_profile(first, "d", "t", tmp_path / "a", tmp_path / "ck", models=tiny_pair, progress=False)
    tables = run_profile(extended, "d", "t", tmp_path / "b", tmp_path / "ck", models=tiny_pair, progress=False)
    assert tables["requests"].question_id.tolist() == extended.question_id.astype(str).tolist()
