"""A sweep's table depends only on its points: 1 chunk or several, merged in any order, give the same
table; a configuration a system cannot run is a flagged row, not a failed sweep."""

from __future__ import annotations

import numpy as np
import pandas as pd

from adsl.dse.axes import configured
from adsl.dse.design import chunks
from adsl.dse.sweep import merge, run_chunk
from adsl.fitting.modelfile import read_model
from adsl.sim.experiment import run_point
from tests.dse.helpers import sweep_workspace, with_dse

SWEEP = {
    "sampling": "grid",
    "systems": ["GPU-AD", "PIM-SD", "SADDLE"],
    "gain": ["SADDLE", "PIM-SD"],
    "base": {"pair": "OPT-66B", "batch": 4, "seq_len": 256, "draft_length": 4},
    "simulation": {"replicas": 2, "batching": {"requests_per_slot": 3}},
    "axes": {
        "pim_stacks_per_gpu": {"values": [4, 6]},
        "pool_tokens": {"values": [4, 64]},
        "policy": {"values": ["fixed"]},
    },
    "winner_axes": ["pim_stacks_per_gpu", "pool_tokens"],
}


def test_one_chunk_or_several_in_any_order_give_the_same_table(model_paths, taus):
    ws = sweep_workspace(SWEEP)
    one = merge([run_chunk(ws, 0, model_paths, taus)], ws.settings.dse.systems)
    split = with_dse(ws, chunk_points=1)
    assert chunks(split.settings.dse) == 4
    parts = [run_chunk(split, k, model_paths, taus) for k in (3, 1, 0, 2)]
    pd.testing.assert_frame_equal(merge(parts, ws.settings.dse.systems), one, check_exact=True)
    assert list(one.configuration) == [c for c in range(4) for _ in range(3)]
    assert list(one.system[:3]) == ["GPU-AD", "PIM-SD", "SADDLE"]
    # the axes moved what they should: more stacks, more PIM memory; AD does not read the pool
    pim = one[one.system == "PIM-SD"].set_index("pim_stacks_per_gpu")
    assert (pim.memory_available_gb.loc[6].to_numpy() > pim.memory_available_gb.loc[4].to_numpy()).all()
    # the policy axis sets the policy of the systems that draft by the running product, and stays the axis's
    assert (one.policy == "fixed").all()
    big = one[one.pool_tokens == 64]
    assert set(zip(big.system, big.system_policy, strict=True)) == {
        ("GPU-AD", "fixed"),
        ("PIM-SD", "fixed"),
        ("SADDLE", "fixed"),
    }
    ad = one[one.system == "GPU-AD"]
    assert ad.throughput_tok_s.nunique() == 1 and (ad.cost_proxy == 8.0).all()
    assert (one[one.system == "PIM-SD"].cost_proxy.to_numpy() == 8 + 0.1 * 8 * np.array([4, 4, 6, 6])).all()


def test_a_configuration_a_system_cannot_run_is_a_flagged_row(model_paths, taus):
    """A pool of 4 tokens cannot hold one query per request at batch 4 (plus drafts at batch 8): SADDLE's
    row says why, the other systems' rows are simulated as usual."""
    ws = sweep_workspace({**SWEEP, "base": {**SWEEP["base"], "batch": 8}})
    df = run_chunk(ws, 0, model_paths, taus)
    small = df[df.pool_tokens == 4]
    bad = small[small.system == "SADDLE"]
    assert bad.error.str.contains("cannot hold one query token per request").all()
    assert bad.throughput_tok_s.isna().all() and not bad.fits_memory.any()
    fine = df[(df.pool_tokens == 64) | (df.system != "SADDLE")]
    assert (fine.error == "").all() and fine.throughput_tok_s.gt(0).all()


def test_a_configurations_systems_share_their_tables_and_run_as_they_would_alone(model_paths, taus):
    """The systems of one configuration take the pass tables an earlier one built (``built``): their rows
    equal those of points run with no tables to share, and the systems on SADDLE's hardware build its
    target prefill once for each count of requests their passes serve (PIM-AD's and PIM-SD's a micro-batch's,
    SADDLE's every slot's)."""
    ws = sweep_workspace(SWEEP)
    c = configured(ws, {"pim_stacks_per_gpu": 4, "pool_tokens": 64, "policy": "fixed"})
    sim, models = c.ws.settings.simulation, {k: read_model(f) for k, f in model_paths[c.pair].items()}
    built: list = []
    for system in ("PIM-AD", "PIM-SD", "SADDLE"):
        shared = run_point(c.ws, sim, c.point(system), models, c.taus(taus), {}, built=built)
        alone = run_point(c.ws, sim, c.point(system), models, c.taus(taus), {})
        assert shared.keys() == alone.keys()
        for k in shared:
            assert shared[k] == alone[k] or (shared[k] != shared[k] and alone[k] != alone[k]), k  # NaN == NaN
    on_pim = [t for t in built if t.keys["prefill"][0].name == "saddle-tp"]
    by_rows: dict[int, set] = {}
    for t in on_pim:
        by_rows.setdefault(t.n_max, set()).add(id(t.prefill[0]))
    assert len(on_pim) >= 3 and len(by_rows) == 2 and all(len(ids) == 1 for ids in by_rows.values())
