"""Request slots of a serving engine: static batches or continuous (iteration-level) batching.

Static (the paper's per-batch-size evaluation as we first modelled it): ``slots`` requests start
together and the batch decodes until the last one finishes; nothing refills a finished slot.

Continuous (Orca, OSDI'22; vLLM, SOSP'23): every slot holds a request while requests wait; a request
that finishes frees its slot and the next queued request takes it at the next iteration (its prompt is
prefilled then, when ``prefill`` is on). Throughput is measured over a steady-state window: from the
iteration after ``warmup`` completions (the first wave starts in lock-step) to the last iteration with
every slot busy (after it the queue is empty and the batch drains). The window is reported with every
result so a reader can see what it covered.

``SlotLoop`` is the loop state one engine call keeps (arrays of shape (replicas, slots)); engines own
what they do per iteration and call ``step`` to emit tokens, retire finished requests and admit new ones.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MODES = ("static", "continuous")


@dataclass(frozen=True)
class Batching:
    """How a configuration point fills its ``batch`` slots (``simulation.batching`` in the config)."""

    mode: str = "static"
    requests_per_slot: int = 4  # continuous: requests served per slot in one run (queue length / slots + 1)
    warmup: float = 1.0  # continuous: the window opens after warmup x slots completions
    prefill: bool = True  # continuous: charge each admitted request's prefill pass

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"batching mode must be one of {MODES}, got {self.mode!r}")
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
        return Continuous(slots, int(round(self.warmup * slots)), self.prefill)


@dataclass(frozen=True)
class Continuous:
    """Continuous batching of one engine run: ``slots`` in flight, the window opens after ``warmup``
    completions, ``prefill`` charges admitted requests' prompts."""

    slots: int
    warmup: int
    prefill: bool = True


class SlotLoop:
    """Slots of one engine run. ``prompt`` and ``out`` are (X, N) per request; the first ``slots``
    requests start at once, the rest queue in order. ``cur`` (X, S) is the request a slot holds (N: none),
    ``req`` the same clipped so an idle slot indexes a valid (ignored) request, ``left`` its tokens still
    to emit (0 when idle), ``pos`` its position in its request's streams."""

    def __init__(self, prompt: np.ndarray, out: np.ndarray, slots: int):
        x, n = out.shape
        self.n = n
        self.prompt_req, self.out_req = prompt, out
        self.cur = np.broadcast_to(np.arange(slots), (x, slots)).copy()
        self.req = self.cur.copy()
        self.next_id = np.full(x, slots, dtype=np.int64)
        self.out = out[:, :slots].copy()
        self.left = self.out.copy()
        self.ctx = prompt[:, :slots].copy()
        self.pos = np.zeros((x, slots), dtype=np.int64)
        self.active = self.left > 0
        self.n_active = self.active.sum(axis=1)
        self._none = np.zeros((x, slots), dtype=bool)
        self._zero = np.zeros(x, dtype=np.int64)
        self.log = {"n": [], "emitted": [], "done": [], "admitted": []}

    @property
    def gen(self) -> np.ndarray:
        """Tokens each slot's request has emitted."""
        return self.out - self.left

    def step(self, emitted: np.ndarray, advance, where: np.ndarray) -> np.ndarray:
        """Slots in ``where`` emit ``emitted`` tokens (at most ``left``) and move ``advance`` stream
        positions; finished requests leave and queued ones take their slots. Returns the slots that
        admitted a request."""
        self.log["n"].append(self.n_active)
        self.log["emitted"].append(emitted.sum(axis=1))
        self.left -= emitted
        self.ctx += emitted
        np.add(self.pos, advance, out=self.pos, where=where)
        done = self.active & (self.left == 0)
        completed = done.sum(axis=1)
        self.log["done"].append(completed)
        admitted, n_admitted = self._none, self._zero
        if completed.any():
            if self.next_id.min() < self.n:
                new = self.next_id[:, None] + np.cumsum(done, axis=1) - 1
                admitted = done & (new < self.n)
                n_admitted = admitted.sum(axis=1)
                self.cur[done] = self.n
                ii, jj = np.nonzero(admitted)
                ids = new[ii, jj]
                self.cur[ii, jj] = self.req[ii, jj] = ids
                self.next_id = np.minimum(self.next_id + completed, self.n)
                self.pos[ii, jj] = 0
                self.ctx[ii, jj] = self.prompt_req[ii, ids]
                self.out[ii, jj] = self.left[ii, jj] = self.out_req[ii, ids]
            self.active = self.left > 0
            self.n_active = self.active.sum(axis=1)
        self.log["admitted"].append(n_admitted)
        return admitted

    def arrays(self) -> dict[str, np.ndarray]:
        """The per-iteration log as (iterations, X) arrays."""
        return {k: np.array(v) for k, v in self.log.items()}


def steady_window(log: dict[str, np.ndarray], serving: Continuous | None) -> np.ndarray | None:
    """(iterations, X) mask of the measured iterations; None for a static batch (all of them)."""
    if serving is None:
        return None
    before = np.cumsum(log["done"], axis=0) - log["done"]  # completions before each iteration
    window = (before >= serving.warmup) & (log["n"] == serving.slots)
    if not window.any(axis=0).all():
        raise ValueError(
            f"continuous batching: no iteration with all {serving.slots} slots busy after {serving.warmup} "
            "completions; raise simulation.batching.requests_per_slot"
        )
    return window


def window_sum(per_iteration: np.ndarray, window: np.ndarray | None, axes: tuple[int, ...] = (0,)) -> np.ndarray:
    """Sum over iterations (and the other ``axes``), over the window only when there is one. Without a
    window the reduction is exactly the static engines' (same axes, same order)."""
    if window is None:
        return per_iteration.sum(axis=axes)
    inner = per_iteration.sum(axis=axes[1:]) if len(axes) > 1 else per_iteration
    return (inner * window).sum(axis=0)
