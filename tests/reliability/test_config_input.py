"""Bad configuration and catalogue input is stopped before any work, naming file, field and allowed range."""

from pathlib import Path

import pytest

from adsl.config import load_config, read_yaml
from adsl.errors import AdslError, ConfigError
from adsl.sim.experiment import check_experiments
from adsl.sim.setup import SimError
from adsl.workspace import load_workspace

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "config" / "config.yaml"


def workspace(tmp_path, cfg: dict):
    """What the Snakefile does before any job: the config (and catalogues) validated, points checked."""
    ws = load_workspace(cfg, base=ROOT, file=str(tmp_path / "mine.yaml"))
    check_experiments(ws)
    return ws


def with_value(path: str, value) -> dict:
    cfg = read_yaml(CONFIG)
    *parents, leaf = path.split(".")
    node = cfg
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
    node[leaf] = value
    return cfg


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("seed: 1\nseed: 2\n", "lines 1 and 2"),
        ("simulation:\n  replicas: 2\n  prompt_len: 64\n  replicas: 3\n", "lines 2 and 4"),
        ("a: [{b: 1, b: 2}]\n", "lines 1 and 1"),
    ],
)
def test_a_key_given_twice_is_refused_with_file_and_lines(tmp_path, text, line):
    f = tmp_path / "dup.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=line) as err:
        read_yaml(f)
    assert str(f) in str(err.value) and "given twice" in str(err.value)


def test_a_merge_key_may_be_overridden(tmp_path):
    f = tmp_path / "merge.yaml"
    f.write_text("base: &b {x: 1, y: 2}\nmine:\n  <<: *b\n  y: 3\n")
    assert read_yaml(f)["mine"] == {"x": 1, "y": 3}


def test_a_catalogue_value_given_twice_is_refused(tmp_path):
    hw = (ROOT / "config" / "hardware.yaml").read_text()
    # the case: a second peak_flops in one GPU entry turned a 70 ms pass into 3,863 s
    anchor = "mem_bw_bytes_s: 2039.0e+9"
    assert anchor in hw
    (tmp_path / "hw.yaml").write_text(hw.replace(anchor, anchor + "\n    mem_bw_bytes_s: 3.12e+9", 1))
    cfg = with_value("catalogues.hardware", str(tmp_path / "hw.yaml"))
    with pytest.raises(ConfigError, match=r"hw\.yaml: mem_bw_bytes_s: key 'mem_bw_bytes_s' given twice"):
        workspace(tmp_path, cfg)


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        ("acceptance.tau.window", float("nan"), "acceptance.tau.window"),
        ("simulation.batching.warmup", float("inf"), "simulation.batching.warmup"),
        ("simulation.tau_light_load.factor", float("-inf"), "simulation.tau_light_load.factor"),
        ("roofline.points.0.batch", float("nan"), "roofline.points.0.batch"),
    ],
)
def test_nan_and_infinities_are_refused(tmp_path, path, value, field):
    with pytest.raises(ConfigError, match="is not a finite number") as err:
        workspace(tmp_path, with_value(path, value))
    assert err.value.field == field


@pytest.mark.parametrize(
    ("path", "value"),
    [("simulation.replicas", 1.0e308), ("simulation.replicas", 2.0), ("seed", 1.5), ("simulation.max_seq_len", 1e3)],
)
def test_integers_must_be_integers(tmp_path, path, value):
    with pytest.raises(ConfigError, match="is not of type 'integer'") as err:
        workspace(tmp_path, with_value(path, value))
    assert err.value.field == path


@pytest.mark.parametrize(
    ("path", "value", "allowed"),
    [
        ("simulation.replicas", 10**20, "<= 64"),
        ("simulation.max_seq_len", 10**20, "<= 131072"),
        ("simulation.experiments.main.batches", [16, 10**20], "<= 1024"),
        ("simulation.experiments.fig03b.draft_lengths", [65], "<= 64"),
        ("simulation.systems.pool_tokens", 10**9, "<= 65536"),
        ("acceptance.bootstrap", 10**6, "<= 1000"),
        ("acceptance.tau.streams", 10**7, "<= 50000"),
        ("seed", 2**40, "<= 4294967295"),
        ("profiling.threads", 10**4, "<= 256"),
    ],
)
def test_values_that_would_exhaust_memory_or_time_are_bounded(tmp_path, path, value, allowed):
    with pytest.raises(ConfigError, match=f"is greater than the maximum.*allowed: .*{allowed}"):
        workspace(tmp_path, with_value(path, value))


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("simulation.prompt_len", 1024, r"simulation\.prompt_len: 1024 must be below simulation\.max_seq_len \(1024\)"),
        ("simulation.prompt_len", 600, r"must be below simulation\.max_seq_len_by_pair\.OPT-175B \(512\)"),
        ("simulation.experiments.seqlen.seq_lens", [128, 1024], r"seqlen -> simulation.prompt_len: 128 must be below"),
    ],
)
def test_prompt_len_must_leave_room_for_output(tmp_path, path, value, message):
    """The simulator used to clamp the prompt silently to seq_len - 1."""
    with pytest.raises(ConfigError, match=message):
        workspace(tmp_path, with_value(path, value))


def test_an_override_may_not_move_prompt_len_past_the_sequence(tmp_path):
    cfg = with_value("simulation.experiments.ablation.overrides", {"prompt_len": 2000})
    with pytest.raises(ConfigError, match=r"experiments\.ablation\.overrides -> simulation\.prompt_len: 2000"):
        workspace(tmp_path, cfg)


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        ("simulation.systems.saddle-tpp", {"micro_batches": 2}, "simulation.systems.saddle-tpp"),
        ("simulation.max_seq_len_by_pair.OPT-176B", 512, "simulation.max_seq_len_by_pair.OPT-176B"),
        ("simulation.timeline.pair", "OPT-67B", "simulation.timeline.pair"),
        ("simulation.timeline.systems", ["PIM-SD", "SADDEL"], "simulation.timeline.systems"),
        ("acceptance.fig04c.pair", "Llama", "acceptance.fig04c.pair"),
        (
            "simulation.experiments.layout_pipeline.overrides",
            {"systems": {"sadle": {"micro_batches": 4}}},
            "simulation.experiments.layout_pipeline.overrides.systems.sadle",
        ),
        (
            "simulation.attribution.7.hardware",
            {"runtimes": {"atacc": {"allreduce_base_s": 1e-6}}},
            "simulation.attribution.7.hardware.runtimes.atacc",
        ),
        (
            "simulation.attribution.7.hardware",
            {"runtime": {"attacc": {"allreduce_base_s": 1e-6}}},
            "simulation.attribution.7.hardware.runtime",
        ),
        (  # an attribution step's experiments name registered systems, as the base experiments do
            "simulation.attribution.7.simulation.experiments",
            {"main": {**read_yaml(CONFIG)["simulation"]["experiments"]["main"], "systems": ["PIM-SD", "SADDEL"]}},
            "simulation.attribution.7.simulation.experiments.main.systems",
        ),
    ],
)
def test_map_keys_must_name_catalogue_entries(tmp_path, path, value, field):
    with pytest.raises(ConfigError) as err:
        workspace(tmp_path, with_value(path, value))
    assert err.value.field == field and "known" in err.value.reason


def test_an_attribution_steps_hardware_is_checked_before_its_job(tmp_path):
    cfg = with_value("simulation.attribution.7.hardware", {"runtimes": {"attacc": {"allreduce_base_s": -1.0}}})
    with pytest.raises(ConfigError, match=r"attribution\.7\.hardware -> runtimes\.attacc\.allreduce_base_s"):
        workspace(tmp_path, cfg)


@pytest.mark.parametrize("name", ["../../../outside", "a/b", ".hidden", "x..y", "", "-rf", "n" * 101])
def test_profile_names_are_folder_names(tmp_path, name):
    with pytest.raises(ConfigError, match="does not match") as err:
        workspace(tmp_path, with_value("profiling.name", name))
    assert err.value.field == "profiling.name"


def test_cross_field_rules(tmp_path):
    cfg = with_value("profiling.runs.0.min_new_tokens", 200)
    with pytest.raises(ConfigError, match=r"profiling\.runs\.0\.min_new_tokens: 200 exceeds max_new_tokens \(128\)"):
        workspace(tmp_path, cfg)
    with pytest.raises(ConfigError, match=r"open_loop\.warmup: 400 leaves no measured request"):
        workspace(tmp_path, with_value("simulation.open_loop.warmup", 400))


def test_a_batch_that_cannot_fit_stops_before_any_job(tmp_path):
    """The same check the experiment job runs (``point_setup``), run for every point up front."""
    cfg = with_value("simulation.experiments.small_batch.batches", [1, 1024])
    with pytest.raises(SimError, match=r"simulation\.experiments\.small_batch: .*batch 1024 x 1024 tokens needs"):
        workspace(tmp_path, cfg)
    cfg["simulation"]["experiments"]["small_batch"]["memory_check"] = "warn"
    workspace(tmp_path, cfg)  # flagged, run


def test_every_error_here_is_an_adsl_error():
    """So the Snakefile and the command line show the message alone."""
    assert issubclass(ConfigError, AdslError) and issubclass(SimError, AdslError)


def test_the_shipped_configuration_passes_every_new_rule(tmp_path):
    ws = workspace(tmp_path, load_config(CONFIG))
    assert ws.settings.profiling.on_mismatch == "warn"
