"""What a run simulates: a system's setup (decoding, placement, micro-batches, pools), the checks of a
run's requests and of its memory, and the error a run stops with."""

from __future__ import annotations

import dataclasses
import functools
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from adsl.errors import AdslError
from adsl.perf.hardware import SystemSpec
from adsl.perf.models import Pair
from adsl.settings import MicroBatching

# Prefill runs on the GPUs: a prompt of many tokens per request is compute-bound (AttAcc and SpecPIM
# keep the summarisation stage on the GPU too).
PREFILL_MAPPING = {"fc": "gpu", "attention": "gpu"}


class SimError(AdslError, ValueError):
    """Raised for an unusable setup or run: unknown policy or decoding, wrongly shaped arrays, too little memory."""

    pass


@dataclass(frozen=True)
class Setup:
    name: str
    system: SystemSpec
    decoding: str  # "ad" | "sd"
    draft_length: int = 0  # fixed d, or the cap d_max of an adaptive policy
    target_mapping: dict = field(default_factory=dict)
    draft_mapping: dict = field(default_factory=dict)
    micro_batching: MicroBatching = MicroBatching()
    policy: str = "fixed"  # fixed | running_product (stop when the product of confidences < tau)
    dynamic: bool = False  # place DLM FC and TLM attention per pass on the faster device (cost tables)
    pool_tokens: int = 0  # Shared Pool capacity C in tokens (0: no pool, per-iteration verification)
    eager: bool = False  # Eager Pool: draft during verification (asynchronous pipeline); needs a pool
    pool_trigger: str = "complete"  # verify when every request has tokens in the pool, or when GPU idle
    # draft placement: 1 = sharded like the target (tensor parallel / pipeline stages); k > 1 = one copy
    # on each of k devices, requests spread over the copies (adsl.sim.placement)
    draft_copies: int = 1
    draft_placement: str = "tensor_parallel"  # the name of that choice, for reports
    draft_split: str | None = None  # micro-batch split of draft passes; None: as ``micro_batching.split``
    static_power: bool = False  # charge the system's static (board idle + stack background) power
    controller_step_s: float = 0.0  # the Controller's decision per draft step (policies deciding per token)

    @property
    def draft_micro_batching(self) -> MicroBatching:
        return (
            self.micro_batching
            if self.draft_split is None
            else dataclasses.replace(self.micro_batching, split=self.draft_split)
        )

    def __post_init__(self):
        from adsl.sim.policies import POLICIES

        if self.policy not in POLICIES:
            raise SimError(f"{self.name}: unknown draft policy {self.policy!r}; known: {sorted(POLICIES)}")
        if self.decoding not in ("ad", "sd"):
            raise SimError(f"{self.name}: decoding must be 'ad' or 'sd', got {self.decoding!r}")
        if self.pool_trigger not in ("complete", "idle"):
            raise SimError(f"{self.name}: pool_trigger must be 'complete' or 'idle', got {self.pool_trigger!r}")
        if self.eager and not self.pool_tokens:
            raise SimError(f"{self.name}: the Eager Pool needs a Shared Pool (pool_tokens > 0)")
        if self.pool_tokens and self.decoding != "sd":  # the pool holds drafts: autoregressive decoding has none
            raise SimError(f"{self.name}: a Shared Pool (pool_tokens > 0) needs speculative decoding ('sd')")
        if self.decoding == "sd" and self.draft_length < 1:
            raise SimError(f"{self.name}: draft length d must be >= 1, got {self.draft_length}")


def memory_need(setup: Setup, pair: Pair, batch: int, max_seq_len: int) -> tuple[float, float]:
    """(bytes needed for weights + full-length KV caches of every model run, bytes the system has)."""
    need = pair.target.weight_bytes + batch * max_seq_len * pair.target.kv_bytes_per_token
    if setup.decoding == "sd":  # a replicated draft keeps a copy of its weights on every device it uses
        need += setup.draft_copies * pair.draft.weight_bytes + batch * max_seq_len * pair.draft.kv_bytes_per_token
    return float(need), float(setup.system.memory_capacity_bytes)


def check_memory(setup: Setup, pair: Pair, batch: int, max_seq_len: int) -> None:
    """Raise SimError when weights + full-length KV caches of ``batch`` requests exceed the system's memory."""
    need, have = memory_need(setup, pair, batch, max_seq_len)
    if need > have:
        raise SimError(
            f"{setup.name} on {setup.system.name}: batch {batch} x {max_seq_len} tokens needs "
            f"{need / 1e9:.0f} GB for weights + KV, the system has {have / 1e9:.0f} GB"
        )


def requests(prompt_len, output_len) -> tuple[np.ndarray, np.ndarray]:
    """Prompt and output lengths as (replicas, requests) float and int arrays, checked alike for every
    engine: equal 2-D shapes, and at least one output token a request (one without output never completes
    a window)."""
    prompt = np.asarray(prompt_len, dtype=float)
    out = np.asarray(output_len, dtype=np.int64)
    if prompt.shape != out.shape or prompt.ndim != 2:
        raise SimError(f"prompt_len and output_len must both be (replicas, requests), got {prompt.shape}, {out.shape}")
    if (out < 1).any():
        raise SimError("every request needs an output length >= 1")
    return prompt, out


def cpus() -> int:
    """Threads this process's simulations may use (a run's replicas, and its pass tables): the CPUs it may
    run on, at most ``OMP_NUM_THREADS`` where that is set. Snakemake sets it to a job's ``threads`` (1 for
    every rule here), so jobs that run side by side do not each start a thread per CPU: two chunk jobs of
    the sweep on 2 cores, one thread each, took 22 s where two threads each took 26 s (replicas in threads
    run only the compiled loop in parallel; jobs run everything)."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        n = os.cpu_count() or 1
    omp = os.environ.get("OMP_NUM_THREADS", "")
    return max(1, min(n, int(omp))) if omp.isdigit() else n


@functools.cache
def thread_pool(workers: int) -> ThreadPoolExecutor:
    """The process's ``workers`` threads for the simulator's parallel work (a run's replicas, its pass tables),
    started once and kept: a pool started afresh for each run cost SADDLE's point at batch 128 about 3 ms of
    its 0.055 s (a new thread's malloc arena returns its pages to the system and faults them in again, and
    the thread migrates between CPUs). It holds threads, never a result: what a run computes does not depend
    on which thread, or how many, ran it (``tests/sim/test_threads.py``). A forked child starts without them:
    its copy of a kept pool would count the parent's idle threads and wait forever on work none runs, so a fork
    forgets the kept pools and the child starts its own."""
    return ThreadPoolExecutor(workers, thread_name_prefix="adsl-sim")


os.register_at_fork(after_in_child=thread_pool.cache_clear)
