"""Devices as resources with a busy-until time, and the passes that occupy them.

A system's silicon is a set of machines: the GPUs and the PIM stacks of a tensor-parallel group act as
one machine each (every device works on every pass), and a pipeline has one GPU and one PIM machine per
stage. A pass (one forward of one model over one group of requests) is a chain of segments, each on one
machine: layer by layer its FC work runs where FC is placed and its attention where attention is placed,
so the chain alternates between the GPU and the PIM machine (``CHUNKS`` times, the layers grouped), and
through a pipeline it visits every stage in turn. A segment starts when the previous segment of its pass
has ended, in the first idle gap of its machine that holds it. Passes on the same machine therefore
serialise and passes on different machines overlap; two sub-batches, one on the GPU while the other is
on PIM, reproduce AttAcc's overlap formula.

``PassTable`` reads a pass's time, busy time per device and energy off ``adsl.sim.timing.CostTable``
(one vectorized cost-model call per table) for scalar use inside an event loop.
"""

from __future__ import annotations

import bisect
import functools
from dataclasses import dataclass

import numpy as np

from adsl.perf.hardware import SystemSpec
from adsl.sim.timing import CTX_STEP, CostTable, Schedule

PRUNE = 8  # Machines.advance prunes past intervals every PRUNE-th event
CHUNKS = 4  # FC / attention alternations per pass (split over a pipeline's stages): layers grouped in chunks


@dataclass(frozen=True)
class Layout:
    """The machines of a system and how a pass is laid over them."""

    machines: tuple[str, ...]
    stages: int
    pim: bool

    @property
    def machines_per_stage(self) -> int:
        return 2 if self.pim else 1

    @classmethod
    def of(cls, system: SystemSpec) -> Layout:
        s = system.pipeline_stages
        kinds = ("gpu", "pim") if system.pim is not None else ("gpu",)
        names = tuple(f"{k}{i}" if s > 1 else k for i in range(s) for k in kinds)
        return cls(names, s, system.pim is not None)

    @functools.cached_property
    def _pairs(self) -> tuple[tuple[int, int], ...]:
        """(GPU machine, PIM machine) of each chunk of a whole pass, in order."""
        per = 2 if self.pim else 1
        chunks = max(1, CHUNKS // self.stages)  # a pipeline stage holds few layers: fewer alternations
        return tuple((s * per, s * per + 1) for s in range(self.stages) for _ in range(chunks))

    def segments(self, gpu_s: float, pim_s: float, stage: int | None = None) -> list[tuple[int, float]]:
        """(machine index, duration) of a pass with ``gpu_s`` of GPU + link and ``pim_s`` of PIM work:
        through every pipeline stage in turn, or (``stage``) on that stage's machines alone."""
        chunks = max(1, CHUNKS // self.stages)
        if stage is None:
            pairs, split = self._pairs, self.stages
        else:
            pairs, split = self._pairs[stage * chunks : (stage + 1) * chunks], 1
        g, p = gpu_s / split / chunks, pim_s / split / chunks
        if g > 0 and p > 0:
            return [seg for gm, pm in pairs for seg in ((gm, g), (pm, p))]
        if g > 0:
            return [(gm, g) for gm, _ in pairs]
        return [(pm, p) for _, pm in pairs] if p > 0 else []


class Machines:
    """Busy intervals of one replica's machines. A segment takes the first idle gap of its machine long
    enough for it, at or after the end of the previous segment of its pass (first-fit backfilling: a
    pass issued later can run in the gaps an earlier pass leaves while it works on another machine)."""

    def __init__(self, layout: Layout, record: bool = False):
        self.layout = layout
        # per machine: sorted, disjoint busy intervals as parallel lists of starts and ends
        self.starts: list[list[float]] = [[] for _ in layout.machines]
        self.ends: list[list[float]] = [[] for _ in layout.machines]
        self.busy = [0.0] * len(layout.machines)
        self.intervals: list[tuple[int, float, float, str]] | None = [] if record else None
        self._calls = 0

    def advance(self, now: float) -> None:
        """Forget intervals that ended before ``now`` (nothing is issued before the current event). Only
        every ``PRUNE``-th call prunes: placement skips intervals that ended before a segment's release
        anyway, so the lists only need to stay short."""
        self._calls += 1
        if self._calls % PRUNE:
            return
        for st, en in zip(self.starts, self.ends, strict=True):
            k = bisect.bisect_right(en, now)
            if k:
                del st[:k], en[:k]

    def _place(self, m: int, t: float, dur: float) -> float:
        st, en = self.starts[m], self.ends[m]
        k = bisect.bisect_right(en, t)  # intervals that end after t
        n = len(st)
        while k < n and st[k] < t + dur:  # does not fit before the next busy interval
            if en[k] > t:
                t = en[k]
            k += 1
        end = t + dur
        if k > 0 and en[k - 1] == t:  # touches the previous interval: extend it (lists stay short)
            if k < n and st[k] == end:
                en[k - 1] = en[k]
                del st[k], en[k]
            else:
                en[k - 1] = end
        elif k < n and st[k] == end:
            st[k] = t
        else:
            st.insert(k, t)
            en.insert(k, end)
        return t

    def run(self, release: float, segments: list[tuple[int, float]], kind: str) -> tuple[float, float]:
        """Issue a pass at ``release``: (start of its first segment, end of its last). ``first_stage``
        afterwards holds when the pass cleared the first pipeline stage (its last segment there)."""
        t, start = release, None
        first = self.layout.machines_per_stage
        self.first_stage = release
        starts, ends, busy, record = self.starts, self.ends, self.busy, self.intervals
        for m, dur in segments:
            en = ends[m]
            if not en or en[-1] < t:  # after everything booked on the machine: the common case
                starts[m].append(t)
                en.append(t + dur)
                s = t
            elif en[-1] == t:
                en[-1] = t + dur
                s = t
            else:
                s = self._place(m, t, dur)
            if start is None:
                start = s
            t = s + dur
            if m < first:
                self.first_stage = t
            busy[m] += dur
            if record is not None:
                record.append((m, s, t, kind))
        return (release if start is None else start), t

    def run_everywhere(self, release: float, gpu_s: float, pim_s: float, kind: str) -> tuple[float, float]:
        """A replicated pass: one copy on every stage's machines at once; ends with the last copy."""
        ends = [self.run(release, self.layout.segments(gpu_s, pim_s, s), kind) for s in range(self.layout.stages)]
        return min(e[0] for e in ends), max(e[1] for e in ends)


@dataclass(frozen=True)
class PassTable:
    """Scalar look-ups of one kind of pass (model, tokens per request, placement) for 0..n_max requests
    over the context grid of ``CostTable``: GPU + link time and PIM time (the table keeps the rest)."""

    table: CostTable
    gpu: list  # per request count, per context grid point (Python floats: fast scalar arithmetic)
    pim: list
    gpu_a: np.ndarray  # the same as arrays, for look-ups of many passes at once
    pim_a: np.ndarray

    @classmethod
    def build(cls, model, system, q, mapping, n_max, ctx_max, copies=1) -> PassTable:
        t = CostTable.build(model, system, q, mapping, Schedule(), n_max, ctx_max, copies)
        zero = np.zeros_like(t.time_s)
        gpu = t.busy_s.get("gpu", zero) + t.busy_s.get("link", zero)
        pim = t.busy_s.get("pim", zero)
        return cls(t, gpu.tolist(), pim.tolist(), gpu, pim)

    def at(self, n: int, ctx: float) -> tuple[float, float]:
        """(GPU + link seconds, PIM seconds) of a pass over ``n`` requests at mean context ``ctx``,
        linear in context between grid points as ``CostTable.lookup``."""
        if n <= 0:
            return 0.0, 0.0
        pos = ctx / CTX_STEP
        g, p = self.gpu[n], self.pim[n]
        i = min(int(pos), len(g) - 2)
        f = pos - i
        return g[i] * (1 - f) + g[i + 1] * f, p[i] * (1 - f) + p[i + 1] * f

    def at_many(self, n: np.ndarray, ctx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``at`` element by element over arrays of request counts and mean contexts (the same float
        operations, so the same values); 0 where ``n`` is 0."""
        width = self.gpu_a.shape[1]
        pos = ctx / CTX_STEP
        i = np.minimum(pos.astype(np.int64), width - 2)
        f = pos - i
        at = n * width + i  # flat positions: take is cheaper than 2-D fancy indexing
        gpu, pim = self.gpu_a.ravel(), self.pim_a.ravel()
        g = gpu.take(at) * (1 - f) + gpu.take(at + 1) * f
        p = pim.take(at) * (1 - f) + pim.take(at + 1) * f
        some = n > 0
        return np.where(some, g, 0.0), np.where(some, p, 0.0)
