"""A pass of zero requests (an idle replica in a vectorized sweep) costs nothing on the link, and its attention on
PIM only the stacks' fixed call cost (no 0 / 0 per attention unit)."""

import numpy as np

from adsl.perf.cost import pass_cost


def test_an_empty_pass_has_zero_allreduce_cost_without_tensor_parallelism(models, hw):
    s = hw.system("saddle")
    assert s.tensor_parallel == 1
    cost = pass_cost(models.model("OPT-1.3B"), s, np.array([0.0, 4.0]), 1.0, 1024.0)
    for name in ("allreduce_attn", "allreduce_ffn"):
        assert cost.time_s[name].tolist() == [0.0, 0.0] and cost.energy_j[name].tolist() == [0.0, 0.0]


def test_attention_on_pim_over_no_request_is_the_fixed_call_cost(models, hw):
    s = hw.system("saddle")
    cost = pass_cost(models.model("OPT-1.3B"), s, np.array([0.0, 4.0]), 1.0, 1024.0, {"attention": "pim"})
    attention = [name for name, c in cost.cls.items() if c == "attention"]
    assert attention and all(cost.device[name] == "pim" for name in attention)
    for name in attention:
        t, e = cost.time_s[name], cost.energy_j[name]
        assert np.isfinite(t).all() and np.isfinite(e).all()
        # one sweep of no unit: the call's fixed cost each of the op's repeats, no energy
        assert t[0] == s.pim.call_fixed_s * models.model("OPT-1.3B").layers and e[0] == 0.0
        assert t[1] > t[0] and e[1] > 0.0
