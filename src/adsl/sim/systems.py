"""System registry: name -> function(context) -> engine Setup. Adding a system is one function plus
one line in SYSTEMS."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from adsl.perf.cost import default_mapping
from adsl.perf.hardware import HardwareCatalogue
from adsl.perf.models import Pair
from adsl.sim.engine import Setup
from adsl.sim.mapping import search_static_mapping
from adsl.sim.timing import Schedule


@dataclass(frozen=True)
class Context:
    hardware: HardwareCatalogue
    pair: Pair
    batch: int
    max_seq_len: int
    draft_length: int  # the SD baselines' fixed d
    settings: dict  # config["simulation"]["systems"]


def _schedule(ctx: Context, system_name: str) -> Schedule:
    s = ctx.settings.get(system_name, {})
    return Schedule(micro_batches=s.get("micro_batches", 1), overlap=s.get("overlap", False))


def _gpu(ctx: Context, name: str, decoding: str) -> Setup:
    system = ctx.hardware.system(ctx.settings["gpu_system"])
    m = default_mapping(system)
    d = ctx.draft_length if decoding == "sd" else 0
    return Setup(name, system, decoding, d, m, m, _schedule(ctx, ctx.settings["gpu_system"]))


def gpu_ad(ctx: Context) -> Setup:
    return _gpu(ctx, "GPU-AD", "ad")


def gpu_sd(ctx: Context) -> Setup:
    return _gpu(ctx, "GPU-SD", "sd")


def pim_ad(ctx: Context) -> Setup:
    """AttAcc: attention in the PIM stacks, FC on the GPUs."""
    system = ctx.hardware.system(ctx.settings["pim_system"])
    m = {"fc": "gpu", "attention": "pim"}
    return Setup("PIM-AD", system, "ad", 0, m, m, _schedule(ctx, ctx.settings["pim_system"]))


def _static_sd(ctx: Context, name: str, system_name: str) -> Setup:
    system = ctx.hardware.system(system_name)
    sched = _schedule(ctx, system_name)
    draft_map, target_map, _ = search_static_mapping(
        ctx.pair, system, ctx.batch, ctx.draft_length, ctx.max_seq_len, sched
    )
    return Setup(name, system, "sd", ctx.draft_length, target_map, draft_map, sched)


def pim_sd(ctx: Context) -> Setup:
    """SpecPIM-style: static mapping searched for the initial batch and the maximum sequence length."""
    return _static_sd(ctx, "PIM-SD", ctx.settings["pim_system"])


def motivation_ad(ctx: Context) -> Setup:
    system = ctx.hardware.system(ctx.settings["motivation_system"])
    m = {"fc": "gpu", "attention": "pim"}
    return Setup("AD", system, "ad", 0, m, m, _schedule(ctx, ctx.settings["motivation_system"]))


def motivation_sd(ctx: Context) -> Setup:
    return _static_sd(ctx, "SD", ctx.settings["motivation_system"])


def saddle_d(ctx: Context) -> Setup:
    """Ablation SADDLE-d: PIM-SD with per-request adaptive draft length (running product < tau, capped
    at the SD baselines' d), still a strict draft/verify alternation with the frozen static mapping."""
    base = _static_sd(ctx, "SADDLE-d", ctx.settings["pim_system"])
    return dataclasses.replace(base, policy="running_product")


SYSTEMS = {
    "GPU-AD": gpu_ad,
    "GPU-SD": gpu_sd,
    "PIM-AD": pim_ad,
    "PIM-SD": pim_sd,
    "AD": motivation_ad,
    "SD": motivation_sd,
    "SADDLE-d": saddle_d,
}


def build(name: str, ctx: Context) -> Setup:
    if name not in SYSTEMS:
        raise KeyError(f"unknown system {name!r}; known: {sorted(SYSTEMS)}")
    return SYSTEMS[name](ctx)
