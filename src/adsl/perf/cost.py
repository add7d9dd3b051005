"""Device cost functions ``(op, device) -> (time_s, energy_j)`` and a whole forward pass on a system.

Everything broadcasts over numpy arrays; there is no loop over sweep points. Times are per device
(tensor-parallel shards run side by side), energies are summed over every device that works.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from adsl.perf.hardware import GPUSpec, PIMSpec, RuntimeSpec, SystemSpec
from adsl.perf.models import ModelSpec
from adsl.perf.operators import Op, decoder_ops

PJ = 1e-12
# Placement decisions concern the two heavy operator families; the light ones follow them
# (softmax with the attention it belongs to, norms and activations with the FC layers).
FOLLOWS = {"fc": "fc", "attention": "attention", "softmax": "attention", "norm": "fc", "act": "fc"}
DEVICES = ("gpu", "pim")


def gpu_op_cost(op: Op, gpu: GPUSpec, runtime: RuntimeSpec, mem_bw_bytes_s: float | None = None):
    """Roofline with efficiencies plus the runtime's fixed cost per kernel (or, for a runtime whose host
    issues kernels asynchronously, the longer of the two)."""
    bw = (mem_bw_bytes_s or gpu.mem_bw_bytes_s) * gpu.eta_memory
    roof = np.maximum(op.flops / (gpu.peak_flops * gpu.eta_compute), op.bytes / bw)
    if op.cls == "attention" and runtime.attention_time_factor != 1.0:
        roof = roof * runtime.attention_time_factor
    fixed = runtime.fixed_s[op.cls]
    t = np.maximum(roof, fixed) if runtime.async_launch else roof + fixed
    e = (op.bytes * gpu.hbm_read_pj_per_byte + op.flops * gpu.pj_per_flop) * PJ
    return t, e


def allreduce_cost(op: Op, gpu: GPUSpec, runtime: RuntimeSpec, n: int):
    """Ring all-reduce over ``n`` GPUs: n-1 steps, each a fixed latency plus a 2/n share of the
    message at half the link bandwidth (one direction), as in the AttAcc simulator."""
    if n <= 1:
        zero = 0.0 * op.bytes
        return zero, zero
    steps = n - 1
    t = runtime.allreduce_base_s + steps * (runtime.allreduce_step_s + (2.0 * op.bytes / n) / (gpu.link_bw_bytes_s / 2))
    e = 2.0 * steps * op.bytes * gpu.link_pj_per_byte * PJ
    return t, e


def transfer_cost(op: Op, gpu: GPUSpec, runtime: RuntimeSpec):
    """Point-to-point activation transfer between pipeline stages."""
    t = runtime.allreduce_step_s + op.bytes / (gpu.link_bw_bytes_s / 2)
    return t, op.bytes * gpu.link_pj_per_byte * PJ


def pim_op_cost(op: Op, pim: PIMSpec, stacks: int):
    """Cost of ``op`` on ``stacks`` HBM-PIM stacks (one GPU's share of the system).

    attention: each (request, KV head) unit lives on one stack, so a stack serves ceil(units/stacks)
    units; the KV length is rounded up to the stack's granularity. Each sweep over K or V serves
    ``queries_per_pass`` query vectors from PE registers; more queries need more sweeps. PEs deliver
    ``flop_per_internal_byte`` FLOPs per internal byte, so compute can bound too.
    fc: weights are striped over the stacks; the same sweep rule applies to the token vectors.
    softmax / norm / act: the buffer die's special function unit, at the stack's external bandwidth.
    """
    bw, pe = pim.internal_bw_bytes_s, pim.pe_flops
    passes = np.ceil(op.m / pim.queries_per_pass)
    if op.cls == "attention":
        g = pim.kv_granularity_tokens
        kv = op.k if op.name == "attn_context" else op.n
        kv_r = np.ceil(kv / g) * g
        # no unit (no request): every per-unit value below is taken times no unit, so divide by 1, not 0
        units = np.where(op.count > 0, op.count, 1.0)
        unit_stream = op.stream_bytes / units * (kv_r / kv)
        per_stack = np.ceil(op.count / stacks)
        flops_stack = op.flops / units * (kv_r / kv) * per_stack
        t_mem = passes * per_stack * unit_stream / bw
        t = np.maximum(t_mem, flops_stack / pe) + passes * pim.call_fixed_s
        e = (passes * unit_stream * op.count * pim.bank_read_pj_per_byte + op.flops * pim.pj_per_flop) * PJ
    elif op.cls == "fc":
        per_stack = op.stream_bytes / stacks
        t = np.maximum(passes * per_stack / bw, op.flops / stacks / pe) + passes * pim.call_fixed_s
        e = (passes * op.stream_bytes * pim.bank_read_pj_per_byte + op.flops * pim.pj_per_flop) * PJ
    elif op.cls in ("softmax", "norm", "act"):
        t = op.bytes / stacks / pim.external_bw_bytes_s + pim.call_fixed_s
        e = (op.bytes * pim.buffer_read_pj_per_byte + op.flops * pim.pj_per_flop) * PJ
    else:
        raise ValueError(f"operator class {op.cls!r} cannot run on PIM")
    return t, e


def default_mapping(system: SystemSpec) -> dict[str, str]:
    """AttAcc-style static placement: attention in the memory when there is PIM, FC on the GPU."""
    return {"fc": "gpu", "attention": "pim" if system.pim else "gpu"}


def check_mapping(system: SystemSpec, mapping: dict[str, str]) -> None:
    """Raise ValueError unless fc / attention go to devices the system has (FC on PIM only with weights in PIM)."""
    for family, device in mapping.items():
        if family not in ("fc", "attention") or device not in DEVICES:
            raise ValueError(f"mapping {family!r} -> {device!r}: families fc/attention, devices {DEVICES}")
        if device == "pim" and system.pim is None:
            raise ValueError(f"system {system.name!r} has no PIM; cannot place {family} there")
    if mapping.get("fc") == "pim" and system.weights_in != "pim":
        raise ValueError(f"system {system.name!r} keeps weights in GPU memory; FC cannot run on PIM")


@dataclass(frozen=True)
class PassCost:
    """Cost of one forward pass, per operator (already multiplied by its repeat count)."""

    time_s: dict[str, np.ndarray]
    energy_j: dict[str, np.ndarray]
    device: dict[str, str]
    cls: dict[str, str]

    @property
    def total_time_s(self) -> np.ndarray:
        return sum(self.time_s.values())

    @property
    def total_energy_j(self) -> np.ndarray:
        return sum(self.energy_j.values())

    def time_by(self, key: str) -> dict[str, np.ndarray]:
        """Sum times by 'device' or 'cls'."""
        table = self.device if key == "device" else self.cls
        out: dict[str, np.ndarray] = {}
        for name, t in self.time_s.items():
            out[table[name]] = out.get(table[name], 0.0) + t
        return out


def op_cost(op: Op, system: SystemSpec, device: str):
    """(time_s, energy_j) of ``op`` on ``device``; energy summed over the tensor-parallel GPUs."""
    tp = system.tensor_parallel
    if op.cls == "allreduce":
        return allreduce_cost(op, system.gpu, system.runtime, tp)
    if op.cls == "transfer":
        return transfer_cost(op, system.gpu, system.runtime)
    if device == "pim":
        t, e = pim_op_cost(op, system.pim, system.stacks_per_gpu)
    else:
        t, e = gpu_op_cost(op, system.gpu, system.runtime, system.weight_bw_bytes_s)
    return t, e * tp


def pass_cost(model: ModelSpec, system: SystemSpec, n_req, q, ctx, mapping: dict[str, str] | None = None) -> PassCost:
    """One forward pass of ``n_req`` requests x ``q`` tokens over ``ctx`` cached tokens, through all
    pipeline stages in turn (no overlap: the simulator overlaps micro-batches)."""
    mapping = {**default_mapping(system), **(mapping or {})}
    check_mapping(system, mapping)
    times, energies, devices, classes = {}, {}, {}, {}
    for op in decoder_ops(model, n_req, q, ctx, system.tensor_parallel, system.pipeline_stages):
        device = "link" if op.cls in ("allreduce", "transfer") else mapping[FOLLOWS[op.cls]]
        t, e = op_cost(op, system, device)
        times[op.name], energies[op.name] = t * op.repeat, e * op.repeat
        devices[op.name], classes[op.name] = device, op.cls
    return PassCost(times, energies, devices, classes)
