"""The layout of the paper's training file with made-up values (the paper's own values are not in the
repository)."""

from __future__ import annotations

import numpy as np

from adsl.paper.training import FIG16_PARTS

BATCHES = [16, 32, 64, 128]
SYSTEMS = ["GPU-SD", "PIM-AD", "PIM-SD", "SADDLE"]


def training_values(seed: int = 0) -> dict:
    """A training file of the published layout with made-up values (log-uniform 0.5-4)."""
    rng = np.random.default_rng(seed)

    def v() -> float:
        return float(np.round(np.exp(rng.uniform(np.log(0.5), np.log(4.0))), 2))

    return {
        "_about": "made-up values in the layout of the paper's training file",
        "fig03a_sd_over_ad_by_batch_d8": {"_what": "SD / AD", **{str(b): v() for b in [8, *BATCHES]}},
        "fig03a_ad_norm_by_batch": {"8": 1.0, **{str(b): v() for b in BATCHES}},
        "fig03b_sd_over_ad_by_d_batch64": {str(d): v() for d in [2, 3, 4, 5, 6, 8, 12]},
        "fig12_throughput_norm_gpu_ad_opt66b": {str(b): {s: v() for s in SYSTEMS} for b in BATCHES},
        "fig13_energy_norm_gpu_ad_opt66b": {"_batches": BATCHES, **{s: [v() for _ in BATCHES] for s in SYSTEMS}},
        "fig16_latency_s_opt66b": {
            "_batches": BATCHES,
            **{
                k: [float(x) for x in rng.uniform(30, 200, len(BATCHES)).round()]
                for k in ["PIM-SD_total", *FIG16_PARTS]
            },
        },
    }
