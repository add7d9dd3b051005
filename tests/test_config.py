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
