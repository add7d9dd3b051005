"""Run configured sweeps: one row per system x pair x batch x setting (tidy)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from adsl.fitting.generator import (
    as_flags,
    continuation_boost,
    draw_streams,
    later_confidence,
    running_product_lengths,
)
from adsl.fitting.modelfile import read_model
from adsl.perf.models import Pair
from adsl.settings import ExperimentSpec, SimulationSettings
from adsl.sim.batching import Continuous
from adsl.sim.core import RunResult, from_engine, simulate_core
from adsl.sim.engine import Setup, check_memory, memory_need, simulate
from adsl.sim.pools import simulate_pooled
from adsl.sim.systems import Context, build

STREAM_SLACK = 64  # stream positions beyond the output length: the largest draft length supported


def request_streams(models: dict[str, dict], categories: list[str], replicas: int, batch: int, t: int, seed: int):
    """(replicas, batch, t) draft confidences (a draft's first token), the confidences of a draft's later
    tokens (``later_confidence``: the same values unless a calibration moves them) and acceptance
    streams; request i belongs to categories[i % len]."""
    rng = np.random.default_rng(seed)
    drawn = {
        c: (idx, *draw_streams(models[c], replicas * idx.size, t, rng))
        for c, idx in request_categories(categories, batch).items()
    }
    # bool streams, or bit flags as soon as one category's model has a within-draft term
    flagged = any(a.dtype != bool for _, _, a in drawn.values())
    acc = np.empty((replicas, batch, t), dtype=np.uint8 if flagged else bool)
    conf = np.empty((replicas, batch, t), dtype=np.float32)
    later = np.empty((replicas, batch, t), dtype=np.float32)
    for c, (idx, cf, a) in drawn.items():
        acc[:, idx, :] = (as_flags(a) if flagged else a).reshape(replicas, idx.size, t)
        conf[:, idx, :] = cf.reshape(replicas, idx.size, t)
        later[:, idx, :] = later_confidence(cf, continuation_boost(models[c])).reshape(replicas, idx.size, t)
    return conf, later, acc


def request_categories(categories: list[str], batch: int) -> dict[str, np.ndarray]:
    """Request i belongs to categories[i % len(categories)]."""
    cats = np.array([categories[i % len(categories)] for i in range(batch)])
    return {c: np.flatnonzero(cats == c) for c in categories if (cats == c).any()}


def adaptive_lengths(
    conf: np.ndarray, categories: list[str], taus: dict[str, float], d_max: int, boosts: dict[str, float] | None = None
) -> np.ndarray:
    """Per-position draft lengths of the running-product rule, with each request's category's tau (and
    the category's later-token confidence term, ``continuation_boost``)."""
    x, b, t = conf.shape
    out = np.empty((x, b, t), dtype=np.int64)
    for c, idx in request_categories(categories, b).items():
        sub = conf[:, idx, :].reshape(-1, t)
        boost = (boosts or {}).get(c, 0.0)
        out[:, idx, :] = running_product_lengths(sub, taus[c], d_max, boost).reshape(x, idx.size, t)
    return out


def _ci95(values: np.ndarray) -> float:
    """Half-width of the 95 % confidence interval of the mean over replicas (Student t)."""
    if values.size < 2:
        return float("nan")
    return float(stats.t.ppf(0.975, values.size - 1) * values.std(ddof=1) / np.sqrt(values.size))


@dataclass(frozen=True)
class Point:
    """One configuration point of a sweep."""

    pair: str
    system: str
    batch: int
    draft_length: int  # the SD baselines' fixed d, the adaptive systems' cap
    seq_len: int  # prompt + output tokens per request
    memory_check: str = "error"  # error: stop when weights + KV exceed the system's memory; warn: flag it


@dataclass(frozen=True)
class PointInputs:
    """Everything one configuration point simulates: the system's setup and the requests' arrays."""

    setup: Setup
    pair: Pair
    batch: int
    seq_len: int
    prompts: np.ndarray  # (replicas, requests)
    out: np.ndarray
    serving: Continuous | None
    accept: np.ndarray | None = None  # (replicas, requests, positions), speculative systems
    confidence: np.ndarray | None = None
    confidence_later: np.ndarray | None = None
    lengths: np.ndarray | None = None  # the adaptive rule's draft lengths
    memory: tuple[float, float] = (0.0, 0.0)  # (needed, available) bytes


def point_setup(ws, sim: SimulationSettings, point: Point) -> Setup:
    """The registered system's setup for the point; stops when it does not fit in memory (``error``)."""
    pair = ws.models.pair(point.pair)
    ctx = Context.of(ws.hardware, pair, point.batch, point.seq_len, point.draft_length, sim)
    setup = build(point.system, ctx)
    if point.memory_check == "error":
        check_memory(setup, pair, point.batch, point.seq_len)
    return setup


def point_requests(sim: SimulationSettings, point: Point) -> tuple[np.ndarray, np.ndarray]:
    """(prompt, output) tokens per request, (replicas, requests): every request decodes to seq_len."""
    n = sim.batching.requests(point.batch)
    prompt = min(sim.prompt_len, point.seq_len - 1)
    return np.full((sim.replicas, n), float(prompt)), np.full((sim.replicas, n), point.seq_len - prompt)


def point_taus(sim: SimulationSettings, taus: dict[str, float] | None, point: Point) -> dict[str, float]:
    """Tau per category for an adaptive system at this point's batch (``tau_light_load``)."""
    if taus is None:
        raise ValueError(f"{point.system} drafts adaptively and needs tau per category (results/acceptance/tau.csv)")
    light = sim.tau_light_load
    if point.batch <= light.batch_at_most:  # lightly loaded: longer drafts use the idle parallelism
        return {c: t * light.factor for c, t in taus.items()}
    return dict(taus)


def point_inputs(
    ws, sim: SimulationSettings, point: Point, models: dict, taus: dict[str, float] | None = None
) -> PointInputs:
    """The setup of the point's system and its requests' streams (common random numbers: every system and
    draft length sees the same streams for a (pair, batch))."""
    setup, pair = point_setup(ws, sim, point), ws.models.pair(point.pair)
    prompts, out = point_requests(sim, point)
    d = point.draft_length
    acc = conf = later = lengths = None
    if setup.decoding == "sd":
        if d > STREAM_SLACK:
            raise ValueError(f"draft length {d} > {STREAM_SLACK} is not supported")
        t = int(out.max()) + STREAM_SLACK + 1
        x, n = out.shape
        conf, later, acc = request_streams(models, list(sim.categories), x, n, t, ws.settings.seed + point.batch)
    if setup.policy == "running_product":
        boosts = {c: continuation_boost(m) for c, m in models.items()}
        # a pooled request may hold up to d eager tokens beyond a d-token entry: lengths up to 2 d
        cap = 2 * d if setup.pool_tokens else d
        lengths = adaptive_lengths(conf, list(sim.categories), point_taus(sim, taus, point), cap, boosts)
    return PointInputs(
        setup,
        pair,
        point.batch,
        point.seq_len,
        prompts,
        out,
        sim.batching.serving(point.batch),
        acc,
        conf,
        later,
        lengths,
        memory_need(setup, pair, point.batch, point.seq_len),
    )


def simulate_point(p: PointInputs, core: str = "event", timelines: bool = False) -> RunResult:
    """Run a point on the event-driven core or on the round-based engines (the previous model)."""
    if core == "event":
        return simulate_core(
            p.setup,
            p.pair,
            p.prompts,
            p.out,
            p.accept,
            p.lengths,
            p.confidence,
            p.confidence_later,
            p.serving,
            timelines,
        )
    if p.setup.pool_tokens:
        args = (p.accept, p.confidence, p.lengths, p.serving, p.confidence_later)
        return from_engine(simulate_pooled(p.setup, p.pair, p.prompts, p.out, *args))
    return from_engine(simulate(p.setup, p.pair, p.prompts, p.out, p.accept, p.lengths, p.serving))


def run_point(ws, sim: SimulationSettings, point: Point, models: dict, taus: dict[str, float] | None = None) -> dict:
    """One configuration point simulated under ``sim``, as a table row."""
    p = point_inputs(ws, sim, point, models, taus)
    return point_row(p, simulate_point(p, sim.core), point.pair, point.system, point.draft_length)


def point_row(p: PointInputs, res: RunResult, pair_name: str, system_name: str, d: int) -> dict:
    """The tidy row of a point: throughput and its interval, energy, window, utilisation, placements."""
    setup, batch, seq_len = p.setup, p.batch, p.seq_len
    need, have = p.memory
    # busy time sums every stage's work; stages run on different devices side by side
    stages = setup.system.pipeline_stages
    busy = {k: float(np.mean(v / (res.time_s * stages))) for k, v in res.busy_s.items()}
    rounds = np.maximum(res.request_rounds, 1)
    row = dict(
        system=system_name,
        pair=pair_name,
        batch=batch,
        draft_length=d if setup.decoding == "sd" else 0,
        policy=setup.policy,
        seq_len=seq_len,
        hardware=setup.system.name,
        batching="static" if p.serving is None else "continuous",
        memory_needed_gb=need / 1e9,
        memory_available_gb=have / 1e9,
        fits_memory=need <= have,
        throughput_tok_s=float(res.throughput_tok_s.mean()),
        throughput_std=float(res.throughput_tok_s.std()),
        throughput_ci95=_ci95(res.throughput_tok_s),
        tokens_per_j=float(res.tokens_per_j.mean()),
        tokens_per_j_ci95=_ci95(res.tokens_per_j),
        time_s=float(res.time_s.mean()),
        tokens=int(res.tokens[0]),
        micro_batches=res.placement.get("micro_batches", float(setup.schedule.micro_batches)),
        eager_drafted=float(np.mean(res.pool.get("eager", 0.0))),
        eager_migrated=float(np.mean(res.pool.get("migrated", 0.0))),
        eager_discarded=float(np.mean(res.pool.get("discarded", 0.0))),
        iterations=float(res.iterations.mean()),
        window_start_s=float(res.window["start_s"].mean()),
        window_end_s=float(res.window["end_s"].mean()),
        window_completed=float(res.window["completed"].mean()),
        run_time_s=float(res.window["total_s"].mean()),
        gpu_util=busy.get("gpu", 0.0),
        pim_util=busy.get("pim", 0.0),
        mean_draft_length=float(np.mean(res.drafted / rounds)) if setup.decoding == "sd" else float("nan"),
        static_power_w=setup.system.static_power_w if setup.static_power else 0.0,
        draft_placement=setup.draft_placement if setup.decoding == "sd" else "",
        draft_fc_on_pim=res.placement.get("draft_fc_on_pim", float(setup.draft_mapping.get("fc") == "pim")),
        target_attention_on_pim=res.placement.get(
            "target_attention_on_pim", float(setup.target_mapping.get("attention") == "pim")
        ),
        target_fc=setup.target_mapping.get("fc", "gpu"),
        target_attention=setup.target_mapping.get("attention", "gpu"),
        draft_fc=setup.draft_mapping.get("fc", "gpu"),
        draft_attention=setup.draft_mapping.get("attention", "gpu"),
    )
    for k, v in res.stage_s.items():
        row[f"stage_{k}_s"] = float(np.mean(v))
    for k, v in res.class_s.items():
        row[f"class_{k}_s"] = float(np.mean(v))
    return row


def experiment_points(sim: SimulationSettings, exp: ExperimentSpec) -> list[Point]:
    """The points of a sweep, pair by pair (system x batch x draft length x sequence length)."""
    return [
        Point(pair, system, batch, d, seq, exp.memory_check)
        for pair in exp.pairs
        for system, batch, d, seq in itertools.product(
            exp.systems, exp.batches, exp.draft_lengths or [sim.draft_length], exp.seq_lens or [sim.seq_len(pair)]
        )
    ]


def run_experiment(
    ws, name: str, model_paths: dict[str, dict[str, str]], taus: dict[str, dict[str, float]] | None = None
) -> pd.DataFrame:
    """Experiment ``name`` of the workspace's simulation settings. ``model_paths``: pair -> category ->
    acceptance-model file; ``taus``: pair -> category -> tau (needed by the adaptive systems)."""
    sim = ws.settings.simulation.for_experiment(name)
    exp = ws.settings.simulation.experiments[name]
    models = {pair: {c: read_model(p) for c, p in model_paths[pair].items()} for pair in exp.pairs}
    rows = [
        run_point(ws, sim, pt, models[pt.pair], (taus or {}).get(pt.pair)) | {"experiment": name}
        for pt in experiment_points(sim, exp)
    ]
    df = pd.DataFrame(rows)
    # AD rows do not depend on d: keep one per (pair, system, batch, seq_len)
    keys = ["pair", "system", "batch", "draft_length", "seq_len"]
    return df.drop_duplicates(subset=keys).reset_index(drop=True)
