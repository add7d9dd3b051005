"""The workflow configuration as typed, frozen settings.

``config/schema.yaml`` is the gate: ``adsl.config.load_config`` validates a configuration and fills its
defaults; ``Settings.parse`` then turns the validated dict into the dataclasses below, once, and library
functions take these instead of dicts. A section a caller did not receive (a Snakemake rule passes only
the sections its function reads) is a ``Missing`` placeholder that names itself when touched.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

SECTIONS = (
    "seed",
    "catalogues",
    "anchors_dir",
    "extensions",
    "roofline",
    "profiling",
    "acceptance",
    "simulation",
    "dse",
)


class SectionMissing(AttributeError):
    """A settings section was read that the caller was not given."""


@dataclass(frozen=True)
class Missing:
    """Stands for a configuration section a rule did not pass to its function: reading it fails loudly
    (a function must receive, through the rule's params, every section it reads)."""

    section: str

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise SectionMissing(
            f"settings section {self.section!r} was read ({self.section}.{name}) but not passed; "
            "add it to the rule's params (the figure or table registry's `reads`)"
        )


def _frozen(d: Mapping | None) -> dict:
    # plain dicts (a copy): settings are pickled into Snakemake jobs and compared, never mutated
    return dict(d or {})


@dataclass(frozen=True)
class Catalogues:
    models: str  # path of the model catalogue (architectures and speculative pairs)
    hardware: str  # path of the hardware catalogue (devices, runtimes, systems)


@dataclass(frozen=True)
class RooflineSettings:
    """The paper's Fig. 6: one device's GPU and PIM rooflines and the operators of one pair placed on them."""

    system: str
    pair: str
    context_len: int
    points: tuple[tuple[int, int], ...]  # (effective batch, draft length)


@dataclass(frozen=True)
class ProfilingRun:
    """One run of the profiling plan (``adsl.profiling.run``)."""

    mode: str  # greedy | sample
    d_max: int
    max_new_tokens: int
    min_new_tokens: int
    temperature: float
    teacher_forced: bool
    prompts: Mapping[str, int | str]  # prompt-set category -> count, or "all"
    skip: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ProfilingSettings:
    name: str  # the profile folder under data/profiles/
    draft: str
    target: str
    spec_bench: str
    dolly: str | None
    device: str
    dtype: str
    threads: int
    runs: tuple[ProfilingRun, ...]
    on_mismatch: str = "warn"  # the profile's recorded settings differ from these: warn | error


@dataclass(frozen=True)
class PairDerivation:
    """How a paper pair's acceptance model is derived: calibrated to a source (``calibrate``), or the same
    calibration as another pair (``same_as``)."""

    calibrate: str | None = None  # paper_fig04a | none
    same_as: str | None = None

    @property
    def fitted(self) -> bool:
        """Whether this pair's calibration is fitted here (to published rates), not taken as measured or
        borrowed from another pair."""
        return self.calibrate not in (None, "none")


@dataclass(frozen=True)
class CalibrationSettings:
    streams: int
    positions: int
    draft_continuation: float | str  # a number, or "fit"
    applies_to: str  # confidence | acceptance
    keep_spread: bool


@dataclass(frozen=True)
class TauSettings:
    d_max: int
    window: float
    success: float
    streams: int
    positions: int


@dataclass(frozen=True)
class Fig04cSettings:
    pair: str
    draft_length: int
    iterations: int


@dataclass(frozen=True)
class AcceptanceSettings:
    categories: tuple[str, ...]
    bootstrap: int
    heldout_streams: int
    heldout_splits: int
    pairs: Mapping[str, PairDerivation]
    calibration: CalibrationSettings
    tau: TauSettings
    fig04c: Fig04cSettings

    def calibrated_to(self, source: str) -> list[str]:
        """Pairs calibrated to ``source`` (for example the paper's Fig. 4a)."""
        return [p for p, how in self.pairs.items() if how.calibrate == source]


# -- serving: request slots and micro-batches ------------------------------------------------------------
# Request slots of a serving engine: static batches or continuous (iteration-level) batching.
#
# Static (the paper's per-batch-size evaluation as we first modelled it): ``slots`` requests start
# together and the batch decodes until the last one finishes; nothing refills a finished slot.
#
# Continuous (Orca, OSDI'22; vLLM, SOSP'23): every slot holds a request while requests wait; a request
# that finishes frees its slot and the next queued request takes it when its round ends (its prompt is
# prefilled then, when ``prefill`` is on). Throughput is measured over a steady-state window: from the
# ``warmup``-th completion (the first wave starts in lock-step) to the completion after which a freed slot
# finds the queue empty (then the batch drains; ``adsl.sim.result.window``). The window is reported with
# every result so a reader can see what it covered.
#
# The event loop (``adsl.sim.loop``) keeps the slots; here are their settings.
BATCHING_MODES = ("static", "continuous")


@dataclass(frozen=True)
class Batching:
    """How a configuration point fills its ``batch`` slots (``simulation.batching`` in the config)."""

    mode: str = "static"
    requests_per_slot: int = 4  # continuous: requests served per slot in one run (queue length / slots + 1)
    warmup: float = 1.0  # continuous: the window opens after warmup x slots completions
    prefill: bool = True  # continuous: charge each admitted request's prefill pass
    # continuous: after the window the batch drains until every request has finished; without the drain
    # the run ends with the window (its results the same to the bit, the run's totals up to its end)
    drain: bool = False

    def __post_init__(self):
        if self.mode not in BATCHING_MODES:
            raise ValueError(f"batching mode must be one of {BATCHING_MODES}, got {self.mode!r}")
        if self.requests_per_slot < 1 or self.warmup < 0:
            raise ValueError("batching: requests_per_slot >= 1 and warmup >= 0 needed")
        if self.mode == "continuous" and self.warmup + 1 > self.requests_per_slot:
            raise ValueError(
                f"batching: with requests_per_slot {self.requests_per_slot} the queue empties before "
                f"warmup {self.warmup} x slots requests have finished; the steady-state window would be empty"
            )

    def requests(self, slots: int) -> int:
        """Requests one run serves."""
        return slots if self.mode == "static" else slots * self.requests_per_slot

    def serving(self, slots: int) -> Continuous | None:
        """What an engine needs: None for a static batch."""
        if self.mode == "static":
            return None
        return Continuous(slots, int(round(self.warmup * slots)), self.prefill, self.drain)


@dataclass(frozen=True)
class Continuous:
    """Continuous batching of one engine run: ``slots`` in flight, the window opens after ``warmup``
    completions, ``prefill`` charges admitted requests' prompts."""

    slots: int
    warmup: int
    prefill: bool = True
    drain: bool = True  # closed loop: run on after the window until every request has finished (``Batching``)


@dataclass(frozen=True)
class MicroBatching:
    """How a hardware system cuts a pass over its batch (``simulation.systems.<system>`` in the config)."""

    micro_batches: int = 1  # pipeline micro-batches (pipeline_stages > 1) or overlapped sub-batches
    overlap: bool = False  # overlap GPU and PIM work of different sub-batches (no pipeline stages)
    # "best": one batch or M micro-batches, whichever is faster; "always": M micro-batches, each passed
    # on its own (the SpecPIM-style baselines verify every micro-batch separately; SADDLE's Shared Pool
    # is what merges them)
    split: str = "best"

    def __post_init__(self):
        if self.split not in ("best", "always"):
            raise ValueError(f"MicroBatching.split must be 'best' or 'always', got {self.split!r}")


@dataclass(frozen=True)
class SystemChoice:
    """Which hardware system each family of simulated systems runs on, the Shared Pool's capacity and
    each hardware system's micro-batching."""

    gpu_system: str
    pim_system: str
    motivation_system: str
    saddle_system: str
    pool_tokens: int
    micro_batching: Mapping[str, MicroBatching]

    def micro_batching_of(self, system: str) -> MicroBatching:
        return self.micro_batching.get(system, MicroBatching())


@dataclass(frozen=True)
class LightLoad:
    """The Controller lowers tau to ``factor`` x tau while at most ``active_at_most`` requests are in flight."""

    active_at_most: int
    factor: float


@dataclass(frozen=True)
class Search:
    """The fair referee (``adsl.sim.search``): the knobs every system's configuration is searched over."""

    knobs: tuple[str, ...]
    screen_replicas: int  # replicas each candidate is simulated on (the first of the point's first block)


@dataclass(frozen=True)
class Precision:
    """How many replicas a point runs: blocks of ``replicas`` (fresh acceptance streams each) until the 95 %
    interval of its mean throughput is within ``target`` of the mean (0: one block), at most
    ``max_replicas``; and how long each is: under continuous batching a replica serves at least
    ``min_requests`` requests (``requests_per_slot`` x batch where that is more; 0: no minimum), so a small
    batch's window holds more than a few completions."""

    target: float
    max_replicas: int
    min_requests: int = 0

    def requests(self, batching: Batching, slots: int) -> int:
        """Requests one replica serves at ``slots``: the batching's, at least ``min_requests`` where a queue
        refills the slots (a static batch serves one request a slot)."""
        n = batching.requests(slots)
        return n if batching.mode == "static" else max(n, self.min_requests)

    def met(self, half_width: float, mean: float) -> bool:
        return self.target <= 0 or (mean > 0 and half_width <= self.target * mean)


@dataclass(frozen=True)
class PolicySettings:
    """The draft-length policy zoo (``adsl.sim.policies``)."""

    schedule: dict  # batch_schedule: {batch at most: d}
    train_streams: int  # training streams per category for the learned thresholds
    train_positions: int
    grid: int  # threshold grid points


@dataclass(frozen=True)
class TimelineSpec:
    pair: str
    batch: int
    systems: tuple[str, ...]
    passes: int


@dataclass(frozen=True)
class LengthDist:
    """A log-normal length distribution (tokens): median, sigma of its log, smallest length."""

    median: float
    sigma: float
    min: int


def _length(d: Mapping[str, Any]) -> LengthDist:
    return LengthDist(float(d["median"]), float(d["sigma"]), int(d.get("min", 1)))


@dataclass(frozen=True)
class OpenLoopSpec:
    """Open-loop serving (``adsl.sim.openloop``): Poisson arrivals on one pair."""

    pair: str
    systems: tuple[str, ...]
    policies: int | tuple[str, ...]  # the best N of the policy zoo's gap table, or these policies
    policy_system: str  # the system the policies run on
    slots: int
    requests: int  # per replica and load
    warmup: int  # arrivals before the measured window
    loads: tuple[float, ...]  # fractions of each system's saturation rate
    prompt_len: LengthDist | None  # None: the profiled prompts' lengths
    output_len: LengthDist

    @classmethod
    def parse(cls, d: Mapping[str, Any]) -> OpenLoopSpec:
        pol = d["policies"]
        return cls(
            pair=d["pair"],
            systems=tuple(d["systems"]),
            policies=pol if isinstance(pol, int) else tuple(pol),
            policy_system=d["policy_system"],
            slots=d["slots"],
            requests=d["requests"],
            warmup=d["warmup"],
            loads=tuple(float(x) for x in d["loads"]),
            prompt_len=None if d["prompt_len"] == "profile" else _length(d["prompt_len"]),
            output_len=_length(d["output_len"]),
        )


@dataclass(frozen=True)
class AttributionStep:
    name: str
    simulation: Mapping[str, Any]  # overrides of the simulation settings
    hardware: Mapping[str, Any]  # overrides of the hardware catalogue


@dataclass(frozen=True)
class ExperimentSpec:
    """One configured sweep: pairs x systems x batches x draft lengths x sequence lengths."""

    name: str
    pairs: tuple[str, ...]
    systems: tuple[str, ...]
    batches: tuple[int, ...]
    draft_lengths: tuple[int, ...]  # empty: the simulation's draft_length
    seq_lens: tuple[int, ...]  # empty: the simulation's max_seq_len for the pair
    policies: tuple[str, ...]  # draft-length policies run on each speculative system (empty: its own)
    overrides: Mapping[str, Any]
    memory_check: str  # error | warn


@dataclass(frozen=True)
class SimulationSettings:
    replicas: int
    precision: Precision
    prompt_len: int
    max_seq_len: int
    max_seq_len_by_pair: Mapping[str, int]
    draft_length: int
    categories: tuple[str, ...]
    batching: Batching
    pool_trigger: str  # complete | idle
    draft_placement: str
    search: Search
    draft_split: str
    micro_batch_verification: bool
    static_power: bool
    controller_step_s: float
    tau_light_load: LightLoad
    systems: SystemChoice
    policies: PolicySettings
    timeline: TimelineSpec
    open_loop: OpenLoopSpec
    attribution: tuple[AttributionStep, ...]
    experiments: Mapping[str, ExperimentSpec]
    raw: Mapping[str, Any] = field(repr=False, compare=False, default_factory=dict)  # the validated dict

    @classmethod
    def parse(cls, sim: Mapping[str, Any]) -> SimulationSettings:
        sys = dict(sim["systems"])
        roles = ("gpu_system", "pim_system", "motivation_system", "saddle_system", "pool_tokens")
        micro = {
            k: MicroBatching(micro_batches=v.get("micro_batches", 1), overlap=v.get("overlap", False))
            for k, v in sys.items()
            if k not in roles
        }
        return cls(
            replicas=sim["replicas"],
            precision=Precision(**sim["precision"]),
            prompt_len=sim["prompt_len"],
            max_seq_len=sim["max_seq_len"],
            max_seq_len_by_pair=_frozen(sim["max_seq_len_by_pair"]),
            draft_length=sim["draft_length"],
            categories=tuple(sim["categories"]),
            batching=Batching(**sim["batching"]),
            pool_trigger=sim["pool_trigger"],
            draft_placement=sim["draft_placement"],
            search=Search(tuple(sim["search"]["knobs"]), sim["search"]["screen_replicas"]),
            draft_split=sim["draft_split"],
            micro_batch_verification=sim["micro_batch_verification"],
            static_power=sim["static_power"],
            controller_step_s=sim["controller_step_s"],
            tau_light_load=LightLoad(**sim["tau_light_load"]),
            systems=SystemChoice(**{k: sys[k] for k in roles}, micro_batching=_frozen(micro)),
            policies=PolicySettings(**sim["policies"]),
            timeline=TimelineSpec(**{**sim["timeline"], "systems": tuple(sim["timeline"]["systems"])}),
            open_loop=OpenLoopSpec.parse(sim["open_loop"]),
            attribution=tuple(
                AttributionStep(s["name"], _frozen(s.get("simulation")), _frozen(s.get("hardware")))
                for s in sim["attribution"]
            ),
            experiments=_frozen(
                {
                    name: ExperimentSpec(
                        name=name,
                        pairs=tuple(e.get("pairs") or [e["pair"]]),
                        systems=tuple(e["systems"]),
                        batches=tuple(e["batches"]),
                        draft_lengths=tuple(e.get("draft_lengths") or ()),
                        seq_lens=tuple(e.get("seq_lens") or ()),
                        policies=tuple(e.get("policies") or ()),
                        overrides=_frozen(e.get("overrides")),
                        memory_check=e.get("memory_check", "error"),
                    )
                    for name, e in sim["experiments"].items()
                }
            ),
            raw=_frozen(sim),
        )

    def seq_len(self, pair: str) -> int:
        """The sequence length a pair decodes to (prompt + output)."""
        return self.max_seq_len_by_pair.get(pair, self.max_seq_len)

    def with_overrides(
        self, overrides: Mapping[str, Any], file: str = "config", schema: dict | None = None
    ) -> SimulationSettings:
        """These settings with ``overrides`` laid over them, checked against the schema (``schema``: the
        configuration schema where already read)."""
        from adsl.config import check_simulation, merged

        if not overrides:
            return self
        return SimulationSettings.parse(check_simulation(merged(plain(self.raw), plain(overrides)), file, schema))

    def for_experiment(self, name: str) -> SimulationSettings:
        """The settings experiment ``name`` runs with (its ``overrides`` laid over these)."""
        return self.with_overrides(self.experiments[name].overrides)


def plain(value):
    """Mappings (proxies included) and tuples back to plain dicts and lists, recursively."""
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


@dataclass(frozen=True)
class Settings:
    """The whole validated configuration; sections a caller did not receive are ``Missing``."""

    seed: int | Missing
    catalogues: Catalogues | Missing
    anchors_dir: str | Missing
    extensions: tuple[str, ...] | Missing
    roofline: RooflineSettings | Missing
    profiling: ProfilingSettings | Missing
    acceptance: AcceptanceSettings | Missing
    simulation: SimulationSettings | Missing
    dse: DseSettings | Missing

    @classmethod
    def parse(cls, cfg: Mapping[str, Any]) -> Settings:
        """Typed settings of a validated configuration (``adsl.config.load_config``); sections absent
        from ``cfg`` become ``Missing``."""
        parsers = {
            "seed": int,
            "catalogues": lambda c: Catalogues(**c),
            "anchors_dir": str,
            "extensions": tuple,
            "roofline": _roofline,
            "profiling": _profiling,
            "acceptance": _acceptance,
            "simulation": SimulationSettings.parse,
            "dse": DseSettings.parse,
        }
        return cls(**{k: parsers[k](cfg[k]) if k in cfg else Missing(k) for k in SECTIONS})


@dataclass(frozen=True)
class DseAxis:
    """One axis of the design-space exploration (``adsl.dse.axes``): discrete ``values``, or a range
    ``low``..``high`` (log-spaced with ``log``; ``levels`` points on a grid; whole numbers with
    ``integer``)."""

    name: str
    values: tuple | None = None
    low: float | None = None
    high: float | None = None
    log: bool = False
    levels: int = 3
    integer: bool = False


@dataclass(frozen=True)
class DseCapacity:
    """Capacity under the SLO (``adsl.dse.capacity``): the first ``configurations`` of the sweep, each
    system's largest Poisson rate within ``slo`` by ``steps`` bisection steps on ``requests`` arrivals."""

    configurations: int
    requests: int
    warmup: int
    steps: int
    tpot_p99_s: float
    ttft_p99_s: float | None


@dataclass(frozen=True)
class DseDraftTable:
    """The deployable draft-length table (``adsl.dse.schedule``): per (batch, sequence length) bucket, the
    fastest fixed d of each (system, pair) in ``runs``."""

    runs: tuple[tuple[str, str], ...]  # (system, pair)
    batches: tuple[int, ...]
    seq_lens: tuple[int, ...]
    draft_lengths: tuple[int, ...]


@dataclass(frozen=True)
class DseSettings:
    """A sweep of configurations x systems (``adsl.dse``): the one ``dse.sweep`` names."""

    sampling: str  # sobol (a Saltelli design over a scrambled Sobol sequence) | grid
    base_points: int  # sobol: N, a power of 2; the design has N x (axes + 2) configurations
    seed: int
    chunk_points: int  # configurations per job
    systems: tuple[str, ...]
    base: Mapping[str, Any]  # the value of every axis the sweep does not vary
    simulation: Mapping[str, Any]  # overrides of the simulation settings for the sweep's points
    axes: tuple[DseAxis, ...]
    gain: tuple[str, str]  # (system, rival): the gain the winner map and the Sobol indices describe
    winner_axes: tuple[str, str]
    cost: Mapping[str, float]  # hardware cost proxy: per GPU and per PIM stack
    bootstrap: int  # resamples of the Sobol indices' intervals
    capacity: DseCapacity
    draft_table: DseDraftTable

    @classmethod
    def parse(cls, block: Mapping[str, Any]) -> DseSettings:
        """The selected sweep (``sweep``) of a validated ``dse`` block."""
        d = block["sweeps"][block["sweep"]]
        axes = tuple(
            DseAxis(name, **{**a, "values": tuple(a["values"]) if "values" in a else None})
            for name, a in d["axes"].items()
        )
        cap, tab = d["capacity"], d["draft_table"]
        return cls(
            sampling=d["sampling"],
            base_points=d["base_points"],
            seed=d["seed"],
            chunk_points=d["chunk_points"],
            systems=tuple(d["systems"]),
            base=_frozen(d["base"]),
            simulation=_frozen(d["simulation"]),
            axes=axes,
            gain=tuple(d["gain"]),
            winner_axes=tuple(d["winner_axes"]),
            cost=_frozen(d["cost"]),
            bootstrap=d["bootstrap"],
            capacity=DseCapacity(**{k: v for k, v in cap.items() if k != "slo"}, **cap["slo"]),
            draft_table=DseDraftTable(
                runs=tuple((r["system"], r["pair"]) for r in tab["runs"]),
                batches=tuple(tab["batches"]),
                seq_lens=tuple(tab["seq_lens"]),
                draft_lengths=tuple(tab["draft_lengths"]),
            ),
        )


def _roofline(r: Mapping) -> RooflineSettings:
    points = tuple((int(p["batch"]), int(p["draft_length"])) for p in r["points"])
    return RooflineSettings(r["system"], r["pair"], r["context_len"], points)


def _profiling(p: Mapping) -> ProfilingSettings:
    runs = tuple(
        ProfilingRun(**{**r, "prompts": _frozen(r["prompts"]), "skip": _frozen(r.get("skip"))}) for r in p["runs"]
    )
    return ProfilingSettings(**{**p, "runs": runs})


def _acceptance(a: Mapping) -> AcceptanceSettings:
    return AcceptanceSettings(
        categories=tuple(a["categories"]),
        bootstrap=a["bootstrap"],
        heldout_streams=a["heldout_streams"],
        heldout_splits=a["heldout_splits"],
        pairs=_frozen({k: PairDerivation(**v) for k, v in a["pairs"].items()}),
        calibration=CalibrationSettings(**a["calibration"]),
        tau=TauSettings(**a["tau"]),
        fig04c=Fig04cSettings(**a["fig04c"]),
    )
