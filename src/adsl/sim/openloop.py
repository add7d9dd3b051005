"""Open-loop serving: requests arrive as a Poisson process, queue while every slot is busy and are served
with continuous batching on the event-driven core (``simulate_core(arrivals=...)``); per request the
time to first token (arrival to the end of its prefill), the time per output token after it and the
end-to-end latency.

Each system's load is swept as fractions of its own saturation rate: the rate at which it completes
requests when every request is queued at time 0 (the same requests), so every curve runs up to
saturation whatever the system's speed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pandas as pd

from adsl.fitting.modelfile import read_model
from adsl.fitting.tau import read_taus
from adsl.paths import models_by_pair
from adsl.profiling.traces import read_profile
from adsl.progress import progress
from adsl.settings import Continuous, LengthDist, OpenLoopSpec
from adsl.sim.core import simulate_core
from adsl.sim.experiment import (
    STREAM_SLACK,
    Point,
    PointInputs,
    light_lengths,
    point_setup,
    policy_lengths,
    request_streams,
    search_point,
)
from adsl.sim.result import RunResult
from adsl.sim.setup import SimError, memory_need


def lognormal_lengths(dist: LengthDist, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` lengths (tokens) of a log-normal distribution, rounded, at least ``dist.min``."""
    x = np.exp(np.log(dist.median) + dist.sigma * rng.standard_normal(n))
    return np.maximum(np.round(x), dist.min)


@dataclass(frozen=True)
class RequestMix:
    """Prompt lengths drawn from a measured sample (the profiled prompts) or a log-normal distribution,
    output lengths log-normal; clipped so a request fits in ``max_seq_len`` (prompts at most half)."""

    prompts: np.ndarray | LengthDist  # measured prompt lengths to draw from (tokens), or a distribution
    output: LengthDist
    max_seq_len: int

    def draw(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """(prompt, output) tokens of ``n`` requests."""
        if isinstance(self.prompts, LengthDist):
            prompt = lognormal_lengths(self.prompts, n, rng)
        else:
            prompt = rng.choice(np.asarray(self.prompts), n)
        prompt = np.clip(prompt, 1, self.max_seq_len // 2).astype(np.int64)
        out = np.clip(lognormal_lengths(self.output, n, rng), 1, self.max_seq_len - prompt).astype(np.int64)
        return prompt, out


@dataclass(frozen=True)
class LoadPoint:
    """One open-loop run's summary."""

    rate_req_s: float
    achieved_tok_s: float
    completed: int
    ttft_p50_s: float
    ttft_p99_s: float
    tpot_p50_s: float
    tpot_p99_s: float
    e2e_p50_s: float
    e2e_p99_s: float
    queue_wait_mean_s: float


def _benchmark_throughput(q: dict[str, np.ndarray]) -> float:
    """Output tokens of every request over the time from the first arrival to the last completion, mean
    over replicas: vLLM's ``benchmark_serving`` output throughput (ramp-up and drain included)."""
    rates = []
    for r in np.unique(q["replica"]):
        m = q["replica"] == r
        done = np.isfinite(q["finished"][m])
        span = np.max(q["finished"][m][done], initial=0.0) - q["arrival"][m].min()
        rates.append(q["out"][m][done].sum() / span if span > 0 else 0.0)
    return float(np.mean(rates))


def summarize(res: RunResult, rate: float) -> LoadPoint:
    """Latency percentiles over the requests that arrived in the measured window and finished."""
    q = res.requests
    lo, hi = res.window["start_s"], res.window["end_s"]
    rep = q["replica"].astype(int)
    inside = (q["arrival"] >= lo[rep]) & (q["arrival"] <= hi[rep]) & np.isfinite(q["finished"])
    ttft = (q["first_token"] - q["arrival"])[inside]
    tpot = ((q["finished"] - q["first_token"]) / np.maximum(q["out"] - 1, 1))[inside]
    e2e = (q["finished"] - q["arrival"])[inside]
    wait = (q["admitted"] - q["arrival"])[inside]
    pct = lambda a, p: float(np.percentile(a, p)) if a.size else float("nan")  # noqa: E731
    return LoadPoint(
        rate_req_s=rate,
        achieved_tok_s=_benchmark_throughput(q),
        completed=int(inside.sum()),
        ttft_p50_s=pct(ttft, 50),
        ttft_p99_s=pct(ttft, 99),
        tpot_p50_s=pct(tpot, 50),
        tpot_p99_s=pct(tpot, 99),
        e2e_p50_s=pct(e2e, 50),
        e2e_p99_s=pct(e2e, 99),
        queue_wait_mean_s=float(wait.mean()) if wait.size else float("nan"),
    )


def _simulate(inputs, serving: Continuous, arrivals: np.ndarray | None = None) -> RunResult:
    return simulate_core(inputs.setup, inputs.pair, dataclasses.replace(inputs.workload, arrivals=arrivals), serving)


def open_loop_point(inputs, arrivals: np.ndarray, warmup: int) -> RunResult:
    """One open-loop run of a configured point (``adsl.sim.experiment.point_inputs``)."""
    serving = Continuous(inputs.serving.slots if inputs.serving else inputs.batch, warmup, True)
    return _simulate(inputs, serving, arrivals)


def simulate_point_closed(inputs) -> RunResult:
    """The same requests all queued at time 0 (closed loop, continuous batching): the saturation rate (its
    throughput alone, so the run ends with its window)."""
    warmup = min(inputs.batch, inputs.out.shape[1] // 4)
    return _simulate(inputs, Continuous(inputs.batch, warmup, prefill=True, drain=False))


def open_loop_inputs(ws, sim, point: Point, models, taus, prompt: np.ndarray, out: np.ndarray) -> PointInputs:
    """The point's setup with streams (and draft lengths) for requests of these (replicas, N) lengths."""
    setup, pair = point_setup(ws, sim, point), ws.models.pair(point.pair)
    x, n = out.shape
    acc = conf = later = lengths = light = None
    if setup.decoding == "sd":
        t = int(out.max()) + STREAM_SLACK + 1
        conf, later, acc = request_streams(models, list(sim.categories), x, n, t, ws.settings.seed + point.batch)
        if setup.policy != "fixed" or setup.pool_tokens:
            lengths = policy_lengths(ws, sim, point, setup, pair, models, taus, conf, later, acc)
            light = light_lengths(ws, sim, point, setup, pair, models, taus, conf, later, acc)
    serving = Continuous(point.batch, 0, True)
    memory = memory_need(setup, pair, point.batch, point.seq_len)
    return PointInputs(
        setup,
        pair,
        point.batch,
        point.seq_len,
        prompt.astype(float),
        out,
        serving,
        acc,
        conf,
        later,
        lengths,
        memory,
        light,
        sim.tau_light_load.active_at_most,
    )


def load_sweep(ws, sim, point: Point, models, taus, spec: OpenLoopSpec, mix: RequestMix) -> list[dict]:
    """Rows of one system (and policy) at each of ``spec.loads``: fractions of its saturation rate.
    Every system and load sees the same requests and the same unit-rate arrival gaps, scaled by the rate
    (common random numbers: curves differ by the system, not by the draw)."""
    seed, x, n = ws.settings.seed, sim.replicas, spec.requests
    prompt, out = (a.reshape(x, n) for a in mix.draw(x * n, np.random.default_rng([seed, 3])))
    gaps = np.random.default_rng([seed, 4]).exponential(1.0, (x, n))
    inputs = open_loop_inputs(ws, sim, point, models, taus, prompt, out)
    saturated = simulate_point_closed(inputs)
    capacity = float(np.mean(saturated.throughput_tok_s)) / float(out.mean())  # requests per second
    rows = []
    for load in spec.loads:
        rate = load * capacity
        res = open_loop_point(inputs, np.cumsum(gaps / rate, axis=1), spec.warmup)
        rows.append({"load": load, "capacity_req_s": capacity, **dataclasses.asdict(summarize(res, rate))})
    return rows


def best_policies(gaps: pd.DataFrame, system: str, n: int) -> tuple[str, ...]:
    """The ``n`` observable policies (oracle aside) with the highest mean throughput / oracle on ``system``
    in the policy zoo's gap table (``adsl.figures.policies.policy_gaps_table``)."""
    part = gaps[(gaps.system == system) & (gaps.policy != "oracle")]
    if part.empty and n:
        raise SimError(f"the policy gap table has no rows of system {system!r}; it has {sorted(set(gaps.system))}")
    return tuple(part.sort_values("mean_vs_oracle", ascending=False, kind="stable").policy[:n])


def run_open_loop(ws, models, taus, mix: RequestMix, policies: tuple[str, ...]) -> pd.DataFrame:
    """The load sweep of every configured system (its own policy) and of ``policy_system`` under each of
    ``policies``; one row per (system, policy, load)."""
    sim, spec = ws.settings.simulation, ws.settings.simulation.open_loop
    runs = [(s, None) for s in spec.systems] + [(spec.policy_system, p) for p in policies]
    rows, chosen = [], {}
    for system, policy in progress(runs, "open loop: system"):
        point = Point(spec.pair, system, spec.slots, sim.draft_length, mix.max_seq_len, "warn")
        if system not in chosen:  # the search's configuration of the saturated closed loop, its own policy
            chosen[system] = search_point(ws, sim, point, models, taus).point.configuration
        point = dataclasses.replace(point, policy=policy, configuration=chosen[system])
        for row in load_sweep(ws, sim, point, models, taus, spec, mix):
            rows.append(
                {
                    "pair": spec.pair,
                    "system": system,
                    "policy": policy or "own",
                    "configuration": chosen[system].label,
                    **row,
                }
            )
    return pd.DataFrame(rows)


def serving_table(
    ws, models: list[str], tau: str, profile: list[str] | None = None, gaps: str | None = None
) -> pd.DataFrame:
    """One row per (system, policy, load): the arrival rate, the achieved output throughput and the
    p50 / p99 time to first token, time per output token and end-to-end latency (``adsl.sim.openloop``).
    ``profile``: the profile's files (prompt lengths, when the configuration draws them from it);
    ``gaps``: the policy zoo's gap table (when the configuration asks for its best N policies)."""
    sim = ws.settings.simulation
    spec = sim.open_loop
    accept = {c: read_model(p) for c, p in models_by_pair(models)[spec.pair].items()}
    taus = read_taus(tau)[spec.pair]
    prompts = spec.prompt_len
    if prompts is None:
        prompts = read_profile(profile).requests.prompt_len.to_numpy()
    mix = RequestMix(prompts, spec.output_len, sim.seq_len(spec.pair))
    policies = spec.policies
    if isinstance(policies, int):
        policies = best_policies(pd.read_csv(gaps), spec.policy_system, policies)
    df = run_open_loop(ws, accept, taus, mix, policies)
    df["label"] = [s if p == "own" else f"{s} ({p})" for s, p in zip(df.system, df.policy, strict=True)]
    return df
