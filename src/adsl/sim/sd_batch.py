"""The speculative path at batch > 1 against measurements (``validation_sd_batch``): draft-model
speculative decoding in a serving engine at batch 8-64, speedup over the same engine without it.

Per row the source states the hardware, the models, the batch (the engine's concurrency), the fixed draft
length k and the mean tokens a verification emits (its acceptance length). The acceptance streams are
i.i.d. with the per-position probability p whose expected tokens per step, (1 - p^(k+1)) / (1 - p),
equal the measured ones (one number from the source, none from the speedup); both runs are continuous
batching of ``batch`` slots with prefill on a tensor-parallel group of the catalogue's GPUs and runtime,
the draft sharded like the target (vLLM's default). The predicted speedup is SD tokens/s over AD tokens/s
in the steady-state window, as the source divides its two output throughputs.

Where the source does not state its prompts, a second prediction takes the prompt length at which the
predicted AD throughput equals the measured AD throughput (``matched_prompt``): fitted on the baseline run
alone, it charges SD the same non-decoding work, and the speedup stays a prediction."""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import optimize

from adsl.fitting.distributions import truncated_geometric_pmf
from adsl.perf.hardware import HardwareCatalogue, gpu_only_system
from adsl.perf.models import ModelCatalogue
from adsl.settings import Continuous, MicroBatching
from adsl.sim.core import simulate_core
from adsl.sim.setup import Setup
from adsl.sim.workload import Workload

GPU_ONLY = {"fc": "gpu", "attention": "gpu"}
REPLICAS, REQUESTS_PER_SLOT = 2, 4


def per_position(tokens_per_step: float, k: int) -> float:
    """p with expected tokens per step (accepted + 1 under ``truncated_geometric_pmf``) = ``tokens_per_step``
    (1 < tokens_per_step < k + 1)."""
    if not 1.0 < tokens_per_step < k + 1:
        raise ValueError(f"tokens per step {tokens_per_step} outside (1, {k + 1}) for draft length {k}")
    emitted = np.arange(1, k + 2)
    return float(optimize.brentq(lambda p: emitted @ truncated_geometric_pmf(p, k) - tokens_per_step, 1e-9, 1 - 1e-12))


def _run(row, models: ModelCatalogue, hw: HardwareCatalogue, prompt_len: float, sd: bool, seed: int = 0):
    """The row's engine run, speculative (``sd``) or autoregressive, with prompts of ``prompt_len``."""
    system = gpu_only_system(hw.gpus[row.gpu], int(row.tp), hw.runtimes[row.runtime])
    b, k = int(row.batch), int(row.draft_length)
    n = REQUESTS_PER_SLOT * b
    prompt = np.full((REPLICAS, n), float(prompt_len))
    out = np.full((REPLICAS, n), int(row.new_tokens))
    serving = Continuous(b, b, prefill=True, drain=False)  # read over its window alone
    if not sd:
        setup = Setup("AD", system, "ad", 0, GPU_ONLY, GPU_ONLY, MicroBatching())
        return simulate_core(setup, models.pair(row.pair), Workload(prompt, out), serving)
    p = per_position(float(row.tokens_per_step), k)
    acc = np.random.default_rng(seed).random((REPLICAS, n, int(row.new_tokens) + k + 2)) < p
    setup = Setup("SD", system, "sd", k, GPU_ONLY, GPU_ONLY, MicroBatching())
    return simulate_core(setup, models.pair(row.pair), Workload(prompt, out, acc), serving)


def predict(row, models: ModelCatalogue, hw: HardwareCatalogue, prompt_len: float | None = None) -> dict:
    """Predicted SD and AD throughput and speedup of one anchor row (``data/anchors/sd_batch.csv``), with
    its prompt length or ``prompt_len``."""
    prompt = float(row.prompt_len if prompt_len is None else prompt_len)
    sd, ad = (_run(row, models, hw, prompt, flag) for flag in (True, False))
    emitted = float(sd.tokens.sum() / max(sd.request_rounds.sum(), 1))
    sd_tps, ad_tps = float(sd.throughput_tok_s.mean()), float(ad.throughput_tok_s.mean())
    p = per_position(float(row.tokens_per_step), int(row.draft_length))
    return dict(p=p, tokens_per_step_sim=emitted, sd_tok_s=sd_tps, ad_tok_s=ad_tps, speedup=sd_tps / ad_tps)


def matched_prompt(row, models: ModelCatalogue, hw: HardwareCatalogue) -> float:
    """The prompt length at which the predicted AD throughput equals the measured one: it stands for all
    the engine spends beside decoding (the prefill of prompts the source does not state, host time), fitted
    on the AD run alone, so the SD speedup predicted with it is still a prediction (nan: not reachable)."""

    def gap(p):  # the AD run alone: SD plays no part in the fit
        return np.log(float(_run(row, models, hw, p, False).throughput_tok_s.mean()) / float(row.ad_tok_s))

    lo, hi = 1.0, 16384.0
    if gap(lo) < 0 or gap(hi) > 0:
        return float("nan")
    return float(optimize.brentq(gap, lo, hi, xtol=1.0))


def sd_batch_table(anchors: pd.DataFrame, models: ModelCatalogue, hw: HardwareCatalogue) -> pd.DataFrame:
    """One row per measurement: source, hardware, models, batch, k, measured and predicted speedup and
    throughputs, and the relative error of the speedup."""
    rows = []
    for r in anchors.itertuples():
        pred = predict(r, models, hw)
        prompt = matched_prompt(r, models, hw)
        matched = predict(r, models, hw, prompt) if np.isfinite(prompt) else {"speedup": np.nan}
        pair = models.pair(r.pair)
        rows.append(
            dict(
                source=r.source,
                hardware=f"{int(r.tp)} x {r.gpu} ({r.runtime})",
                models=f"{pair.target.name} + {pair.draft.name}",
                batch=int(r.batch),
                draft_length=int(r.draft_length),
                tokens_per_step=float(r.tokens_per_step),
                acceptance_p=pred["p"],
                tokens_per_step_sim=pred["tokens_per_step_sim"],
                measured=float(r.speedup),
                predicted=pred["speedup"],
                rel_error=pred["speedup"] / float(r.speedup) - 1.0,
                measured_sd_tok_s=float(r.sd_tok_s),
                predicted_sd_tok_s=pred["sd_tok_s"],
                measured_ad_tok_s=float(r.ad_tok_s),
                predicted_ad_tok_s=pred["ad_tok_s"],
                matched_prompt_len=prompt,
                predicted_ad_matched=matched["speedup"],
                rel_error_ad_matched=matched["speedup"] / float(r.speedup) - 1.0,
                use=r.use,
            )
        )
    return pd.DataFrame(rows)
