import numpy as np
import pytest

from adsl.perf.cost import (
    allreduce_cost,
    check_mapping,
    default_mapping,
    gpu_op_cost,
    op_cost,
    pass_cost,
    pim_op_cost,
)
from adsl.perf.hardware import gpu_only_system
from adsl.perf.operators import Op, attention, decoder_ops
from adsl.perf.operators import gemm as gemm_op


def gemm(m, n=4096.0, k=4096.0):
    return gemm_op("g", np.asarray(float(m)), n, k, 2.0)


def test_gpu_roofline_regimes(hw):
    gpu, rt = hw.gpus["A100-80GB-SXM"], hw.runtimes["attacc"]
    t1, _ = gpu_op_cost(gemm(1), gpu, rt)
    assert t1 == pytest.approx(gemm(1).bytes / (gpu.mem_bw_bytes_s * gpu.eta_memory))
    big = gemm(16384)
    t2, _ = gpu_op_cost(big, gpu, rt)
    assert t2 == pytest.approx(big.flops / (gpu.peak_flops * gpu.eta_compute))


def test_energy_counts_bytes_and_flops(hw):
    gpu, rt = hw.gpus["A100-80GB-SXM"], hw.runtimes["attacc"]
    op = gemm(8)
    _, e = gpu_op_cost(op, gpu, rt)
    assert e == pytest.approx((op.bytes * 28.7 + op.flops * 0.16) * 1e-12)


def test_allreduce(hw):
    gpu, rt = hw.gpus["A100-80GB-SXM"], hw.runtimes["attacc"]
    op = Op("ar", "allreduce", np.asarray(1.0), 8192.0, 1.0, 1.0, np.asarray(16384.0), 0.0, 0.0, 1)
    assert allreduce_cost(op, gpu, rt, 1)[0] == 0.0
    t8, e8 = allreduce_cost(op, gpu, rt, 8)
    assert t8 == pytest.approx(7 * (6.06e-6 + 2 * 16384 / 8 / 300e9))
    assert e8 == pytest.approx(14 * 16384 * 10.4e-12)


def _attn(hw_pim, ctx, m=1.0, units=1.0):
    op = attention("attn_score", np.asarray(float(m)), np.asarray(float(ctx)), 128.0, np.asarray(units), 2.0)
    return pim_op_cost(op, hw_pim, 1)


def test_pim_kv_granularity(hw):
    pim = hw.pims["HBM3-PIM"]
    assert _attn(pim, 1)[0] == pytest.approx(_attn(pim, 16)[0])
    assert _attn(pim, 17)[0] > _attn(pim, 16)[0]


def test_pim_multi_query_verification(hw):
    pim = hw.pims["HBM3-PIM"]
    t1, _ = _attn(pim, 4096, m=1)
    t9, e9 = _attn(pim, 4096, m=9)
    # one query per pass: nine sweeps over K, and nine call overheads
    assert t9 == pytest.approx(9 * t1)
    regs = pim.__class__(**{**pim.__dict__, "queries_per_pass": 16})
    t9r, e9r = _attn(regs, 4096, m=9)
    # registers save re-reads (energy) but PEs matched to one query per byte still bound the time
    assert e9r < e9
    assert t9r <= t9
    assert t9r >= 9 * (t1 - pim.call_fixed_s)


def test_pim_heads_spread_over_stacks(hw):
    pim = hw.pims["HBM3-PIM"]
    op = attention("attn_score", np.asarray(1.0), np.asarray(1024.0), 128.0, np.asarray(10.0), 2.0)
    t5, _ = pim_op_cost(op, pim, 5)
    t10, _ = pim_op_cost(op, pim, 10)
    t4, _ = pim_op_cost(op, pim, 4)  # ceil(10 / 4) = 3 units on the busiest stack
    assert t5 > t10 and t4 == pytest.approx(pim.call_fixed_s + 1.5 * (t5 - pim.call_fixed_s))


def test_pass_cost_broadcasts_and_matches_scalar_calls(models, hw):
    model, system = models.model("OPT-66B"), hw.system("saddle")
    b = np.array([1, 16, 64])[:, None, None]
    q = np.array([1, 5, 9])[None, :, None]
    c = np.array([128, 1000])[None, None, :]
    grid = pass_cost(model, system, b, q, c)
    assert grid.total_time_s.shape == (3, 3, 2)
    for i, j, k in np.ndindex(3, 3, 2):
        one = pass_cost(model, system, int(b[i, 0, 0]), int(q[0, j, 0]), int(c[0, 0, k]))
        assert float(one.total_time_s) == pytest.approx(grid.total_time_s[i, j, k], rel=1e-12)
        assert float(one.total_energy_j) == pytest.approx(grid.total_energy_j[i, j, k], rel=1e-12)


def test_default_mapping_and_checks(hw, models):
    assert default_mapping(hw.system("attacc-pim")) == {"fc": "gpu", "attention": "pim"}
    assert default_mapping(hw.system("dgx-a100")) == {"fc": "gpu", "attention": "gpu"}
    m = models.model("OPT-1.3B")
    with pytest.raises(ValueError, match="keeps weights in GPU memory"):
        pass_cost(m, hw.system("attacc-pim"), 4, 1, 128, {"fc": "pim"})
    with pytest.raises(ValueError, match="has no PIM"):
        pass_cost(m, hw.system("dgx-a100"), 4, 1, 128, {"attention": "pim"})
    fc_pim = pass_cost(m, hw.system("saddle"), 4, 1, 128, {"fc": "pim"})
    assert fc_pim.device["qkv"] == "pim" and fc_pim.device["norm_attn"] == "pim"


def test_operator_set(models):
    names = [op.name for op in decoder_ops(models.model("Llama-3.1-70B"), 2, 3, 100, tp=8, pp=2)]
    for n in (
        "qkv",
        "attn_score",
        "softmax",
        "attn_context",
        "out_proj",
        "ffn_up",
        "ffn_gate",
        "act",
        "ffn_down",
        "norm_attn",
        "norm_ffn",
        "allreduce_attn",
        "allreduce_ffn",
        "lm_head",
        "stage_transfer",
    ):
        assert n in names
    opt = [op.name for op in decoder_ops(models.model("OPT-66B"), 2, 3, 100)]
    assert "ffn_gate" not in opt and "stage_transfer" not in opt


def test_gqa_attention_reads_each_kv_head_once(models):
    m = models.model("Llama-3.1-70B")
    ops = {op.name: op for op in decoder_ops(m, 1, 1, 1023)}
    assert float(ops["attn_score"].stream_bytes) == 8 * 1024 * 128 * 2
    assert float(ops["attn_score"].flops) == 2 * 64 * 1024 * 128


def test_tensor_parallel_shards_weights(models, hw):
    m = models.model("Llama-2-70B")
    rt = hw.runtimes["gpt-fast"]
    t1 = pass_cost(m, gpu_only_system(hw.gpus["A100-80GB-SXM"], 1, rt), 1, 1, 100).time_by("cls")["fc"]
    t8 = pass_cost(m, gpu_only_system(hw.gpus["A100-80GB-SXM"], 8, rt), 1, 1, 100).time_by("cls")["fc"]
    assert float(t1 / t8) == pytest.approx(8, rel=0.1)


def test_pim_attention_by_hand_memory_and_compute_bound(hw):
    """10 (request, KV head) units on 4 stacks (3 on the busiest), 1000 cached tokens rounded up to
    1008, head dim 128, FP16: 258,048 bytes of K per unit."""
    import dataclasses

    pim = hw.pims["HBM3-PIM"]
    op = attention("attn_score", np.asarray(1.0), np.asarray(1000.0), 128.0, np.asarray(10.0), 2.0)
    unit = 1000 * 128 * 2 * 1008 / 1000
    # PEs 4x faster than the bank stream: memory-bound, one sweep per query
    fast = dataclasses.replace(pim, flop_per_internal_byte=4.0)
    t, e = pim_op_cost(op, fast, 4)
    assert t == pytest.approx(3 * unit / fast.internal_bw_bytes_s + fast.call_fixed_s, rel=1e-12)
    flops = 2 * 1000 * 128 * 10
    assert e == pytest.approx((unit * 10 * fast.bank_read_pj_per_byte + flops * fast.pj_per_flop) * 1e-12, rel=1e-12)
    # nine queries from registers in one sweep: compute-bound, 9 x 2 x 1008 x 128 FLOPs per unit
    regs = dataclasses.replace(pim, queries_per_pass=16)
    op9 = attention("attn_score", np.asarray(9.0), np.asarray(1000.0), 128.0, np.asarray(10.0), 2.0)
    t9, _ = pim_op_cost(op9, regs, 4)
    assert t9 == pytest.approx(3 * 9 * 2 * 1008 * 128 / regs.pe_flops + regs.call_fixed_s, rel=1e-12)
    with pytest.raises(ValueError, match="operator class 'allreduce' cannot run on PIM"):
        pim_op_cost(dataclasses.replace(op, cls="allreduce"), pim, 4)


def test_attention_time_factor_scales_only_attention(hw):
    import dataclasses

    s = hw.system("dgx-a100")
    slow = dataclasses.replace(s.runtime, attention_time_factor=2.0)
    att = attention("attn_score", np.asarray(1.0), np.asarray(2048.0), 128.0, np.asarray(64.0), 2.0)
    fc = gemm_op("qkv", np.asarray(4.0), 8192, 8192, 2.0)
    for op, factor in ((att, 2.0), (fc, 1.0)):
        t1, e1 = gpu_op_cost(op, s.gpu, s.runtime)
        t2, e2 = gpu_op_cost(op, s.gpu, slow)
        fixed = s.runtime.fixed_s[op.cls]
        assert t2 - fixed == pytest.approx(factor * (t1 - fixed), rel=1e-12) and e2 == e1


def test_weights_in_pim_stream_at_the_stacks_external_bandwidth(hw):
    """SADDLE keeps weights in the stacks: the GPU reads them over the stacks' links (5 x 670.4 GB/s
    here, which happens to equal an A100a's HBM3); with slower links FC passes slow down."""
    import dataclasses

    s = hw.system("saddle")
    slow_links = dataclasses.replace(s, pim=dataclasses.replace(s.pim, external_bw_bytes_s=200e9))
    assert slow_links.weight_bw_bytes_s == pytest.approx(5 * 200e9)
    fc = gemm_op("qkv", np.asarray(1.0), 8192, 8192, 2.0)
    t, _ = op_cost(fc, slow_links, "gpu")
    assert t == pytest.approx(gpu_op_cost(fc, s.gpu, s.runtime, 5 * 200e9)[0], rel=1e-12)
    assert t > op_cost(fc, s, "gpu")[0] * 3


def test_bad_mappings_say_what_is_allowed(hw):
    s = hw.system("saddle")
    with pytest.raises(ValueError, match=r"mapping 'fc' -> 'tpu': families fc/attention, devices \('gpu', 'pim'\)"):
        check_mapping(s, {"fc": "tpu"})
    with pytest.raises(ValueError, match=r"mapping 'moe' -> 'gpu'"):
        check_mapping(s, {"moe": "gpu"})
