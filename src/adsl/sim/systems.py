"""System registry: name -> function(deployment) -> engine Setup. Adding a system is one function plus
one line in SYSTEMS."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from adsl.perf.cost import default_mapping
from adsl.perf.hardware import HardwareCatalogue
from adsl.perf.models import Pair
from adsl.settings import MicroBatching, SystemChoice
from adsl.sim.mapping import search_static_mapping
from adsl.sim.placement import place_draft
from adsl.sim.setup import Setup


@dataclass(frozen=True)
class Deployment:
    """What a system is built for at a configuration point: the catalogues' hardware, the model pair, the
    batch, the longest sequence, the SD baselines' d and the simulation's switches (``dep`` in the
    registry's functions; ``ctx`` is a context length everywhere in the simulator)."""

    hardware: HardwareCatalogue
    pair: Pair
    batch: int
    max_seq_len: int
    draft_length: int  # the SD baselines' fixed d
    systems: SystemChoice  # which hardware system each family runs on, pool capacity, micro-batching
    draft_placement: str = "tensor_parallel"  # or replicated | pim (adsl.sim.placement)
    draft_split: str = "inherit"  # micro-batch split of draft passes: best | always | inherit (as the verification's)
    micro_batch_verification: bool = True  # SpecPIM-style systems verify each micro-batch on its own
    static_power: bool = False
    controller_step_s: float = 0.0  # the Controller's decision per draft step (adsl.sim.tables.NO_CONTROLLER)
    pool_trigger: str = "complete"  # when SADDLE's Shared Pool is verified: idle | complete
    micro_batches: int | None = None  # micro-batches (Draft Generators with a pool); None: the system's count

    @classmethod
    def of(cls, hardware, pair: Pair, batch: int, max_seq_len: int, draft_length: int, sim) -> Deployment:
        """A point's deployment under the simulation settings ``sim`` (``adsl.settings.SimulationSettings``)."""
        return cls(
            hardware,
            pair,
            batch,
            max_seq_len,
            draft_length,
            sim.systems,
            draft_placement=sim.draft_placement,
            draft_split=sim.draft_split,
            micro_batch_verification=sim.micro_batch_verification,
            static_power=sim.static_power,
            controller_step_s=sim.controller_step_s,
            pool_trigger=sim.pool_trigger,
        )


def _micro_batching(dep: Deployment, system_name: str) -> MicroBatching:
    mb = dep.systems.micro_batching_of(system_name)
    return mb if dep.micro_batches is None else dataclasses.replace(mb, micro_batches=dep.micro_batches)


def _gpu(dep: Deployment, name: str, decoding: str) -> Setup:
    system = dep.hardware.system(dep.systems.gpu_system)
    m = default_mapping(system)
    d = dep.draft_length if decoding == "sd" else 0
    return Setup(name, system, decoding, d, m, m, _micro_batching(dep, dep.systems.gpu_system))


def gpu_ad(dep: Deployment) -> Setup:
    """GPU-AD: autoregressive decoding on the GPU system (``systems.gpu_system``)."""
    return _gpu(dep, "GPU-AD", "ad")


def gpu_sd(dep: Deployment) -> Setup:
    """GPU-SD: speculative decoding with the fixed draft length on the GPU system."""
    return _gpu(dep, "GPU-SD", "sd")


def pim_ad(dep: Deployment) -> Setup:
    """AttAcc: attention in the PIM stacks, FC on the GPUs."""
    system = dep.hardware.system(dep.systems.pim_system)
    m = {"fc": "gpu", "attention": "pim"}
    return Setup("PIM-AD", system, "ad", 0, m, m, _micro_batching(dep, dep.systems.pim_system))


def _static_sd(dep: Deployment, name: str, system_name: str) -> Setup:
    system = dep.hardware.system(system_name)
    # SpecPIM-style: every micro-batch is verified on its own. The modelled systems require it: SADDLE's
    # Shared Pool is by definition what merges the micro-batches' verification (its ablation chain PIM-SD
    # -> SADDLE-d -> SADDLE-p changes one thing at a time), so PIM-SD and SADDLE-d keep the split.
    split = "always" if dep.micro_batch_verification else "best"
    sched = dataclasses.replace(_micro_batching(dep, system_name), split=split)
    draft_map, target_map, _ = search_static_mapping(
        dep.pair, system, dep.batch, dep.draft_length, dep.max_seq_len, sched
    )
    return Setup(name, system, "sd", dep.draft_length, target_map, draft_map, sched)


def pim_sd(dep: Deployment) -> Setup:
    """SpecPIM-style: static mapping searched for the initial batch and the maximum sequence length."""
    return _static_sd(dep, "PIM-SD", dep.systems.pim_system)


def motivation_ad(dep: Deployment) -> Setup:
    """AD of the motivation study: autoregressive, attention in the PIM stacks, FC on the GPUs."""
    system = dep.hardware.system(dep.systems.motivation_system)
    m = {"fc": "gpu", "attention": "pim"}
    return Setup("AD", system, "ad", 0, m, m, _micro_batching(dep, dep.systems.motivation_system))


def motivation_sd(dep: Deployment) -> Setup:
    """SD of the motivation study: SpecPIM-style static mapping on the motivation system."""
    return _static_sd(dep, "SD", dep.systems.motivation_system)


def _saddle_static(dep: Deployment, name: str) -> Setup:
    """SADDLE hardware with the SpecPIM-style static mapping and the adaptive (running-product) policy."""
    base = _static_sd(dep, name, dep.systems.saddle_system)
    return dataclasses.replace(base, policy="running_product")


def saddle_d(dep: Deployment) -> Setup:
    """Ablation SADDLE-d: adaptive draft length only; strict draft/verify alternation per micro-batch,
    static mapping frozen for the run."""
    return _saddle_static(dep, "SADDLE-d")


def saddle_p(dep: Deployment) -> Setup:
    """Ablation SADDLE-p: + Shared Pool (one pooled verification of at most C tokens), still sequential."""
    return dataclasses.replace(_saddle_static(dep, "SADDLE-p"), pool_tokens=dep.systems.pool_tokens)


def _fixed_roles(dep: Deployment, name: str, dynamic: bool) -> Setup:
    """FC on the GPU, attention on PIM for both models (the scheduler's fixed placements), Shared and
    Eager Pools, asynchronous drafting; ``dynamic`` re-places DLM FC and TLM attention per pass."""
    system = dep.hardware.system(dep.systems.saddle_system)
    m = {"fc": "gpu", "attention": "pim"}
    return Setup(
        name,
        system,
        "sd",
        dep.draft_length,
        m,
        m,
        # a Draft Generator per micro-batch; verification is pooled (adsl.sim.loop.pool_loop)
        dataclasses.replace(_micro_batching(dep, dep.systems.saddle_system), split="always"),
        policy="running_product",
        dynamic=dynamic,
        pool_tokens=dep.systems.pool_tokens,
        eager=True,
        pool_trigger=dep.pool_trigger,
    )


def saddle_s(dep: Deployment) -> Setup:
    """Ablation SADDLE-s: + Eager Pool (asynchronous pipeline) with the static FC->GPU, attention->PIM."""
    return _fixed_roles(dep, "SADDLE-s", dynamic=False)


def saddle(dep: Deployment) -> Setup:
    """SADDLE: adaptive length, Shared and Eager Pools, and the operator scheduler."""
    return _fixed_roles(dep, "SADDLE", dynamic=True)


@dataclass(frozen=True)
class SystemEntry:
    """A registered system: the function that builds its setup and its draft policy (what its acceptance
    inputs must hold: ``running_product`` needs tau per category)."""

    build: Callable[[Deployment], Setup]
    policy: str = "fixed"  # its draft-length policy (adsl.sim.policies), for speculative systems
    speculative: bool = True  # drafts and verifies (False: autoregressive decoding)

    @property
    def adaptive(self) -> bool:
        return self.policy == "running_product"


# The order here is the order figures list systems in.
SYSTEMS = {
    "GPU-AD": SystemEntry(gpu_ad, speculative=False),
    "GPU-SD": SystemEntry(gpu_sd),
    "PIM-AD": SystemEntry(pim_ad, speculative=False),
    "PIM-SD": SystemEntry(pim_sd),
    "AD": SystemEntry(motivation_ad, speculative=False),
    "SD": SystemEntry(motivation_sd),
    "SADDLE-d": SystemEntry(saddle_d, "running_product"),
    "SADDLE-p": SystemEntry(saddle_p, "running_product"),
    "SADDLE-s": SystemEntry(saddle_s, "running_product"),
    "SADDLE": SystemEntry(saddle, "running_product"),
}


def in_order(names) -> list[str]:
    """``names`` in the registry's order (registered systems first, any others after, as given)."""
    rank = {n: i for i, n in enumerate(SYSTEMS)}
    return sorted(dict.fromkeys(names), key=lambda n: rank.get(n, len(rank)))


def adaptive(names) -> bool:
    """Whether any of the systems ``names`` drafts adaptively (and so needs tau)."""
    return any(SYSTEMS[n].adaptive for n in names if n in SYSTEMS)


def build(name: str, dep: Deployment) -> Setup:
    """The registered system's setup with the run's serving choices: draft placement and draft split
    (speculative systems) and static power."""
    if name not in SYSTEMS:
        raise KeyError(f"unknown system {name!r}; known: {sorted(SYSTEMS)}")
    entry = SYSTEMS[name]
    setup = dataclasses.replace(
        entry.build(dep), static_power=dep.static_power, controller_step_s=dep.controller_step_s
    )
    if setup.policy != entry.policy:
        raise ValueError(f"{name}: registered with policy {entry.policy!r} but builds {setup.policy!r}")
    if setup.decoding != "sd":
        return setup
    setup = dataclasses.replace(setup, draft_split=None if dep.draft_split == "inherit" else dep.draft_split)
    placement, copies, mapping = place_draft(setup.system, setup.draft_mapping, dep.draft_placement)
    return dataclasses.replace(setup, draft_copies=copies, draft_mapping=mapping, draft_placement=placement)
