"""A pass of zero requests (an idle replica in a vectorized sweep) costs nothing on the link."""

import numpy as np

from adsl.perf.cost import pass_cost


def test_an_empty_pass_has_zero_allreduce_cost_without_tensor_parallelism(models, hw):
    s = hw.system("saddle")
    assert s.tensor_parallel == 1
    cost = pass_cost(models.model("OPT-1.3B"), s, np.array([0.0, 4.0]), 1.0, 1024.0)
    for name in ("allreduce_attn", "allreduce_ffn"):
        assert cost.time_s[name].tolist() == [0.0, 0.0] and cost.energy_j[name].tolist() == [0.0, 0.0]
