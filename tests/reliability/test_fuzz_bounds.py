"""Generated bad input of the four classes (sizes, contradictions, paths, files a user gives) over the
configuration, the catalogues, the design-space sweeps, the command line, the anchor tables and the model
files: each is refused before any work, within 5 s, with an ``AdslError`` (the command line: a non-zero exit
and no traceback), and no file outside the test's folder changes."""

import json
import time
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adsl.cli import main
from adsl.config import MAX_ITEMS, MAX_TEXT, MAX_VALUES, load_config, read_yaml
from adsl.dse.design import MAX_CONFIGURATIONS, MAX_JOBS
from adsl.errors import AdslError
from adsl.figures.validation import ANCHOR_TEXT, read_anchor
from adsl.fitting.modelfile import read_model
from adsl.perf.models import load_models
from adsl.workspace import load_workspace

ROOT = Path(__file__).resolve().parents[2]
CONFIG = read_yaml(ROOT / "config" / "config.yaml")
MODEL = json.loads((ROOT / "tests/sim/golden/results/acceptance/OPT-66B/open_qa.json").read_text())
ANCHORS = sorted((ROOT / "data" / "anchors").glob("*.csv"))
FUZZ = settings(max_examples=15, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
WATCHED = ("config", "data", "docs", "figures", "src", "workflow")


def leaves(node, path=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from leaves(v, (*path, k))
    elif isinstance(node, list):
        yield path, node
        for i, v in enumerate(node):
            yield from leaves(v, (*path, i))
    else:
        yield path, node


STRINGS = [p for p, v in leaves(CONFIG) if isinstance(v, str)]
LISTS = [p for p, v in leaves(CONFIG) if isinstance(v, list) and v]


def put(cfg: dict, path: tuple, value) -> dict:
    node = cfg
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return cfg


def fresh() -> dict:
    return json.loads(json.dumps(CONFIG))


@pytest.fixture(scope="module")
def untouched():
    """Every file under the project's folders, with size and modification time, before and after."""

    def snapshot():  # the project's own files (caches that tests beside these compile into aside)
        files = (p for d in WATCHED for p in (ROOT / d).rglob("*") if p.is_file())
        return {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in files if "__pycache__" not in p.parts}

    before = snapshot()
    yield
    assert snapshot() == before, "a refused input changed a file of the project"


def refused(call) -> str:
    t0 = time.monotonic()
    with pytest.raises(AdslError) as err:
        call()
    assert time.monotonic() - t0 < 5, f"refused only after {time.monotonic() - t0:.1f} s"
    return str(err.value)


# -- the configuration ------------------------------------------------------------------------------------
@FUZZ
@given(path=st.sampled_from(STRINGS), extra=st.integers(1, 5 * MAX_TEXT))
def test_an_oversized_string_anywhere_is_refused(untouched, path, extra):
    message = refused(lambda: load_workspace(put(fresh(), path, "s" * (MAX_TEXT + extra)), base=ROOT))
    assert len(message) < 1000


@FUZZ
@given(path=st.sampled_from(LISTS), extra=st.integers(1, MAX_ITEMS))
def test_an_oversized_list_anywhere_is_refused(untouched, path, extra):
    cfg = fresh()
    first = leaves_value(cfg, path)[0]
    message = refused(lambda: load_workspace(put(cfg, path, [first] * (MAX_ITEMS + extra)), base=ROOT))
    assert len(message) < 1000


def leaves_value(cfg, path):
    node = cfg
    for key in path:
        node = node[key]
    return node


@FUZZ
@given(width=st.integers(4, 16), levels=st.integers(4, 30), data=st.data())
def test_a_yaml_alias_bomb_of_any_shape_is_refused(untouched, tmp_path_factory, width, levels, data):
    if width**levels <= MAX_VALUES:
        levels = 1 + next(k for k in range(1, 64) if width**k > MAX_VALUES)
    lines = [f"l0: &l0 [{', '.join(['x'] * width)}]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, levels)]
    f = tmp_path_factory.mktemp("bomb") / "bomb.yaml"
    f.write_text("\n".join(lines) + "\n")
    assert "YAML aliases expanded" in refused(lambda: read_yaml(f))


@FUZZ
@given(experiment=st.sampled_from(sorted(CONFIG["simulation"]["experiments"])), pair=st.sampled_from(["OPT-66B"]))
def test_pair_and_pairs_together_are_refused(untouched, experiment, pair):
    cfg = fresh()
    cfg["simulation"]["experiments"][experiment].update(pair=pair, pairs=[pair])
    assert "both pair and pairs" in refused(lambda: load_config(cfg))


@FUZZ
@given(log_n=st.integers(1, 16), chunk=st.integers(1, 100_000))
def test_a_sweep_beyond_its_bounds_is_refused(untouched, log_n, chunk):
    cfg = fresh()
    sweep = cfg["dse"]["sweeps"]["default"]
    n = 2**log_n * (len(sweep["axes"]) + 2)
    if n <= MAX_CONFIGURATIONS and -(-n // chunk) <= MAX_JOBS:
        chunk = 1  # too many jobs then, or the sweep is legal
        if n <= MAX_JOBS:
            return
    sweep.update(base_points=2**log_n, chunk_points=chunk)
    assert "allowed: at most" in refused(lambda: load_workspace(cfg, base=ROOT))


# -- the catalogues -----------------------------------------------------------------------------------
MODELS_TEXT = (ROOT / "config" / "models.yaml").read_text()
CATALOGUE = read_yaml(ROOT / "config" / "models.yaml")


@FUZZ
@given(pair=st.sampled_from(sorted(CATALOGUE["pairs"])), bigger=st.sampled_from(sorted(CATALOGUE["models"])))
def test_a_draft_not_smaller_than_its_target_is_refused(untouched, tmp_path_factory, pair, bigger):
    import yaml

    models = load_models(ROOT / "config" / "models.yaml")
    target = models.pairs[pair].target
    if models.models[bigger].params < target.params:
        bigger = target.name  # the target drafting for itself
    cat = json.loads(json.dumps(CATALOGUE))
    cat["pairs"][pair]["draft"] = bigger
    f = tmp_path_factory.mktemp("cat") / "models.yaml"
    f.write_text(yaml.safe_dump(cat))
    assert "not smaller than its target" in refused(lambda: load_models(f))


# -- the command line ---------------------------------------------------------------------------------
@FUZZ
@given(
    args=st.one_of(
        st.tuples(st.just("figure"), st.just("fig06_roofline"), st.just("--outdir"), st.sampled_from(["", " ", "\t"])),
        st.tuples(st.just("table"), st.just("roofline_points"), st.just("-o"), st.sampled_from(["", ".", "/", "x/"])),
        st.tuples(
            st.just("cost"),
            st.just("--model=OPT-66B"),
            st.just("--system=dgx-a100"),
            st.sampled_from(["--batch", "--context", "--tokens"]),
            st.one_of(
                st.integers(max_value=0).map(str),
                st.integers(min_value=131_073).map(str),
                st.text(min_size=1, max_size=30).filter(lambda t: not t.strip().lstrip("+-").isdigit()),
            ),
        ),
    )
)
def test_bad_command_line_arguments_stop_with_one_line(untouched, capsys, args):
    t0 = time.monotonic()
    with pytest.raises(SystemExit) as exit_:
        main(["--config", str(ROOT / "config" / "config.yaml"), "--base", str(ROOT), *args])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Traceback" not in err and time.monotonic() - t0 < 5
    assert err.splitlines()[-1].startswith("adsl ")


# -- the files a user gives --------------------------------------------------------------------------
@FUZZ
@given(data=st.data(), text=st.text(min_size=1, max_size=40).filter(lambda t: pd.to_numeric(t, errors="coerce") != t))
def test_an_anchor_table_with_text_in_a_number_column_is_refused(untouched, tmp_path_factory, data, text):
    path = data.draw(st.sampled_from(ANCHORS))
    table = pd.read_csv(path)
    numbers = [c for c in table.columns if c not in ANCHOR_TEXT]
    column = data.draw(st.sampled_from(numbers))
    row = data.draw(st.integers(0, len(table) - 1))
    try:
        float(text)
    except ValueError:
        pass
    else:
        text = f"{text} units"  # a number with a unit is text here
    table[column] = table[column].astype(object)
    table.loc[row, column] = text
    f = tmp_path_factory.mktemp("anchors") / path.name
    table.to_csv(f, index=False)
    message = refused(lambda: read_anchor(f))
    assert str(f) in message and "is not a finite number" in message


RANGED = [
    ("calibration", "draft_continuation", -8.0, 8.0),
    ("calibration", "shift", -8.0, 8.0),
    ("calibration", "heterogeneity_scale", 0.0, 3.0),
    ("joint", "s", 0.0, None),
    ("calibration", "max_abs_error", 0.0, None),
]


@FUZZ
@given(rule=st.sampled_from(RANGED), beyond=st.floats(1e-6, 1e300))
def test_a_model_file_value_out_of_its_range_is_refused(untouched, tmp_path_factory, rule, beyond):
    section, field, lo, hi = rule
    model = json.loads(json.dumps(MODEL))
    model[section][field] = (hi + beyond) if hi is not None else (lo - beyond)
    f = tmp_path_factory.mktemp("model") / "m.json"
    f.write_text(json.dumps(model))
    assert f"{section}.{field} must be" in refused(lambda: read_model(f))
