import pytest
import yaml

from adsl.errors import ConfigError
from adsl.perf.hardware import load_hardware
from adsl.perf.models import load_models


def test_paper_models_match_table_i_and_cards(models):
    opt66 = models.model("OPT-66B")
    assert (opt66.d_model, opt66.layers, opt66.heads, opt66.ffn_dim) == (9216, 64, 72, 4 * 9216)
    llama70 = models.model("Llama-3.1-70B")
    assert (llama70.kv_heads, llama70.ffn_dim, llama70.vocab, llama70.gated_ffn) == (8, 28672, 128256, True)
    # Model cards: OPT-66B has 66B parameters, Llama-3.1-70B 70.6B (with the input embedding).
    assert opt66.params / 1e9 == pytest.approx(66.0, rel=0.01)
    assert (llama70.params + llama70.vocab * llama70.d_model) / 1e9 == pytest.approx(70.6, rel=0.01)
    assert models.model("Llama-2-7B").params / 1e9 == pytest.approx(6.6, rel=0.02)
    assert models.model("GPT-3-175B").params / 1e9 == pytest.approx(175, rel=0.01)


def test_gqa_shrinks_kv_cache(models):
    m = models.model("Llama-3.1-70B")
    assert m.gqa_group == 8
    assert m.kv_bytes_per_token == 2 * 80 * 8 * 128 * 2


def test_pairs_resolve(models):
    pair = models.pair("OPT-175B")
    assert (pair.target.name, pair.draft.name) == ("OPT-175B", "OPT-6.7B")
    with pytest.raises(KeyError, match="unknown pair"):
        models.pair("nope")


def test_pim_stack_numbers(hw):
    pim = hw.pims["HBM3-PIM"]
    assert pim.internal_bw_bytes_s == pytest.approx(670.4e9 * 9)
    assert pim.pe_flops == pytest.approx(pim.internal_bw_bytes_s)  # 1 FLOP per internal byte
    unlimited = pim.__class__(**{**pim.__dict__, "power_limited": False})
    assert unlimited.internal_bw_bytes_s == pytest.approx(670.4e9 * 16)


def test_systems(hw):
    saddle = hw.system("saddle")
    assert saddle.gpus == 8 and saddle.stacks == 40
    assert saddle.weight_bw_bytes_s == pytest.approx(5 * 670.4e9)
    assert saddle.memory_capacity_bytes == pytest.approx(40 * 16 * 2**30)
    assert hw.system("attacc-pim").stacks == 40
    assert hw.system("dgx-a100").pim is None
    assert hw.system("motivation-4gpu").gpus == 4


def _write(tmp_path, name, data):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def test_negative_bandwidth_names_file_and_field(root, tmp_path):
    raw = yaml.safe_load((root / "config" / "hardware.yaml").read_text())
    raw["gpus"]["A100-80GB-SXM"]["mem_bw_bytes_s"] = -1.0
    path = _write(tmp_path, "hw.yaml", raw)
    with pytest.raises(ConfigError) as err:
        load_hardware(path)
    msg = str(err.value)
    assert str(path) in msg and "gpus.A100-80GB-SXM.mem_bw_bytes_s" in msg and "> 0" in msg


def test_string_where_number_belongs(root, tmp_path):
    raw = yaml.safe_load((root / "config" / "models.yaml").read_text())
    raw["models"]["OPT-66B"]["layers"] = "sixty-four"
    with pytest.raises(ConfigError, match=r"models\.OPT-66B\.layers.*integer"):
        load_models(_write(tmp_path, "m.yaml", raw))


def test_pair_with_unknown_model(root, tmp_path):
    raw = yaml.safe_load((root / "config" / "models.yaml").read_text())
    raw["pairs"]["OPT-66B"]["draft"] = "OPT-1.4B"
    with pytest.raises(ConfigError, match=r"pairs\.OPT-66B\.draft: unknown model 'OPT-1.4B'"):
        load_models(_write(tmp_path, "m.yaml", raw))


def test_system_with_unknown_gpu_and_bad_layout(root, tmp_path):
    raw = yaml.safe_load((root / "config" / "hardware.yaml").read_text())
    raw["systems"]["saddle"]["gpu"] = "B200"
    with pytest.raises(ConfigError, match=r"systems\.saddle\.gpu: unknown name 'B200'"):
        load_hardware(_write(tmp_path, "hw.yaml", raw))
    raw = yaml.safe_load((root / "config" / "hardware.yaml").read_text())
    raw["systems"]["dgx-a100"]["tensor_parallel"] = 3
    with pytest.raises(ConfigError, match=r"systems\.dgx-a100\.gpus"):
        load_hardware(_write(tmp_path, "hw.yaml", raw))


def test_missing_file():
    with pytest.raises(ConfigError, match="file not found"):
        load_models("/nonexistent/models.yaml")
