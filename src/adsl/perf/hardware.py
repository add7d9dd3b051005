"""GPUs, HBM-PIM stacks, software runtimes and whole systems as typed, frozen records."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from adsl.config import catalogue_schema, read_yaml, validate
from adsl.errors import ConfigError

OP_CLASSES = ("fc", "attention", "softmax", "norm", "act")


@dataclass(frozen=True)
class GPUSpec:
    name: str
    peak_flops: float
    mem_bw_bytes_s: float
    mem_capacity_bytes: float
    link_bw_bytes_s: float
    eta_compute: float
    eta_memory: float
    hbm_read_pj_per_byte: float
    pj_per_flop: float
    link_pj_per_byte: float
    static_power_w: float | None  # board power whatever the work (None: unknown)


@dataclass(frozen=True)
class PIMSpec:
    name: str
    capacity_bytes: float
    pin_rate_gbps: float
    external_bw_bytes_s: float
    kappa_power_limited: float
    kappa_unlimited: float
    power_limited: bool
    flop_per_internal_byte: float
    call_fixed_s: float
    kv_granularity_tokens: int
    queries_per_pass: int
    bank_read_pj_per_byte: float
    buffer_read_pj_per_byte: float
    pj_per_flop: float
    static_power_w: float  # background (standby + refresh) power of one stack
    access: str = "exclusive"  # exclusive | dual_row_buffer: may normal (GPU) accesses overlap PIM compute

    @property
    def exclusive(self) -> bool:
        return self.access == "exclusive"

    @property
    def kappa(self) -> float:
        return self.kappa_power_limited if self.power_limited else self.kappa_unlimited

    @property
    def internal_bw_bytes_s(self) -> float:
        return self.external_bw_bytes_s * self.kappa

    @property
    def pe_flops(self) -> float:
        return self.internal_bw_bytes_s * self.flop_per_internal_byte


@dataclass(frozen=True)
class RuntimeSpec:
    name: str
    fixed_s: dict
    allreduce_base_s: float
    allreduce_step_s: float
    # True: the host issues kernels ahead of the GPU (eager PyTorch), so a kernel takes the longer of its
    # GPU time and the host's time per kernel; False: the fixed cost adds to the GPU time (fitted so)
    async_launch: bool = False
    # GPU attention time as a multiple of its roofline (1: the roofline; the AttAcc simulator charges
    # GPT-3's GPU attention about 8x its bytes bound, an assumption only the attribution study switches on)
    attention_time_factor: float = 1.0


@dataclass(frozen=True)
class SystemSpec:
    name: str
    gpu: GPUSpec
    gpus: int
    tensor_parallel: int
    pipeline_stages: int
    pim: PIMSpec | None
    stacks_per_gpu: int
    weights_in: str
    runtime: RuntimeSpec

    @property
    def stacks(self) -> int:
        return self.gpus * self.stacks_per_gpu

    @property
    def shared_stacks(self) -> bool:
        """Whether a device's GPU work and its stacks' PIM compute take turns: the GPU reads its weights
        from the stacks and they serve no normal access while computing (``PIMSpec.access``)."""
        return self.weights_in == "pim" and self.pim is not None and self.pim.exclusive

    @property
    def weight_bw_bytes_s(self) -> float:
        """Bandwidth at which the GPU streams weights: its own HBM, or the stacks' external links."""
        if self.weights_in == "pim":
            return self.stacks_per_gpu * self.pim.external_bw_bytes_s
        return self.gpu.mem_bw_bytes_s

    @property
    def memory_capacity_bytes(self) -> float:
        own = 0.0 if self.weights_in == "pim" else self.gpu.mem_capacity_bytes * self.gpus
        stacks = self.stacks * self.pim.capacity_bytes if self.pim else 0.0
        return own + stacks

    @property
    def static_power_w(self) -> float:
        """Power the system draws over wall time whatever it computes: every GPU board and PIM stack."""
        if self.gpu.static_power_w is None:
            raise ValueError(f"system {self.name!r}: GPU {self.gpu.name!r} has no static_power_w (unknown)")
        return self.gpus * self.gpu.static_power_w + self.stacks * (self.pim.static_power_w if self.pim else 0.0)

    def replace(self, **changes) -> SystemSpec:
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class HardwareCatalogue:
    gpus: dict[str, GPUSpec]
    pims: dict[str, PIMSpec]
    runtimes: dict[str, RuntimeSpec]
    systems: dict[str, SystemSpec]

    def system(self, name: str) -> SystemSpec:
        if name not in self.systems:
            raise KeyError(f"unknown system {name!r}; known: {sorted(self.systems)}")
        return self.systems[name]


def _ref(path, field, name, table):
    if name not in table:
        raise ConfigError(str(path), field, f"unknown name {name!r}; known: {sorted(table)}")
    return table[name]


def load_hardware(
    path: str | Path, overrides: dict | None = None, raw: dict | None = None, schema: dict | None = None
) -> HardwareCatalogue:
    """The catalogue at ``path``, with ``overrides`` (the same nesting as the file) laid over it first;
    either way the result is checked against the catalogue schema. ``raw`` and ``schema``: the file's
    content and the schema's ``hardware_file`` part where already read (``adsl.workspace.Sources``; neither
    is changed)."""
    from adsl.config import merged

    raw = read_yaml(path) if raw is None else raw
    if overrides:
        raw = merged(raw, overrides)
    raw = validate(raw, schema or catalogue_schema("hardware_file"), str(path), fill_defaults=False)
    gpus = {n: GPUSpec(name=n, **v) for n, v in raw["gpus"].items()}
    pims = {n: PIMSpec(name=n, **v) for n, v in raw["pim_stacks"].items()}
    runtimes = {n: RuntimeSpec(name=n, **v) for n, v in raw["runtimes"].items()}
    systems = {}
    for n, v in raw["systems"].items():
        where = f"systems.{n}"
        pim = None if v["pim"] is None else _ref(path, f"{where}.pim", v["pim"], pims)
        if v["gpus"] % (v["tensor_parallel"] * v["pipeline_stages"]):
            raise ConfigError(str(path), f"{where}.gpus", "must be a multiple of tensor_parallel x pipeline_stages")
        if (pim is None) != (v["stacks_per_gpu"] == 0):
            raise ConfigError(str(path), f"{where}.stacks_per_gpu", "must be > 0 exactly when pim is set")
        if v["weights_in"] == "pim" and pim is None:
            raise ConfigError(str(path), f"{where}.weights_in", "'pim' needs a pim stack type")
        systems[n] = SystemSpec(
            name=n,
            gpu=_ref(path, f"{where}.gpu", v["gpu"], gpus),
            gpus=v["gpus"],
            tensor_parallel=v["tensor_parallel"],
            pipeline_stages=v["pipeline_stages"],
            pim=pim,
            stacks_per_gpu=v["stacks_per_gpu"],
            weights_in=v["weights_in"],
            runtime=_ref(path, f"{where}.runtime", v["runtime"], runtimes),
        )
    return HardwareCatalogue(gpus, pims, runtimes, systems)


def gpu_only_system(gpu: GPUSpec, n: int, runtime: RuntimeSpec, name: str | None = None) -> SystemSpec:
    """A tensor-parallel group of ``n`` GPUs without PIM (for anchors measured on plain GPUs)."""
    return SystemSpec(
        name=name or f"{gpu.name}-tp{n}",
        gpu=gpu,
        gpus=n,
        tensor_parallel=n,
        pipeline_stages=1,
        pim=None,
        stacks_per_gpu=0,
        weights_in="gpu",
        runtime=runtime,
    )
