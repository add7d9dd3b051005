"""Run configured sweeps: one row per system x pair x batch x setting (tidy)."""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from adsl.fitting.entropy import draw_entropy
from adsl.fitting.generator import (
    as_flags,
    continuation_boost,
    draw_streams,
    later_confidence,
)
from adsl.fitting.modelfile import read_model
from adsl.perf.models import Pair
from adsl.progress import progress
from adsl.settings import Continuous, ExperimentSpec, SimulationSettings
from adsl.sim.core import loop_key, pass_tables, replica_logs, result_of, simulate_core, tables_digest
from adsl.sim.policies import (
    COST_AWARE,
    LEARNED,
    POLICIES,
    PolicyCosts,
    PolicyInputs,
    fit_threshold,
    predicted,
    schedule_length,
)
from adsl.sim.result import RunResult, concat, throughput
from adsl.sim.search import Configuration, fastest, legal_set
from adsl.sim.setup import Setup, SimError, check_memory, memory_need
from adsl.sim.systems import SYSTEMS, Deployment, build
from adsl.sim.timing import batch_pass
from adsl.sim.workload import Workload

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


def ci95(values: np.ndarray) -> float:
    """Half-width of the 95 % confidence interval of the mean over replicas (Student t)."""
    if values.size < 2:
        return float("nan")
    return float(stats.t.ppf(0.975, values.size - 1) * values.std(ddof=1) / np.sqrt(values.size))


def replica_values(column: pd.Series) -> np.ndarray:
    """A per-replica list column as a (rows, n) array: each row's first n values, n the fewest any row has (a
    precision target can give a point more blocks of replicas than another)."""
    n = int(column.map(len).min())
    return np.stack([np.asarray(v)[:n] for v in column])


def ratio_ci95(a, b, ratio: float) -> float:
    """Half-width of the 95 % interval of ``ratio`` = mean(a) / mean(b) where ``a[i]`` and ``b[i]`` ran on
    replica i's streams (common random numbers: every system at a batch draws the same): the delta method
    on the paired differences a_i - ratio x b_i, Student t over the pairs (the first as many as both have).
    Pairing takes out what the two runs share: in Fig. 14 0.6-1.5 % of a ratio, where two independent means
    would give 1.0-4.4 % (its coverage: ``tools/paired_coverage.py``)."""
    n = min(len(a), len(b))
    if not n:  # no mean of nothing (one pair: ci95 gives no interval)
        return np.nan
    return ci95(np.asarray(a[:n]) - ratio * np.asarray(b[:n])) / float(np.mean(b[:n]))


@dataclass(frozen=True)
class Point:
    """One configuration point of a sweep."""

    pair: str
    system: str
    batch: int
    draft_length: int  # the SD baselines' fixed d, the adaptive systems' cap
    seq_len: int  # prompt + output tokens per request
    memory_check: str = "error"  # error: stop when weights + KV exceed the system's memory; warn: flag it
    policy: str | None = None  # the draft-length policy (adsl.sim.policies); None: the system's own
    configuration: Configuration | None = None  # the search's knobs (adsl.sim.search); None: search them


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
    light_lengths: np.ndarray | None = None  # under tau lowered for light load (Workload.light_lengths)
    light_at_most: int = 0  # read only with light_lengths

    @property
    def workload(self) -> Workload:
        """The requests' arrays as the simulator takes them."""
        return Workload(
            self.prompts,
            self.out,
            self.accept,
            self.lengths,
            self.confidence,
            self.confidence_later,
            light_lengths=self.light_lengths,
            light_at_most=self.light_at_most,
        )


def point_setup(ws, sim: SimulationSettings, point: Point) -> Setup:
    """The registered system's setup for the point; stops when it does not fit in memory (``error``)."""
    pair = ws.models.pair(point.pair)
    dep = Deployment.of(ws.hardware, pair, point.batch, point.seq_len, point.draft_length, sim)
    if point.configuration is not None:
        dep = point.configuration.deploy(dep)
    setup = build(point.system, dep)
    if point.policy is not None and setup.decoding == "sd":
        setup = dataclasses.replace(setup, policy=point.policy)
    if point.memory_check == "error":
        check_memory(setup, pair, point.batch, point.seq_len)
    return setup


def point_requests(sim: SimulationSettings, point: Point) -> tuple[np.ndarray, np.ndarray]:
    """(prompt, output) tokens per request, (replicas, requests): every request decodes to seq_len; requests
    per replica as ``sim.precision.requests`` says."""
    n = sim.precision.requests(sim.batching, point.batch)
    prompt = min(sim.prompt_len, point.seq_len - 1)
    return np.full((sim.replicas, n), float(prompt)), np.full((sim.replicas, n), point.seq_len - prompt)


def point_inputs(
    ws,
    sim: SimulationSettings,
    point: Point,
    models: dict,
    taus: dict[str, float] | None = None,
    block: int = 0,
    drawn: dict | None = None,
) -> PointInputs:
    """The setup of the point's system and its requests' streams (common random numbers: every system,
    configuration and draft length sees the same streams for a (pair, batch)); ``block`` > 0: the streams
    of the point's block-th further ``sim.replicas`` replicas (``adsl.settings.Precision``). ``drawn``: a
    dict the caller keeps over the points of one pair's models, so their streams are drawn once (they
    depend only on the batch, the sequence length and the block)."""
    setup = point_setup(ws, sim, point)
    prompts, out = point_requests(sim, point)
    streams = None
    if setup.decoding == "sd":
        if point.draft_length > STREAM_SLACK:
            raise ValueError(f"draft length {point.draft_length} > {STREAM_SLACK} is not supported")
        key = (point.pair, point.batch, point.seq_len, block)
        streams = None if drawn is None else drawn.get(key)
        if streams is None:
            t = int(out.max()) + STREAM_SLACK + 1
            x, n = out.shape
            seed = ws.settings.seed + point.batch
            streams = request_streams(models, list(sim.categories), x, n, t, [seed, 3, block] if block else seed)
            if drawn is not None:
                drawn[key] = streams
    return with_setup(ws, sim, point, setup, prompts, out, streams, models, taus, block)


def with_setup(ws, sim, point: Point, setup: Setup, prompts, out, streams, models, taus, block: int = 0) -> PointInputs:
    """The point's inputs for ``setup`` over given requests and (confidence, later, accept) streams."""
    pair = ws.models.pair(point.pair)
    conf, later, acc = streams if setup.decoding == "sd" else (None, None, None)
    lengths = light = None
    if setup.decoding == "sd" and (setup.policy != "fixed" or setup.pool_tokens):
        lengths = policy_lengths(ws, sim, point, setup, pair, models, taus, conf, later, acc, block)
        light = light_lengths(ws, sim, point, setup, pair, models, taus, conf, later, acc, block)
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
        light,
        sim.tau_light_load.active_at_most,
    )


def first_replicas(p: PointInputs, k: int) -> PointInputs:
    """The inputs of the first ``k`` replicas only."""
    cut = lambda a: None if a is None else a[:k]  # noqa: E731
    names = ("prompts", "out", "accept", "confidence", "confidence_later", "lengths", "light_lengths")
    return dataclasses.replace(p, **{n: cut(getattr(p, n)) for n in names})


def policy_costs(setup: Setup, pair: Pair, batch: int, ctx: float) -> PolicyCosts:
    """The serial cost model a policy plans with, per request at ``batch``: a verification step over one
    token each, and per drafted token one draft pass plus one more token in the verification."""
    d_pass = batch_pass(
        pair.draft, setup.system, batch, 1, ctx, setup.draft_mapping, setup.draft_micro_batching, setup.draft_copies
    )
    v1, v2 = (
        batch_pass(pair.target, setup.system, batch, q, ctx, setup.target_mapping, setup.micro_batching) for q in (1, 2)
    )
    t = lambda c: float(np.asarray(c.time_s))  # noqa: E731
    return PolicyCosts(t(v1) / batch, (t(d_pass) + t(v2) - t(v1)) / batch)


def point_taus(taus: dict[str, float] | None, point: Point) -> dict[str, float]:
    """Tau per category for an adaptive system."""
    if taus is None:
        raise ValueError(f"{point.system} drafts adaptively and needs tau per category (results/acceptance/tau.csv)")
    return dict(taus)


def light_lengths(ws, sim, point, setup, pair, models, taus, conf, later, acc, block: int = 0) -> np.ndarray | None:
    """The running-product rule's draft lengths under tau lowered for light load (``tau_light_load``), or
    None where tau is not lowered (factor 1, or a policy without tau)."""
    light = sim.tau_light_load
    if setup.policy != "running_product" or light.factor == 1.0 or light.active_at_most == 0:
        return None
    low = {c: t * light.factor for c, t in point_taus(taus, point).items()}
    return policy_lengths(ws, sim, point, setup, pair, models, low, conf, later, acc, block)


def policy_lengths(ws, sim, point, setup, pair, models, taus, conf, later, acc, block: int = 0) -> np.ndarray:
    """Each request's draft length from each position under the setup's policy (``adsl.sim.policies``),
    capped at d, or 2 d where a pool takes d-token entries and the request keeps drafting eagerly."""
    cats = list(sim.categories)
    n = conf.shape[1]
    cap = 2 * setup.draft_length if setup.pool_tokens else setup.draft_length
    seed = ws.settings.seed + point.batch
    ctx = sim.prompt_len + (point.seq_len - sim.prompt_len) / 2
    needs = setup.policy
    categories = np.array([cats[i % len(cats)] for i in range(n)])
    inputs = PolicyInputs(
        confidence=conf,
        later=later,
        categories=categories,
        batch=point.batch,
        d=setup.draft_length,
        entropy=request_entropy(models, cats, conf, seed, block) if needs == "entropy_bound" else None,
        accept=acc if needs in ("oracle", "goodput") else None,
        accept_prob=predicted(models, categories, conf, later) if needs == "rejection_risk" else None,
        costs=policy_costs(setup, pair, point.batch, ctx),
        taus=point_taus(taus, point) if needs == "running_product" else {},
        boosts={c: continuation_boost(m) for c, m in models.items()},
        schedule=dict(sim.policies.schedule),
        prior={c: float(m.get("match_rate", 0.5)) for c, m in models.items()},
    )
    if needs in LEARNED:
        inputs = dataclasses.replace(inputs, thresholds=learned_thresholds(needs, inputs, models, sim, cap, seed))
    return POLICIES[needs](inputs, cap)


def request_entropy(models: dict, categories: list[str], conf: np.ndarray, seed: int, block: int = 0) -> np.ndarray:
    """The draft's entropy at every position, drawn given its confidence (``adsl.fitting.entropy``) from a
    generator of its own (one per block of replicas), so drawing it moves no other stream."""
    rng = np.random.default_rng([seed, 1, block] if block else [seed, 1])
    out = np.empty(conf.shape, dtype=np.float32)
    for c, idx in request_categories(categories, conf.shape[1]).items():
        if "entropy" not in models[c]:
            raise ValueError(f"acceptance model of {c!r} has no entropy term: refit it (adsl.fitting.entropy)")
        out[:, idx, :] = draw_entropy(models[c]["entropy"], conf[:, idx, :], rng)
    return out


def learned_thresholds(policy, inputs: PolicyInputs, models, sim: SimulationSettings, cap: int, seed: int) -> dict:
    """Each category's threshold by ``fit_threshold`` on training streams drawn from its model with a
    generator of their own (the evaluation streams are held out)."""
    p = sim.policies
    out = {}
    for k, c in enumerate(sorted(models)):
        rng = np.random.default_rng([seed, 2, k])
        conf, acc = draw_streams(models[c], p.train_streams, p.train_positions, rng)
        later = later_confidence(conf, continuation_boost(models[c]))
        entropy = draw_entropy(models[c]["entropy"], conf, rng) if policy == "entropy_bound" else None
        categories = np.array([c] * p.train_streams)
        train = dataclasses.replace(
            inputs,
            confidence=conf[None],
            later=later[None],
            categories=categories,
            accept_prob=predicted(models, categories, conf[None], later[None]) if policy == "rejection_risk" else None,
            entropy=None if entropy is None else entropy[None],
            accept=acc[None],
            thresholds={},
        )
        if policy == "entropy_bound":
            grid = np.quantile(entropy, np.linspace(0.02, 0.98, p.grid))
        else:
            grid = np.linspace(0.02, 0.98, p.grid)
        out[c] = fit_threshold(policy, train, acc, grid, cap)
    return out


def simulate_point(
    p: PointInputs, timelines: bool = False, workers: int | None = None, tables=None, done=()
) -> RunResult:
    """Run a point on the event loop (``workers``: replicas at once; ``tables``: its pass costs where
    already built; ``done``: its first replicas' logs where already run; see ``simulate_core``)."""
    return simulate_core(p.setup, p.pair, p.workload, p.serving, timelines, workers=workers, tables=tables, done=done)


@dataclass(frozen=True)
class Searched:
    """What the search (``adsl.sim.search``) kept at a point: the point with its configuration, that
    configuration's inputs and first block's run, how many candidates were simulated, and the chosen
    throughput over the system's own configuration's."""

    point: Point
    inputs: PointInputs
    result: RunResult
    candidates: int
    gain: float


def search_point(
    ws, sim: SimulationSettings, point: Point, models: dict, taus=None, drawn=None, built: list | None = None
) -> Searched:
    """Simulate every legal configuration of the point's system (``sim.search.knobs``; only
    ``point.configuration`` where given) on the first ``sim.search.screen_replicas`` replicas of the
    point's requests and streams, and keep the fastest. A candidate that needs more memory than the
    system has, and more than its own configuration needs, is not legal. ``built``: a list the caller
    keeps over the points of one configuration (their workloads the same): the pass tables the point
    builds are added to it, and it takes the tables an earlier point already built (``PassTables``'
    reuse)."""
    first = point_inputs(ws, sim, point, models, taus, drawn=drawn)
    earlier = () if built is None else tuple(built)

    def own_tables(p: PointInputs):
        tables = pass_tables(p.setup, p.pair, p.workload, p.serving, earlier)
        if built is not None:
            built.append(tables)
        return tables

    if point.configuration is not None:
        tables = own_tables(first) if built is not None else None
        return Searched(point, first, simulate_point(first, tables=tables), 1, 1.0)
    streams = (first.confidence, first.confidence_later, first.accept)
    tried = []
    for k, conf in enumerate(legal_set(first.setup, sim.search.knobs)):
        pt = dataclasses.replace(point, configuration=conf)
        if k == 0:  # the system's own configuration: the inputs built above
            p = first
        else:
            setup = point_setup(ws, sim, dataclasses.replace(pt, memory_check="warn"))
            need, have = memory_need(setup, first.pair, point.batch, point.seq_len)
            if need > max(have, first.memory[0]):
                continue
            if setup.policy in COST_AWARE or first.lengths is None:
                p = with_setup(ws, sim, pt, setup, first.prompts, first.out, streams, models, taus)
            else:  # the draft lengths read only the streams: the same for every configuration
                p = dataclasses.replace(first, setup=setup, memory=(need, have))
        tried.append((pt, p))
    screen = min(sim.search.screen_replicas, sim.replicas)
    # screened: each candidate's (tables, replica logs); tput: its throughput, all the comparison reads (the
    # rest of the accounting is the kept candidate's alone)
    tput, screened, shared, digests, seen = [], [], {}, {}, {}
    # the pool trigger changes no pass cost: candidates that differ only there share their tables; every
    # candidate has the same target passes and those of one draft placement the same draft passes (``PassTables``'
    # reuse), so those with the fewest micro-batches build first (their passes serve the most requests) and the
    # others take their tables' first rows; built over the point's whole workload, so the one kept runs its
    # further replicas on them
    for pt, p in sorted(tried, key=lambda c: c[1].setup.micro_batching.micro_batches) if len(tried) > 1 else ():
        key = dataclasses.replace(pt.configuration, pool_trigger=None)
        if key not in shared:
            shared[key] = pass_tables(p.setup, p.pair, p.workload, p.serving, (*earlier, *shared.values()))
            digests[key] = tables_digest(shared[key])
    for pt, p in tried if len(tried) > 1 else ():
        few = first_replicas(p, screen)
        key = dataclasses.replace(pt.configuration, pool_trigger=None)
        # a candidate the loop cannot tell from an earlier one (e.g. the same draft tables under another
        # placement's name) runs the same: its result is the earlier's, and a tie keeps the earlier
        arrays = (p.prompts, p.out, p.accept, p.confidence, p.confidence_later, p.lengths, p.light_lengths)
        same = (loop_key(few.setup, shared[key], few.serving, digests[key]), *(id(a) for a in arrays), p.light_at_most)
        if same in seen:
            tput.append(tput[seen[same]])
            screened.append(screened[seen[same]])
            continue
        seen[same] = len(tput)
        screened.append(replica_logs(few.setup, few.pair, few.workload, few.serving, tables=shared[key]))
        tput.append(float(throughput(screened[-1][1], few.serving).mean()))
    if built is not None:
        built.extend(shared.values())
    best = fastest(tput)
    pt, p = tried[best]
    if not tput:
        result = simulate_point(p, tables=own_tables(p) if built is not None else None)
    else:  # the kept candidate's screened replicas are its first: only the rest run (never a copied run's:
        # a copy ties with the earlier candidate it copies, and a tie keeps the earlier)
        tables, done = screened[best]
        if screen == sim.replicas:
            result = result_of(p.setup, tables, done, p.serving)
        else:
            result = simulate_point(p, tables=tables, done=done)
    tput = tput or [1.0]
    return Searched(pt, p, result, len(tried), tput[best] / tput[0])


def run_point(
    ws,
    sim: SimulationSettings,
    point: Point,
    models: dict,
    taus: dict[str, float] | None = None,
    drawn=None,
    found: Searched | None = None,
    built: list | None = None,
) -> dict:
    """One configuration point simulated under ``sim``, as a table row: the search's configuration
    (``search_point``, or ``found`` where the caller already ran it), then blocks of ``sim.replicas``
    replicas until its throughput's 95 % interval meets ``sim.precision`` (``adsl.settings.Precision``);
    ``drawn``: see ``point_inputs``; ``built``: see ``search_point``."""
    found = found or search_point(ws, sim, point, models, taus, drawn, built)
    point, p = found.point, found.inputs
    runs = [found.result]
    blocks = max(1, sim.precision.max_replicas // sim.replicas)
    while len(runs) < blocks:
        tput = np.concatenate([r.throughput_tok_s for r in runs])
        if sim.precision.met(ci95(tput), float(tput.mean())):
            break
        runs.append(simulate_point(point_inputs(ws, sim, point, models, taus, block=len(runs))))
    row = point_row(p, concat(runs), point.pair, point.system, point.draft_length)
    return row | {
        "precision_met": sim.precision.met(row["throughput_ci95"], row["throughput_tok_s"]),
        "configuration": point.configuration.label,
        "search_candidates": found.candidates,
        "search_gain": found.gain,
    }


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
        throughput_ci95=ci95(res.throughput_tok_s),
        throughput_replicas=res.throughput_tok_s.tolist(),  # replica i: the same streams in every system
        replicas=int(res.time_s.size),
        tokens_per_j=float(res.tokens_per_j.mean()),
        tokens_per_j_ci95=ci95(res.tokens_per_j),
        tokens_per_j_replicas=res.tokens_per_j.tolist(),
        time_s=float(res.time_s.mean()),
        tokens=int(res.tokens[0]),
        window_tokens=float(res.tokens.mean()),  # the stage and time columns' token count (replica mean)
        micro_batches=res.placement.get("micro_batches", float(setup.micro_batching.micro_batches)),
        eager_drafted=float(np.mean(res.pool.get("eager", 0.0))),
        eager_migrated=float(np.mean(res.pool.get("migrated", 0.0))),
        eager_discarded=float(np.mean(res.pool.get("discarded", 0.0))),
        iterations=float(res.iterations.mean()),
        window_start_s=float(res.window["start_s"].mean()),
        window_end_s=float(res.window["end_s"].mean()),
        window_completed=float(res.window["completed"].mean()),
        run_time_s=float(res.window["total_s"].mean()),  # as far as the run went (to its window's end unless drained)
        gpu_util=busy.get("gpu", 0.0),
        pim_util=busy.get("pim", 0.0),
        mean_draft_length=float(np.mean(res.drafted / rounds)) if setup.decoding == "sd" else float("nan"),
        static_power_w=setup.system.static_power_w if setup.static_power else 0.0,
        draft_placement=setup.draft_placement if setup.decoding == "sd" else "",
        pool_trigger=setup.pool_trigger if setup.eager else "",
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
    points = []
    for pair in exp.pairs:
        for system, batch, d, seq in itertools.product(
            exp.systems, exp.batches, exp.draft_lengths or [sim.draft_length], exp.seq_lens or [sim.seq_len(pair)]
        ):
            speculative = SYSTEMS[system].speculative if system in SYSTEMS else True
            for policy in (exp.policies if speculative else ()) or [None]:
                # batch_schedule: the system runs with the table's d (at least 1; a draft of 0 tokens is none)
                d_point = max(schedule_length(sim.policies.schedule, batch), 1) if policy == "batch_schedule" else d
                points.append(Point(pair, system, batch, d_point, seq, exp.memory_check, policy))
    return points


def check_experiments(ws) -> int:
    """Build every configured experiment point whose ``memory_check`` is ``error`` as its job will
    (``point_setup``), so a batch that cannot fit stops the run before any job starts; returns the number
    of points checked."""
    checked = 0
    for name, exp in ws.settings.simulation.experiments.items():
        sim = ws.settings.simulation.for_experiment(name)
        for point in experiment_points(sim, exp):
            if point.memory_check == "error":
                try:
                    point_setup(ws, sim, point)
                except SimError as exc:
                    raise SimError(
                        f"simulation.experiments.{name}: {exc} (memory_check: warn runs it flagged)"
                    ) from exc
                checked += 1
    return checked


def run_experiment(
    ws, name: str, model_paths: dict[str, dict[str, str]], taus: dict[str, dict[str, float]] | None = None
) -> pd.DataFrame:
    """Experiment ``name`` of the workspace's simulation settings. ``model_paths``: pair -> category ->
    acceptance-model file; ``taus``: pair -> category -> tau (needed by the adaptive systems)."""
    sim = ws.settings.simulation.for_experiment(name)
    exp = ws.settings.simulation.experiments[name]
    models = {pair: {c: read_model(p) for c, p in model_paths[pair].items()} for pair in exp.pairs}
    drawn: dict = {}  # the streams of each (pair, batch, sequence length), drawn once for every system
    # the search of the current (pair, system, batch, d, sequence length): the points of its policies
    # follow one another (``experiment_points``)
    last: dict[tuple, Searched] = {}

    def configured(pt: Point) -> tuple[Point, Searched | None]:
        """A point of the policy zoo runs the configuration searched once under its system's own policy
        (the zoo compares policies on one configured system): the own policy's point is that search's,
        the others run its configuration."""
        entry = SYSTEMS.get(pt.system)
        if pt.policy is None or entry is None:
            return pt, None
        key = (pt.pair, pt.system, pt.batch, pt.draft_length, pt.seq_len)
        if key not in last:
            last.clear()
            own = dataclasses.replace(pt, policy=None)
            last[key] = search_point(ws, sim, own, models[pt.pair], (taus or {}).get(pt.pair), drawn)
        found = last[key]
        if pt.policy == entry.policy:
            return pt, dataclasses.replace(found, point=dataclasses.replace(found.point, policy=pt.policy))
        return dataclasses.replace(pt, configuration=found.point.configuration), None

    rows = []
    for pt in progress(experiment_points(sim, exp), f"experiment {name}: configuration point"):
        pt, found = configured(pt)
        row = run_point(ws, sim, pt, models[pt.pair], (taus or {}).get(pt.pair), drawn, found)
        rows.append(row | {"experiment": name})
    df = pd.DataFrame(rows)
    # AD rows do not depend on d: keep one per (pair, system, batch, seq_len)
    keys = ["pair", "system", "batch", "draft_length", "seq_len", "policy"]
    return df.drop_duplicates(subset=keys).reset_index(drop=True)
