import dataclasses

import pytest

from adsl.config import load_config
from adsl.errors import ConfigError
from adsl.workspace import load_workspace


def test_defaults_are_filled():
    cfg = load_config({})
    assert cfg["seed"] == 0
    assert cfg["roofline"]["points"] == [{"batch": 4, "draft_length": 1}, {"batch": 12, "draft_length": 8}]
    assert cfg["catalogues"]["hardware"] == "config/hardware.yaml"


@pytest.mark.parametrize(
    ("cfg", "field", "allowed"),
    [
        ({"roofline": {"points": [{"batch": 0, "draft_length": 2}]}}, "roofline.points.0.batch", ">= 1"),
        ({"roofline": {"context_len": "long"}}, "roofline.context_len", "integer"),
        ({"seed": -3}, "seed", ">= 0"),
        ({"roofline": {"colour": "red"}}, "roofline", "Additional properties"),
        (
            {"profiling": {"runs": [{"mode": "greedy", "d_max": 8, "max_new_tokens": 4, "prompts": {"qa": -1}}]}},
            "profiling.runs.0.prompts.qa",
            ">= 1",
        ),
        ({"simulation": {"open_loop": {"loads": [0.5, 0]}}}, "simulation.open_loop.loads.1", "> 0"),
        ({"simulation": {"open_loop": {"output_len": {"median": 9}}}}, "simulation.open_loop.output_len", "sigma"),
        (
            {"profiling": {"runs": [{"mode": "greedy", "d_max": 8, "max_new_tokens": 4, "prompts": {"qa": "most"}}]}},
            "profiling.runs.0.prompts.qa",
            "'all'",
        ),
    ],
)
def test_invalid_values_name_the_field(cfg, field, allowed):
    with pytest.raises(ConfigError) as err:
        load_config(cfg, "my.yaml")
    msg = str(err.value)
    assert msg.startswith(f"my.yaml: {field}:"), msg
    assert allowed in msg


def test_unknown_names_are_caught_before_work(root):
    with pytest.raises(ConfigError, match=r"roofline\.pair: unknown pair 'OPT-67B'"):
        load_workspace({"roofline": {"pair": "OPT-67B"}}, base=root)
    with pytest.raises(ConfigError, match=r"roofline\.system: system 'dgx-a100' has no PIM"):
        load_workspace({"roofline": {"system": "dgx-a100"}}, base=root)
    with pytest.raises(ConfigError, match=r"simulation\.open_loop\.pair: 'OPT-67B' has no acceptance model"):
        load_workspace({"simulation": {"open_loop": {"pair": "OPT-67B"}}}, base=root)
    with pytest.raises(ConfigError, match=r"simulation\.open_loop\.policy_system: unknown system 'TPU'"):
        load_workspace({"simulation": {"open_loop": {"policy_system": "TPU"}}}, base=root)


def test_the_shipped_config_is_valid(ws):
    assert ws.settings.roofline.system == "saddle"


def test_overrides_read_no_file_once_loaded_and_change_no_source(ws, monkeypatch):
    """A loaded workspace lays overrides from the schemas and hardware file it read when loaded (a sweep lays
    one set a configuration): the same settings and catalogue as reading them again, no file read, and the
    sources it keeps unchanged; a bad value is still refused, naming the field."""
    import copy

    import adsl.config
    import adsl.perf.hardware

    sim, hw = {"replicas": 3, "systems": {"pool_tokens": 1024}}, {"pim_stacks": {"HBM3-PIM": {"queries_per_pass": 4}}}
    fresh = dataclasses.replace(ws, sources=None).with_overrides(sim, hw)
    kept = copy.deepcopy(ws.sources)

    def no_read(path):
        raise AssertionError(f"read {path}")

    monkeypatch.setattr(adsl.config, "read_yaml", no_read)
    monkeypatch.setattr(adsl.perf.hardware, "read_yaml", no_read)
    got = ws.with_overrides(sim, hw)
    assert got.settings == fresh.settings and got.hardware == fresh.hardware
    assert got.settings.simulation.replicas == 3 and got.hardware.pims["HBM3-PIM"].queries_per_pass == 4
    assert ws.sources == kept and got.sources is ws.sources
    with pytest.raises(ConfigError, match="queries_per_pass"):
        ws.with_overrides(None, {"pim_stacks": {"HBM3-PIM": {"queries_per_pass": 0}}})
    with pytest.raises(ConfigError, match="replicas"):
        ws.with_overrides({"replicas": 0})


def test_only_a_pair_calibrated_to_published_rates_counts_as_fitted():
    """``calibrate_pair`` runs these first (the long calibration that tau and ``same_as`` pairs wait for)."""
    from adsl.config import load_config
    from adsl.settings import PairDerivation

    pairs = load_config("config/config.yaml")["acceptance"]["pairs"]
    fitted = {name for name, how in pairs.items() if PairDerivation(**how).fitted}
    assert fitted == {"OPT-66B"}
    assert not PairDerivation(calibrate="none").fitted and not PairDerivation(same_as="OPT-66B").fitted
