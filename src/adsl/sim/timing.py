"""Time, energy and device busy time of one forward pass of a whole batch on a system, with the
system's parallelism: tensor parallel (inside the cost model), pipeline stages over micro-batches,
or GPU/PIM overlap of sub-batches (AttAcc-style). Arrays in, arrays out."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numba import njit

from adsl.perf.cost import pass_cost
from adsl.perf.hardware import SystemSpec
from adsl.perf.models import ModelSpec
from adsl.settings import MicroBatching


@dataclass(frozen=True)
class BatchCost:
    time_s: np.ndarray
    energy_j: np.ndarray
    busy_s: dict[str, np.ndarray]  # device -> busy time
    by_class_s: dict[str, np.ndarray]  # operator class -> time (serial sum, before overlap)

    def _map2(self, other: BatchCost, fn) -> BatchCost:
        def both(a: dict, b: dict) -> dict:  # a device or class missing on one side did no work there
            return {k: fn(a.get(k, 0.0), b.get(k, 0.0)) for k in sorted(set(a) | set(b))}

        return BatchCost(
            fn(self.time_s, other.time_s),
            fn(self.energy_j, other.energy_j),
            both(self.busy_s, other.busy_s),
            both(self.by_class_s, other.by_class_s),
        )

    def combine(self, other: BatchCost, f, weight) -> BatchCost:
        """weight x ((1 - f) x self + f x other), element-wise."""
        return self._map2(other, lambda a, b: weight * ((1 - f) * a + f * b))

    def select(self, other: BatchCost, use_other) -> BatchCost:
        """Element-wise: ``other`` where ``use_other``, else self."""
        return self._map2(other, lambda a, b: np.where(use_other, b, a))

    def add(self, other: BatchCost) -> BatchCost:
        return self._map2(other, lambda a, b: a + b)


def _split_pass(model, system, n_req, q, ctx, mapping, micro_batching: MicroBatching, m) -> BatchCost:
    """The batch cut into ``m`` micro-batches (pipeline) or sub-batches (GPU/PIM overlap)."""
    per = np.maximum(n_req / m, 1e-9)
    cost = pass_cost(model, system, per, q, ctx, mapping)
    live = n_req > 0
    dev = cost.time_by("device")
    busy = {k: np.where(live, v * m, 0.0) for k, v in dev.items()}
    by_cls = {k: np.where(live, v * m, 0.0) for k, v in cost.time_by("cls").items()}
    total = cost.total_time_s
    s = system.pipeline_stages
    if s > 1:
        time = (m + s - 1) / s * total
    elif micro_batching.overlap and not system.shared_stacks:  # shared stacks: GPU and PIM take turns
        gpu = dev.get("gpu", 0.0) + dev.get("link", 0.0)
        pim = dev.get("pim", 0.0)
        time = np.where(m > 1, np.maximum(m * gpu, m * pim) + np.minimum(gpu, pim), total)
    else:
        time = m * total
    return BatchCost(np.where(live, time, 0.0), np.where(live, cost.total_energy_j * m, 0.0), busy, by_cls)


def batch_pass(
    model: ModelSpec, system: SystemSpec, n_req, q, ctx, mapping: dict, micro_batching: MicroBatching, copies: int = 1
) -> BatchCost:
    """``n_req`` requests (array) with ``q`` tokens each over ``ctx`` cached tokens (mean per request).

    With ``micro_batching.micro_batches`` M > 1 the pass runs as M micro-batches (at least one request each)
    or, with ``split="best"``, as one batch where that is faster: splitting pays where a pass is
    compute-bound (pipeline stages or GPU/PIM overlap busy side by side) and costs extra weight reads
    where it is weight-bound.

    ``copies`` > 1: the model is replicated, one copy per device with no tensor or pipeline split, and
    the requests are spread over the copies (``replicated``). The pass takes as long as the busiest copy
    (ceil(n / copies) requests); energy is the mean copy's times the copies in use (a pass's energy is
    affine in its request count, so this is exact)."""
    n_req = np.asarray(n_req, dtype=float)
    if copies > 1:
        one = system.replace(tensor_parallel=1, pipeline_stages=1)
        used = np.minimum(n_req, copies)
        busiest = batch_pass(model, one, np.ceil(n_req / copies), q, ctx, mapping, micro_batching)
        mean = batch_pass(model, one, n_req / np.maximum(used, 1.0), q, ctx, mapping, micro_batching)
        return BatchCost(busiest.time_s, mean.energy_j * used, busiest.busy_s, busiest.by_class_s)
    m = np.clip(np.floor(n_req), 1, max(1, micro_batching.micro_batches))
    split = _split_pass(model, system, n_req, q, ctx, mapping, micro_batching, m)
    if micro_batching.micro_batches <= 1 or micro_batching.split == "always":
        return split
    whole = _split_pass(model, system, n_req, q, ctx, mapping, micro_batching, np.ones_like(n_req))
    return whole.select(split, split.time_s < whole.time_s)


CTX_STEP = 16  # context grid of the cost tables: the PIM stacks' KV granularity


@dataclass(frozen=True)
class CostTable:
    """``batch_pass`` precomputed for every request count 0..n_max and a context grid, interpolated
    linearly in context. The event loop reads its GPU / PIM seconds (``adsl.sim.tables.PassTable``) and the
    accounting its energy and class times, so a whole run costs one vectorized cost-model call per (model,
    tokens per request, placement)."""

    time_s: np.ndarray  # (n_max + 1, grid)
    energy_j: np.ndarray
    busy_s: dict[str, np.ndarray]
    by_class_s: dict[str, np.ndarray]
    # energy, busy_s and by_class_s stacked in that order (those fields are views of it), so the accounting
    # interpolates every quantity with one gather (``sums``)
    stack: np.ndarray = field(repr=False, compare=False)

    @classmethod
    def build(
        cls,
        model,
        system,
        q,
        mapping,
        micro_batching,
        n_max: int,
        ctx_max: float,
        copies: int = 1,
        ctx_min: float = 0.0,
    ) -> CostTable:
        return cls.build_each(model, system, [q], mapping, micro_batching, n_max, ctx_max, copies, ctx_min)[0]

    @classmethod
    def build_each(
        cls, model, system, qs, mapping, micro_batching, n_max: int, ctx_max: float, copies: int = 1, ctx_min=0.0
    ) -> list[CostTable]:
        """The table of each tokens-per-request of ``qs`` from one cost-model call over (q, requests, context):
        every operation of the cost model is element-wise, so each table is the one built alone. ``ctx_min``: no
        pass reads a context below it (a request's context is at least its prompt), so the grid's points below
        it are not costed: NaN, which a read would carry into every sum (SADDLE's point at batch 128, prompts of
        128 tokens of 1,024: 8 of 69 points, an eighth of its verification tables' cost)."""
        every, devices, classes = cost_rows(
            model, system, qs, mapping, micro_batching, np.arange(n_max + 1), ctx_max, copies, ctx_min
        )
        return [cls.of(every[i, 0], every[i, 1:], devices, classes) for i in range(len(every))]

    @classmethod
    def of(cls, time, stack, devices, classes) -> CostTable:
        """The table of ``time`` and ``stack`` (energy, then a busy time per device of ``devices``, then a time per
        operator class of ``classes``)."""
        views = iter(stack[1:])
        busy = {k: next(views) for k in devices}
        return cls(time, stack[0], busy, {k: next(views) for k in classes}, stack)

    def head(self, rows: int) -> CostTable:
        """The table for 0 .. ``rows`` - 1 requests (its first rows, copied)."""
        return self.of(self.time_s[:rows].copy(), self.stack[:, :rows].copy(), self.busy_s, self.by_class_s)

    def lookup(self, n, ctx) -> BatchCost:
        n = np.broadcast_to(np.asarray(n), np.broadcast_shapes(np.shape(n), np.shape(ctx))).astype(np.int64)
        pos = np.asarray(ctx, dtype=float) / CTX_STEP
        i = np.minimum(pos.astype(np.int64), self.time_s.shape[1] - 2)
        f = pos - i
        g = 1 - f

        def interp(table):  # the grid points' indices and weights are shared by every table
            return table[n, i] * g + table[n, i + 1] * f

        return BatchCost(
            interp(self.time_s),
            interp(self.energy_j),
            {k: interp(v) for k, v in self.busy_s.items()},
            {k: interp(v) for k, v in self.by_class_s.items()},
        )

    def sums(self, n, ctx, *weights) -> tuple[float, dict[str, float], dict[str, float]]:
        """Energy, busy and class seconds of passes at (``n``, ``ctx``; 1-D, one entry a pass), each pass's
        values times ``weights`` in turn, summed: ``float((lookup(n, ctx).energy_j * w1 * w2 ...).sum())``
        and the like, to the bit, from one gather over the stacked tables instead of one per quantity."""
        n = np.asarray(n, dtype=np.int64)
        pos = np.asarray(ctx, dtype=float) / CTX_STEP
        w = np.stack(weights) if weights else np.zeros((0, n.size))
        v = _weighted(self.stack.reshape(len(self.stack), -1), self.stack.shape[2], n, pos, w)
        total = v.sum(axis=1)  # a C-ordered row is summed pairwise, as the row alone would be
        nb = len(self.busy_s)
        busy = {k: float(t) for k, t in zip(self.busy_s, total[1 : 1 + nb], strict=True)}
        return float(total[0]), busy, {k: float(t) for k, t in zip(self.by_class_s, total[1 + nb :], strict=True)}


def cost_rows(model, system, qs, mapping, micro_batching, rows, ctx_max: float, copies: int = 1, ctx_min=0.0):
    """``batch_pass`` at each tokens-per-request of ``qs``, each request count of ``rows`` and the context grid up to
    ``ctx_max`` (NaN below the grid point at or below ``ctx_min``), as one block (tokens a request, quantity, row,
    context) of the quantities ``CostTable.of`` takes, with the names of its devices and operator classes. Every
    operation of the cost model is element-wise, so a row is the same whichever rows are costed with it."""
    q = np.asarray(qs, dtype=float)[:, None, None]
    n = np.asarray(rows, dtype=float)[None, :, None]
    ctx = np.arange(0.0, ctx_max + 2 * CTX_STEP, CTX_STEP)
    lo = min(int(ctx_min // CTX_STEP), ctx.size - 2)  # the grid point at or below ctx_min: read from there up
    c = batch_pass(model, system, n, q, ctx[None, None, lo:], mapping, micro_batching, copies)
    parts = [c.time_s, c.energy_j, *c.busy_s.values(), *c.by_class_s.values()]
    every = np.empty((q.size, len(parts), n.size, ctx.size))  # a table's quantities contiguous, one block
    every[..., :lo] = np.nan
    for k, a in enumerate(parts):
        every[:, k, :, lo:] = a
    return every, list(c.busy_s), list(c.by_class_s)


@njit(cache=True, nogil=True)
def _weighted(flat, grid, n, pos, weights):
    """Every quantity of ``flat`` (quantities x the flattened (requests, context) plane) at each pass, linear in
    context between the grid points, times each of ``weights`` in turn: the arithmetic of numpy's element-wise
    expression ``(a * (1 - f) + b * f) * w1 * w2 ...`` in its order, in one pass without its temporaries."""
    v = np.empty((flat.shape[0], n.size))
    for k in range(n.size):
        i = min(int(pos[k]), grid - 2)
        f = pos[k] - i
        g = 1 - f
        at = n[k] * grid + i  # the grid point below the pass
        for j in range(flat.shape[0]):
            x = flat[j, at] * g + flat[j, at + 1] * f
            for w in range(weights.shape[0]):
                x *= weights[w, k]
            v[j, k] = x
    return v
