"""What a run is given (``adsl.sim.setup``, ``adsl.sim.batching``, ``adsl.sim.mapping``): Setup validation, the
checks of a run's requests, the memory a batch needs, the batching settings and the static mapping search."""

import dataclasses
import re
from decimal import ROUND_HALF_EVEN, Decimal

import numpy as np
import pytest

from adsl.settings import Batching, Continuous, MicroBatching
from adsl.sim.mapping import candidate_mappings, iteration_time, search_static_mapping
from adsl.sim.policies import POLICIES
from adsl.sim.setup import Setup, SimError, check_memory, memory_need, requests
from adsl.sim.systems import Deployment, build
from adsl.sim.workload import Workload
from tests.sim.builders import GPU, setup

PAIR = "OPT-66B"


def _raises(text, make, **kw):
    with pytest.raises(SimError, match=f"^{re.escape(text)}$"):
        make(**kw)


def test_setup_rejects_what_no_run_can_simulate(hw):
    """Unknown policy, decoding or pool trigger, an Eager Pool without a Shared Pool, a pool under AD and SD
    without a draft are SimErrors naming the setup and the value; AD needs no draft length."""
    _raises("t: draft length d must be >= 1, got 0", setup, hw=hw, d=0)
    _raises(f"t: unknown draft policy 'bogus'; known: {sorted(POLICIES)}", setup, hw=hw, policy="bogus")
    _raises("t: decoding must be 'ad' or 'sd', got 'xd'", setup, hw=hw, decoding="xd")
    _raises("t: pool_trigger must be 'complete' or 'idle', got 'soon'", setup, hw=hw, pool_trigger="soon")
    _raises("t: the Eager Pool needs a Shared Pool (pool_tokens > 0)", setup, hw=hw, eager=True)
    pool_ad = "t: a Shared Pool (pool_tokens > 0) needs speculative decoding ('sd')"
    _raises(pool_ad, setup, hw=hw, decoding="ad", pool_tokens=8)  # it holds drafts: AD has none
    assert setup(hw, decoding="ad").draft_length == 0
    assert setup(hw, policy="running_product", pool_tokens=8, eager=True, pool_trigger="idle").eager


def test_draft_micro_batching_splits_as_the_draft_split_says(hw):
    s = setup(hw, mb=3)
    assert s.draft_micro_batching == MicroBatching(3)
    assert dataclasses.replace(s, draft_split="always").draft_micro_batching == MicroBatching(3, split="always")


def test_unknown_system_is_a_key_error(pair, hw):
    with pytest.raises(KeyError, match="unknown system"):
        build("TPU-SD", Deployment(hw, pair, 8, 1024, 8, {}))


def test_requests_are_float_prompts_and_int_outputs_of_one_two_dimensional_shape():
    """Prompt and output lengths come back as float and int64 (replicas, requests) arrays, fractional
    (effective) prompts included, and a Workload stores them so; other shapes and requests without output are
    SimErrors with their shapes."""
    prompt, out = requests([[64, 32.5]], [[3.0, 7.0]])
    assert prompt.dtype == float and out.dtype == np.int64
    np.testing.assert_array_equal(prompt, [[64.0, 32.5]])
    np.testing.assert_array_equal(out, [[3, 7]])
    assert requests([[64, 32]], [[3, 7]])[0].dtype == float
    work = Workload([[64, 32]], [[3.0, 7.0]])
    assert work.prompt_len.dtype == float and work.output_len.dtype == np.int64
    p4, o4 = np.full((1, 4), 64.0), np.full((1, 4), 20)
    shapes = "prompt_len and output_len must both be (replicas, requests), got {}, {}"
    _raises(shapes.format((1, 3), (1, 4)), requests, prompt_len=p4[:, :3], output_len=o4)
    _raises(shapes.format((4,), (4,)), requests, prompt_len=p4[0], output_len=o4[0])
    _raises(shapes.format((1, 1, 4), (1, 1, 4)), requests, prompt_len=p4[None], output_len=o4[None])
    _raises("every request needs an output length >= 1", requests, prompt_len=p4, output_len=[[3, 0, 2, 1]])


def test_memory_need_is_weights_and_full_kv_caches(pair, hw):
    """By hand: the target's weights and KV caches, plus for SD a weight copy per draft copy and the
    draft's caches; a batch that needs exactly the memory fits, one more request does not; the error
    gives need and capacity in GB rounded to the nearest (checked at half-GB boundaries)."""
    tgt, dft = pair.target, pair.draft
    s = hw.system("dgx-a100")
    ad = Setup("ad", s, "ad", 0, GPU, GPU)
    sd = Setup("sd", s, "sd", 4, GPU, GPU, draft_copies=8, draft_placement="replicated")
    assert memory_need(ad, pair, 16, 2048) == (
        tgt.weight_bytes + 16 * 2048 * tgt.kv_bytes_per_token,
        s.memory_capacity_bytes,
    )
    kv = 16 * 2048 * (tgt.kv_bytes_per_token + dft.kv_bytes_per_token)
    assert memory_need(sd, pair, 16, 2048) == (tgt.weight_bytes + 8 * dft.weight_bytes + kv, s.memory_capacity_bytes)
    # a system with exactly the memory 100 requests of 1000 tokens need
    need = memory_need(ad, pair, 100, 1000)[0]
    exact = dataclasses.replace(ad, system=s.replace(gpu=dataclasses.replace(s.gpu, mem_capacity_bytes=need / s.gpus)))
    assert memory_need(exact, pair, 100, 1000) == (need, need)
    check_memory(exact, pair, 100, 1000)
    with pytest.raises(SimError):
        check_memory(exact, pair, 101, 1000)

    def gb(v: float) -> str:
        return str(Decimal(int(v)).scaleb(-9).quantize(Decimal(1), ROUND_HALF_EVEN))

    # a capacity of 1001.5 GB, and a batch whose need lies a few bytes above a half GB
    half = s.replace(gpu=dataclasses.replace(s.gpu, mem_capacity_bytes=1001.5e9 / s.gpus))
    small = dataclasses.replace(ad, system=half)
    m = np.arange(1, 2_000_000, dtype=np.int64)
    need_m = tgt.weight_bytes + m * tgt.kv_bytes_per_token
    above = need_m % 10**9 - 5 * 10**8
    batch = int(m[(above > 0) & (above < 10**3) & (need_m > 1001.5e9)][0])
    need, have = memory_need(small, pair, batch, 1)
    assert gb(need) == str(int(need) // 10**9 + 1) and gb(have) == "1002"  # both round up
    words = f"ad on dgx-a100: batch {batch} x 1 tokens needs {gb(need)} GB for weights + KV, the system has 1002 GB"
    with pytest.raises(SimError, match=f"^{re.escape(words)}$"):
        check_memory(small, pair, batch, 1)


def test_check_memory_names_need_and_capacity(pair, hw):
    """OPT-66B with 512 requests of 1024 tokens does not fit the 4-GPU system: the message gives both."""
    s = dataclasses.replace(setup(hw, "motivation-4gpu"), name="test")
    need, have = memory_need(s, pair, 512, 1024)
    assert need > have
    words = f"test on motivation-4gpu: batch 512 x 1024 tokens needs {need / 1e9:.0f} GB for weights + KV, "
    with pytest.raises(SimError, match=f"^{re.escape(words)}the system has {have / 1e9:.0f} GB$"):
        check_memory(s, pair, 512, 1024)


def test_batching_settings_are_checked():
    """Unknown modes, non-positive settings and a warm-up the queue cannot cover are rejected; a static
    batch serves its slots once, continuous batching requests_per_slot times, its warm-up in requests."""
    with pytest.raises(ValueError, match="window would be empty"):
        Batching("continuous", requests_per_slot=2, warmup=1.5)
    with pytest.raises(ValueError, match="batching mode"):
        Batching("dynamic")
    with pytest.raises(ValueError, match="requests_per_slot >= 1 and warmup >= 0"):
        Batching("static", requests_per_slot=0)
    with pytest.raises(ValueError, match="requests_per_slot >= 1 and warmup >= 0"):
        Batching("continuous", warmup=-1.0)
    assert Batching("static").serving(8) is None and Batching("static").requests(8) == 8
    assert Batching("continuous").requests(8) == 32
    assert Batching("continuous").serving(8) == Continuous(8, 8, True, drain=False)
    assert Batching("continuous", warmup=0.5, prefill=False, drain=True).serving(3) == Continuous(3, 2, False, True)


def test_static_mapping_search_is_the_fastest_candidate(pair, hw):
    s = hw.system("motivation-4gpu")
    draft, target, rows = search_static_mapping(pair, s, 64, 8, 1024, MicroBatching(5))
    assert len(rows) == len(candidate_mappings(s)) == 16
    best = min(rows, key=lambda r: r["iteration_s"])
    assert (best["target_fc"], best["draft_fc"]) == (target["fc"], draft["fc"])
    # each distinct mapping of either model costed once: every candidate's time is its iteration's
    for (dm, tm), row in zip(candidate_mappings(s), rows, strict=True):
        assert (row["draft_fc"], row["draft_attention"], row["target_fc"]) == (dm["fc"], dm["attention"], tm["fc"])
        assert row["iteration_s"] == iteration_time(pair, s, dm, tm, 64, 8, 1024, MicroBatching(5))
    assert len({r["iteration_s"] for r in rows}) == 16
    # FC on PIM is not a candidate where the weights live in GPU memory
    assert all(m[1]["fc"] == "gpu" for m in candidate_mappings(hw.system("dgx-a100")))
