"""How often Fig. 14's paired 95 % interval holds the ratio it estimates.

Runs the ablation experiment with 64 replicas a system (common random numbers: replica i of every system
draws the same streams) from a workflow run's inputs (``results/``: acceptance models and tau), cuts them
into 16 blocks of 4 (the experiments' replicas), and counts per (batch, system) the blocks whose ratio to
PIM-SD lies within its own paired half-width (``adsl.sim.experiment.ratio_ci95``) of the 64-replica ratio;
beside it the same for the interval two independent means would give.

    python tools/paired_coverage.py        # after `snakemake --cores 2`; about 40 s on 2 cores
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
REPLICAS, BLOCK = 64, 4


def main() -> None:
    from adsl import paths
    from adsl.config import read_yaml
    from adsl.fitting.tau import read_taus
    from adsl.sim.experiment import ratio_ci95, run_experiment
    from adsl.workspace import load_workspace

    cfg = read_yaml(ROOT / "config" / "config.yaml")
    cfg["simulation"]["replicas"] = REPLICAS
    cfg["simulation"]["precision"]["max_replicas"] = REPLICAS
    ws = load_workspace(cfg, base=ROOT)
    sim = ws.settings.simulation
    taus = read_taus(ROOT / paths.TAU)
    models = {p: {c: str(ROOT / paths.pair_model(p, c)) for c in sim.categories} for p in ws.settings.acceptance.pairs}
    df = run_experiment(ws, "ablation", models, taus)
    t = stats.t.ppf(0.975, BLOCK - 1)
    rows = []
    for batch, g in df.groupby("batch"):
        g = g.set_index("system")
        base = np.asarray(g.loc["PIM-SD", "throughput_replicas"])
        for system in g.index.drop("PIM-SD"):
            a = np.asarray(g.loc[system, "throughput_replicas"])
            whole = a.mean() / base.mean()
            paired, unpaired, width = [], [], []
            for k in range(0, REPLICAS, BLOCK):
                x, y = a[k : k + BLOCK], base[k : k + BLOCK]
                r = x.mean() / y.mean()
                h = ratio_ci95(x, y, r)
                rel = [t * v.std(ddof=1) / np.sqrt(BLOCK) / v.mean() for v in (x, y)]
                paired.append(abs(r - whole) <= h)
                unpaired.append(abs(r - whole) <= r * np.hypot(*rel))
                width.append(100 * h / r)
            rows.append(
                dict(
                    batch=batch,
                    system=system,
                    ratio=round(whole, 4),
                    paired_coverage=np.mean(paired),
                    unpaired_coverage=np.mean(unpaired),
                    paired_half_width_pct=round(float(np.median(width)), 2),
                )
            )
    out = pd.DataFrame(rows)
    print(out.to_string(index=False))
    print(f"all: paired {out.paired_coverage.mean():.3f}, unpaired {out.unpaired_coverage.mean():.3f} (nominal 0.95)")


if __name__ == "__main__":
    sys.exit(main())
