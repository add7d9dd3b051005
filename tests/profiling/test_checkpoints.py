"""Checkpoints are data only: planted pickles never run, tampered or corrupted checkpoints are not used."""

import json
import shutil
import warnings

import pandas as pd
import pytest

pytest.importorskip("torch")
from adsl.profiling.run import (  # noqa: E402
    MANIFEST,
    CheckpointWarning,
    identity,
    run_profile,
    snapshot,
    write_checkpoint,
)
from adsl.profiling.traces import TraceError, read_profile  # noqa: E402
from tests.profiling.test_run import CharTokenizer, plan  # noqa: E402


class Payload:
    """Unpickling this creates ``marker``: what a planted checkpoint could do if it were ever loaded."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def plant_pickle(path, marker):
    import pickle

    path.write_bytes(pickle.dumps(Payload(marker)))


@pytest.fixture(scope="module")
def tiny_pair():
    from adsl.profiling.loop import CausalLM
    from tests.profiling.conftest import perturbed, tiny_llama

    target = tiny_llama(0)
    return CausalLM(perturbed(target, 0.3, 1)), CausalLM(target), CharTokenizer()


@pytest.fixture(scope="module")
def small_plan():
    return plan().iloc[[0, 4]]  # one greedy teacher-forced request, one sampled


@pytest.fixture(scope="module")
def made(tiny_pair, small_plan, tmp_path_factory):
    """Checkpoints and profile of an uninterrupted run of the small plan, copied by each test."""
    base = tmp_path_factory.mktemp("made")
    tables = run_profile(small_plan, "d", "t", base / "prof", base / "ck", models=tiny_pair, progress=False)
    return base / "ck", tables


def profile(small_plan, tiny_pair, ckpt, out, **kw):
    return run_profile(small_plan, "d", "t", out, ckpt, models=tiny_pair, progress=False, **kw)


def same(a, b):
    for name in a:
        x, y = a[name], b[name]
        if name == "requests":
            x, y = x.drop(columns="wall_time_s"), y.drop(columns="wall_time_s")
        pd.testing.assert_frame_equal(x, y)


def copy(made, tmp_path):
    return shutil.copytree(made[0], tmp_path / "ck")


def test_layout_is_parquet_and_a_manifest(made):
    folder = made[0] / "4"
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [MANIFEST, "requests.parquet", "steps.parquet", "drafts.parquet", "positions.parquet"]
    )
    m = json.loads((folder / MANIFEST).read_text())
    assert m["request_id"] == 4 and m["plan_row"]["mode"] == "sample" and m["plan_row"]["draft"] == "d"
    assert set(m["plan_row"]) >= {"question_id", "prompt_sha256", "max_new_tokens", "teacher_forced", "seed"}


def test_a_planted_pickle_is_not_run_and_not_a_finished_request(made, small_plan, tiny_pair, tmp_path):
    ckpt = copy(made, tmp_path)
    shutil.rmtree(ckpt / "0")
    marker = tmp_path / "pwned"
    plant_pickle(ckpt / "0.pkl", marker)
    with pytest.warns(CheckpointWarning, match=r"0\.pkl: not read: pickle checkpoints .* cannot be loaded safely"):
        tables = profile(small_plan, tiny_pair, ckpt, tmp_path / "out")
    assert not marker.exists()
    assert (ckpt / "0" / MANIFEST).is_file()  # request 0 was profiled again
    same(made[1], tables)


def test_snapshot_ignores_planted_pickles(made, tmp_path):
    ckpt = copy(made, tmp_path)
    marker = tmp_path / "pwned"
    plant_pickle(ckpt / "0.pkl", marker)
    plant_pickle(ckpt / "7.pkl", marker)
    with pytest.warns(CheckpointWarning) as record:
        assert snapshot(ckpt, tmp_path / "partial") == 2
    planted = sorted(str(w.message).split(": not read")[0] for w in record)
    assert planted == [str(ckpt / "0.pkl"), str(ckpt / "7.pkl")]
    assert not marker.exists()
    assert sorted(read_profile(tmp_path / "partial").requests.request_id) == [0, 4]


@pytest.mark.parametrize("planted", [False, True])
def test_snapshot_with_no_valid_checkpoint_raises_and_writes_nothing(tmp_path, planted):
    ckpt = tmp_path / "ck"
    marker = tmp_path / "pwned"
    if planted:
        ckpt.mkdir()
        plant_pickle(ckpt / "3.pkl", marker)
        (ckpt / "5").mkdir()
        (ckpt / "5" / MANIFEST).write_text("{}")
    with warnings.catch_warnings(record=True), pytest.raises(TraceError, match="no valid checkpoints"):
        snapshot(ckpt, tmp_path / "out.partial")
    assert not (tmp_path / "out.partial").exists() and not marker.exists()


def rewrite(path, **changes):
    m = json.loads(path.read_text())
    m["plan_row"].update(changes)
    return m


def test_a_manifest_edited_without_its_hash_is_not_used(made, small_plan, tiny_pair, tmp_path):
    ckpt = copy(made, tmp_path)
    path = ckpt / "0" / MANIFEST
    path.write_text(json.dumps(rewrite(path, prompt_sha256="0" * 64)))
    with pytest.warns(CheckpointWarning, match="plan_row does not match settings_sha256"):
        tables = profile(small_plan, tiny_pair, ckpt, tmp_path / "out")
    same(made[1], tables)
    assert json.loads(path.read_text())["plan_row"]["prompt_sha256"] != "0" * 64  # rewritten by the rerun


def test_a_manifest_that_contradicts_its_tables_is_not_used(made, small_plan, tiny_pair, tmp_path):
    from adsl.profiling.run import _sha256_json

    ckpt = copy(made, tmp_path)
    path = ckpt / "0" / MANIFEST
    m = rewrite(path, target="x")
    m["settings_sha256"] = _sha256_json(m["plan_row"])
    path.write_text(json.dumps(m))
    with pytest.warns(CheckpointWarning, match="target_model contradicts the plan_row"):
        tables = profile(small_plan, tiny_pair, ckpt, tmp_path / "out")
    same(made[1], tables)
    assert json.loads(path.read_text())["plan_row"]["target"] == "t"


@pytest.mark.parametrize("field, value", [("prompt_sha256", "0" * 64), ("max_new_tokens", 99), ("min_new_tokens", 3)])
def test_a_checkpoint_made_for_another_plan_row_is_refused(made, small_plan, tiny_pair, tmp_path, field, value):
    from adsl.profiling.run import _sha256_json

    ckpt = copy(made, tmp_path)
    path = ckpt / "4" / MANIFEST
    m = rewrite(path, **{field: value})
    m["settings_sha256"] = _sha256_json(m["plan_row"])  # consistent in itself, but not the plan's row
    path.write_text(json.dumps(m))
    with pytest.raises(TraceError, match=rf"4/manifest\.json: checkpoint of request 4 has {field} = "):
        profile(small_plan, tiny_pair, ckpt, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("rehash", [False, True])
def test_a_corrupted_table_is_reprofiled(made, small_plan, tiny_pair, tmp_path, rehash):
    from adsl.profiling.run import _sha256_file

    ckpt = copy(made, tmp_path)
    table = ckpt / "0" / "steps.parquet"
    table.write_bytes(table.read_bytes()[:-40] + b"\0" * 40)
    why = "differs from the"
    if rehash:  # the manifest vouches for the damaged file: the Parquet reader still refuses it
        m = json.loads((ckpt / "0" / MANIFEST).read_text())
        m["tables"]["steps"] = _sha256_file(table)
        (ckpt / "0" / MANIFEST).write_text(json.dumps(m))
        why = "not a readable Parquet file"
    with pytest.warns(CheckpointWarning, match=why):
        tables = profile(small_plan, tiny_pair, ckpt, tmp_path / "out")
    same(made[1], tables)


def test_incomplete_or_misplaced_checkpoints_are_reprofiled(made, small_plan, tiny_pair, tmp_path):
    ckpt = copy(made, tmp_path)
    (ckpt / "0" / MANIFEST).unlink()  # the run stopped before the manifest was written
    shutil.rmtree(ckpt / "4")
    shutil.copytree(made[0] / "0", ckpt / "4")  # request 0's checkpoint under request 4's id
    with pytest.warns(CheckpointWarning) as record:
        tables = profile(small_plan, tiny_pair, ckpt, tmp_path / "out")
    messages = " | ".join(str(w.message) for w in record)
    assert "no manifest.json" in messages and "request_id 0, the folder is request 4" in messages
    same(made[1], tables)


def test_tables_of_another_request_are_not_used(made, small_plan, tiny_pair, tmp_path):
    ckpt = copy(made, tmp_path)
    row = next(small_plan.iloc[[1]].itertuples())
    other = read_profile(made[0] / "0")
    tables = {n: other.table(n) for n in ("requests", "steps", "drafts", "positions")}
    write_checkpoint(ckpt / "4", 4, tables, identity(row, "d", "t", seed=0))
    with pytest.warns(CheckpointWarning, match="rows of another request than 4"):
        out = profile(small_plan, tiny_pair, ckpt, tmp_path / "out")
    same(made[1], out)
