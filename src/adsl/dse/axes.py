"""The axes a sweep may vary: a registry of name -> function that lays one axis value into a
configuration (simulation overrides, hardware-catalogue overrides, point fields, tau scale). Adding an
axis is one function, one line in ``AXES`` and its name in the schema's list."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from adsl.config import merged
from adsl.sim.systems import SYSTEMS


@dataclass
class Configuration:
    """What a configuration changes, built axis by axis (``configure``)."""

    simulation: dict = field(default_factory=dict)  # laid over the sweep's simulation settings
    hardware: dict = field(default_factory=dict)  # laid over the hardware catalogue
    point: dict = field(default_factory=dict)  # adsl.sim.experiment.Point fields (pair, batch, ...)
    policy: str | None = None  # the draft-length policy of the systems that draft by the running product
    tau_scale: float = 1.0


def _hw(c: Configuration, over: dict) -> None:
    c.hardware = merged(c.hardware, over)


def _sim(c: Configuration, over: dict) -> None:
    c.simulation = merged(c.simulation, over)


def _pim_systems(ws) -> list[str]:
    s = ws.settings.simulation.systems
    return sorted({s.pim_system, s.saddle_system})


def _all_systems(ws) -> list[str]:
    s = ws.settings.simulation.systems
    return sorted({s.gpu_system, s.pim_system, s.saddle_system})


def _stacks_of(ws) -> list[str]:
    return sorted({ws.hardware.system(n).pim.name for n in _pim_systems(ws) if ws.hardware.system(n).pim})


def pim_stacks_per_gpu(ws, c: Configuration, v) -> None:
    """PIM stacks per GPU of the PIM systems (memory, PIM bandwidth and the GPU's weight bandwidth scale)."""
    _hw(c, {"systems": {n: {"stacks_per_gpu": int(v)} for n in _pim_systems(ws)}})


def pim_bandwidth(ws, c: Configuration, v) -> None:
    """Internal over external bandwidth of a PIM stack under its power limit (the paper's 9x)."""
    key = "kappa_power_limited" if all(ws.hardware.pims[p].power_limited for p in _stacks_of(ws)) else "kappa_unlimited"
    _hw(c, {"pim_stacks": {p: {key: float(v)} for p in _stacks_of(ws)}})


def gpus(ws, c: Configuration, v) -> None:
    """GPUs of every system, as tensor-parallel ranks (or pipeline stages where the system pipelines)."""
    over = {}
    for n in _all_systems(ws):
        s = ws.hardware.system(n)
        over[n] = {
            "gpus": int(v),
            **({"pipeline_stages": int(v)} if s.pipeline_stages > 1 else {"tensor_parallel": int(v)}),
        }
    _hw(c, {"systems": over})


def allreduce_step_s(ws, c: Configuration, v) -> None:
    """Seconds per step of a ring all-reduce (and of a stage-to-stage transfer) in every system's runtime."""
    runtimes = sorted({ws.hardware.system(n).runtime.name for n in _all_systems(ws)})
    _hw(c, {"runtimes": {r: {"allreduce_step_s": float(v)} for r in runtimes}})


def queries_per_pass(ws, c: Configuration, v) -> None:
    """Query vectors a PIM PE holds per K/V sweep."""
    _hw(c, {"pim_stacks": {p: {"queries_per_pass": int(v)} for p in _stacks_of(ws)}})


def pool_tokens(ws, c: Configuration, v) -> None:
    """The Shared Pool's capacity C (tokens)."""
    _sim(c, {"systems": {"pool_tokens": int(v)}})


def micro_batches(ws, c: Configuration, v) -> None:
    """Micro-batches (Draft Generators) of the PIM systems; the search still may verify one batch."""
    _sim(c, {"systems": {n: {"micro_batches": int(v)} for n in _pim_systems(ws)}})


def _point(name: str, cast: Callable) -> Callable:
    def apply(ws, c: Configuration, v) -> None:
        c.point[name] = cast(v)

    apply.__doc__ = f"The point's {name}."
    return apply


def policy(ws, c: Configuration, v) -> None:
    """The draft-length policy of the systems that draft by the running product (SADDLE and its ablations)."""
    c.policy = str(v)


def tau_scale(ws, c: Configuration, v) -> None:
    """tau of every category times this factor."""
    c.tau_scale = float(v)


def category(ws, c: Configuration, v) -> None:
    """Every request of one category (the default cycles through the configured ones)."""
    _sim(c, {"categories": [str(v)]})


AXES: dict[str, Callable[[Any, Configuration, Any], None]] = {
    "pim_stacks_per_gpu": pim_stacks_per_gpu,
    "pim_bandwidth": pim_bandwidth,
    "gpus": gpus,
    "allreduce_step_s": allreduce_step_s,
    "queries_per_pass": queries_per_pass,
    "pool_tokens": pool_tokens,
    "micro_batches": micro_batches,
    "pair": _point("pair", str),
    "policy": policy,
    "tau_scale": tau_scale,
    "draft_length": _point("draft_length", int),
    "batch": _point("batch", int),
    "seq_len": _point("seq_len", int),
    "category": category,
}


# what each axis takes: whole numbers, numbers or names (a range needs a numeric axis)
WHOLE = (
    "pim_stacks_per_gpu",
    "gpus",
    "queries_per_pass",
    "pool_tokens",
    "micro_batches",
    "draft_length",
    "batch",
    "seq_len",
)
NAMES = ("pair", "policy", "category")

# the workload's axes: what a capacity search holds at ``dse.base`` so capacities compare hardware and serving
WORKLOAD = ("pair", "seq_len", "category")


def configure(ws, values: dict[str, Any]) -> Configuration:
    """The configuration of one row of the design (axis name -> value)."""
    c = Configuration()
    for name, v in values.items():
        AXES[name](ws, c, v)
    return c


@dataclass(frozen=True)
class Configured:
    """One configuration ready to simulate: its workspace (settings and catalogue with the overrides laid
    over them) and what its points share."""

    ws: Any
    fields: dict  # pair, batch, seq_len, draft_length
    policy: str | None
    tau_scale: float

    @property
    def pair(self) -> str:
        return self.fields["pair"]

    def point(self, system: str):
        """The system's point (its own policy unless the policy axis sets a running-product system's)."""
        from adsl.sim.experiment import Point

        policy = self.policy if self.policy and own_policy(system) == "running_product" else None
        f = self.fields
        return Point(f["pair"], system, f["batch"], f["draft_length"], f["seq_len"], "warn", policy)

    def taus(self, taus: dict) -> dict | None:
        """tau per category of the configuration's pair, scaled (None: no tau for the pair)."""
        return {k: t * self.tau_scale for k, t in taus.get(self.pair, {}).items()} or None


def configured(ws, values: dict[str, Any], workload: bool = True) -> Configured:
    """The configuration of one row of the design, laid over the sweep's settings; ``workload`` False
    keeps the workload axes (``WORKLOAD``) at the sweep's base."""
    from adsl.settings import plain

    dse = ws.settings.dse
    c = configure(ws, {k: v for k, v in values.items() if workload or k not in WORKLOAD})
    wc = ws.with_overrides(merged(plain(dse.simulation), c.simulation), c.hardware)
    return Configured(wc, {**dse.base, **c.point}, c.policy, c.tau_scale)


def own_policy(system: str) -> str | None:
    """The registered system's own draft-length policy (None: not speculative)."""
    entry = SYSTEMS.get(system)
    return entry.policy if entry is not None and entry.speculative else None
