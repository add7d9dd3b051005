"""The machines of a system and the cost of every kind of pass a run issues, as flat arrays for the loop.

A system's silicon is a set of machines: the GPUs and the PIM stacks of a tensor-parallel group act as
one machine each (every device works on every pass), and a pipeline has one GPU and one PIM machine per
stage. A pass (one forward of one model over one group of requests) is a chain of segments, each on one
machine: layer by layer its FC work runs where FC is placed and its attention where attention is placed,
so the chain alternates between the GPU and the PIM machine (``adsl.sim.loop.CHUNKS`` times, the layers
grouped), and through a pipeline it visits every stage in turn (``adsl.sim.loop.segments``). A segment
starts when the previous segment of its pass has ended, in the first idle gap of its machine that holds
it, so passes on the same machine serialise and passes on different machines overlap; two sub-batches,
one on the GPU while the other is on PIM, reproduce AttAcc's overlap formula.

``PassTables`` holds, per kind of pass, GPU + link and PIM seconds for 0..n requests over the context grid
of ``adsl.sim.timing.CostTable`` (one vectorized cost-model call per table; the verification's, ``RowTables``, a
row of requests at a time where the loop asks for them), with the dynamic scheduler's alternative placements;
``flat`` hands them to the loop as arrays.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from adsl.perf.hardware import SystemSpec
from adsl.perf.models import Pair
from adsl.settings import MicroBatching
from adsl.sim import loop
from adsl.sim.setup import PREFILL_MAPPING, Setup, cpus, thread_pool
from adsl.sim.timing import CTX_STEP, CostTable, cost_rows


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


@dataclass(frozen=True)
class PassTable:
    """One kind of pass (model, tokens per request, placement) for 0..n_max requests over the context grid:
    the full ``CostTable`` (energy, class times) and its GPU + link and PIM seconds as arrays."""

    table: CostTable
    gpu: np.ndarray  # (requests, context grid)
    pim: np.ndarray

    @classmethod
    def build(cls, model, system, q, mapping, n_max, ctx_max, copies=1, ctx_min=0.0) -> PassTable:
        return cls.build_each(model, system, [q], mapping, n_max, ctx_max, copies, ctx_min)[0]

    @classmethod
    def build_each(cls, model, system, qs, mapping, n_max, ctx_max, copies=1, ctx_min=0.0) -> list[PassTable]:
        """The table of each tokens-per-request of ``qs`` (``CostTable.build_each``: one cost-model call)."""
        tables = CostTable.build_each(model, system, qs, mapping, MicroBatching(), n_max, ctx_max, copies, ctx_min)
        return [cls(t, *seconds(t)) for t in tables]

    def head(self, rows: int) -> PassTable:
        """The table for 0 .. ``rows`` - 1 requests: its first rows, each value the one built for that many
        requests alone (every operation of the cost model is element-wise)."""
        return PassTable(self.table.head(rows), self.gpu[:rows].copy(), self.pim[:rows].copy())

    def at(self, n: int, ctx: float) -> tuple[float, float]:
        """(GPU + link s, PIM s) of a pass over ``n`` requests at mean context ``ctx`` (``loop.at``)."""
        return loop.at(self.gpu, self.pim, n, ctx, float(CTX_STEP))


def seconds(t: CostTable) -> tuple[np.ndarray, np.ndarray]:
    """GPU + link and PIM seconds of ``t``'s passes."""
    zero = np.zeros_like(t.time_s)
    return t.busy_s.get("gpu", zero) + t.busy_s.get("link", zero), t.busy_s.get("pim", zero)


class RowTables:
    """The verification's tables of one target mapping (``PassTable`` per tokens a request of ``qs``) for 0 ..
    ``n_max`` requests, costed a row (a request count) at a time: ``rows`` at once, later ones as a run asks for
    them (``fill``). A run verifies few request counts (SADDLE's point at batch 128: every verification serves
    its 128 slots, 49 of a table's 80,109 cells read; docs/simulator.md), and a row costs the values the whole
    table holds (``adsl.sim.timing.cost_rows``). The replicas' threads share the tables: ``fill`` costs each row
    once, under a lock."""

    def __init__(self, model, system, qs, mapping, n_max: int, ctx_max: float, ctx_min: float, rows) -> None:
        self._build = (model, system, list(qs), mapping, ctx_max, ctx_min)
        self._lock = threading.Lock()
        self.have = np.zeros(n_max + 1, np.bool_)  # the rows costed
        rows = np.asarray(rows, np.int64)
        every, devices, classes = self._cost(rows)
        if np.array_equal(rows, np.arange(n_max + 1)):  # every row at once: the block is the tables
            self.every = every
        else:  # rows not yet costed hold zeros: a zeroed block's pages are not written until costed (a NaN fill
            # wrote SADDLE's 8 MB a table, 1.5 ms); nothing reads them (``adsl.sim.result.account`` checks)
            self.every = np.zeros(every.shape[:2] + (n_max + 1, every.shape[3]))
        self.gpu, self.pim = np.zeros_like(self.every[:, 0]), np.zeros_like(self.every[:, 0])
        self.tables = [
            PassTable(CostTable.of(self.every[i, 0], self.every[i, 1:], devices, classes), self.gpu[i], self.pim[i])
            for i in range(len(qs))
        ]
        self._put(rows, every, devices, classes)

    def _cost(self, rows) -> tuple:
        """``cost_rows`` of request counts ``rows``: (block, devices, classes)."""
        model, system, qs, mapping, ctx_max, ctx_min = self._build
        return cost_rows(model, system, qs, mapping, MicroBatching(), rows, ctx_max, 1, ctx_min)

    def _put(self, rows, every, devices, classes) -> None:
        if every is not self.every:
            self.every[:, :, rows] = every
        for i in range(len(every)):
            self.gpu[i, rows], self.pim[i, rows] = seconds(CostTable.of(every[i, 0], every[i, 1:], devices, classes))
        self.have[rows] = True

    def fill(self, rows) -> None:
        """Cost ``rows`` (request counts) not yet costed."""
        with self._lock:
            rows = np.asarray(rows, np.int64)
            rows = np.unique(rows[~self.have[rows]])
            if rows.size:
                self._put(rows, *self._cost(rows))


# verification rows a set costs one at a time as runs ask for them; at the next it costs every row left at once. A row
# alone costs about a twentieth of SADDLE's whole table at batch 128 (numpy's cost per call), and a closed loop reads
# one to three rows (docs/simulator.md); an open loop, whose passes serve however many requests have arrived, most.
ROWS_APART = 4


def flip(mapping: dict, family: str) -> dict:
    """``mapping`` with operator ``family`` on the other device."""
    return {**mapping, family: "pim" if mapping.get(family) == "gpu" else "gpu"}


class PassTables:
    """Every kind of pass a run issues, with the dynamic scheduler's alternatives: draft (variant 1 places
    the draft's FC on the other device), verify per variant and tokens per request 1..d + 1 (variant 1
    places the target's attention on the other device), decode, prefill (target, then draft)."""

    def __init__(
        self,
        setup: Setup,
        pair: Pair,
        n_max: int,
        ctx_max: float,
        prompt: float,
        reuse: Sequence[PassTables] = (),
        workers: int | None = None,
        ctx_min: float = 0.0,
        asks: bool = False,
    ):
        """Tables for passes of 0 .. ``n_max`` requests (``adsl.sim.core.pass_tables``: a micro-batch's slots, or
        every slot on a Shared Pool). ``reuse``: tables built before (the search's other candidates, the
        configuration's other systems): each table whose passes one of them already costs (the same system,
        model, mapping, tokens a request, contexts and draft copies, for at least ``n_max`` requests) is taken
        from it (its first rows where it has more), not built again; candidates that differ in the pool trigger
        differ in no table, and systems on the same hardware share their prefill and the mappings they have in
        common. ``workers``: tables built at once, one thread each (default ``cpus()``); the tables do not
        depend on it. ``ctx_min``: the least context a pass reads (the shortest prompt; ``CostTable.build_each``).
        ``asks``: a Shared Pool's runs ask for the verification rows they read (``fill_verify``), so only the full
        pass's is costed at once; otherwise (a micro-batch loop, which reads its rows unasked; an open loop, whose
        passes serve however many requests have arrived, so most counts) every row."""
        s, sd = setup.system, setup.decoding == "sd"
        d = setup.draft_length
        pim_weights = s.weights_in == "pim"
        self.draft_maps = [setup.draft_mapping] + (
            [flip(setup.draft_mapping, "fc")] if setup.dynamic and pim_weights else []
        )
        self.target_maps = [setup.target_mapping] + ([flip(setup.target_mapping, "attention")] if setup.dynamic else [])
        q = max(1, int(round(prompt)))
        self.n_max = n_max
        # what every table of a kind shares besides its mapping and its rows
        self.keys = {
            "draft": (s, pair.draft, ctx_max, setup.draft_copies, ctx_min),
            "verify": (s, pair.target, d, ctx_max, ctx_min),
            "decode": (s, pair.target, ctx_max, ctx_min),
            "prefill": (s, pair.target, q),
            "draft_prefill": (s, pair.draft, q, setup.draft_copies),
        }
        self.by_mapping: dict[tuple[str, str], object] = {}  # (kind, repr(mapping)) -> its table
        builds = {}  # the tables no earlier set has: (kind, repr(mapping)) -> how to build it

        def want(kind: str, m: dict, build) -> None:
            """The table of ``kind`` and mapping ``m``: an earlier set's with the same key and enough rows (of
            those, the fewest: the same object where they are exactly enough, or the verification's, whose rows
            are costed as runs ask for them), else built."""
            tag = (kind, repr(m))
            found = [t for t in reuse if t.keys[kind] == self.keys[kind] and tag in t.by_mapping and t.n_max >= n_max]
            if not found:
                builds[tag] = build
                return
            fewest = min(found, key=lambda t: t.n_max)
            got = fewest.by_mapping[tag]
            if fewest.n_max > n_max and kind != "verify":
                got = got.head(n_max + 1)
            self.by_mapping[tag] = got

        p, copies = PREFILL_MAPPING, setup.draft_copies
        # the verification rows costed at once: where the pool loop asks for each row it reads
        # (``adsl.sim.loop.pool_loop``) the full pass's, which a closed loop reads the most; otherwise all of them
        first = [n_max] if asks and setup.pool_tokens else range(n_max + 1)
        if sd:
            qs = range(1, d + 2)
            for m in self.target_maps:
                want("verify", m, lambda m=m: RowTables(pair.target, s, qs, m, n_max, ctx_max, ctx_min, first))
            for m in self.draft_maps:
                want("draft", m, lambda m=m: PassTable.build(pair.draft, s, 1, m, n_max, ctx_max, copies, ctx_min))
        else:
            m = setup.target_mapping
            want("decode", m, lambda: PassTable.build(pair.target, s, 1, m, n_max, ctx_max, 1, ctx_min))
        want("prefill", p, lambda: PassTable.build(pair.target, s, q, p, n_max, 1.0))
        if sd:
            want("draft_prefill", p, lambda: PassTable.build(pair.draft, s, q, p, n_max, 1.0, copies))
        # each table is one cost-model call, numpy on whole arrays, which releases the GIL: on two threads
        # SADDLE's two verify tables took 8-13 ms where one thread took 14.2 ms (the largest go first, above)
        workers = min(len(builds), workers or cpus())
        if workers > 1:
            made = thread_pool(workers).map(lambda build: build(), builds.values())
            self.by_mapping.update(zip(builds, made, strict=True))
        else:
            self.by_mapping.update((tag, build()) for tag, build in builds.items())

        def get(kind: str, m: dict):
            return self.by_mapping[(kind, repr(m))]

        self.draft: list[PassTable] = [get("draft", m) for m in self.draft_maps] if sd else []
        self.verify_rows: list[RowTables] = [get("verify", m) for m in self.target_maps] if sd else []
        for rows in self.verify_rows:  # taken from an earlier set: the rows it did not cost at once
            rows.fill(first)
        self.verify: list[list[PassTable]] = [rows.tables for rows in self.verify_rows]
        self.decode: PassTable | None = None if sd else get("decode", setup.target_mapping)
        self.prefill = [get("prefill", p)] + ([get("draft_prefill", p)] if sd else [])
        # what the loop reads of the verification: its variants stacked, each row copied in once costed
        # (``fill_verify``), and which rows are; what the tables are built from (``adsl.sim.core.tables_digest``)
        shape = (len(self.verify), d + 1, n_max + 1, self.verify[0][0].gpu.shape[1]) if sd else (0, 1, 1, 2)
        self._vg, self._vp = np.zeros(shape), np.zeros(shape)
        self._have = np.zeros(n_max + 1, np.bool_)
        if sd:
            self._copy(np.flatnonzero(np.logical_and.reduce([r.have[: n_max + 1] for r in self.verify_rows])))
        self.verify_key = repr((self.keys["verify"], self.target_maps, n_max))
        self._lock, self._asked = threading.Lock(), 0

    def _copy(self, n) -> None:
        """Rows ``n`` (request counts) of every variant into the stacked tables."""
        for v, rows in enumerate(self.verify_rows):
            self._vg[v][:, n], self._vp[v][:, n] = rows.gpu[:, n], rows.pim[:, n]
        self._have[n] = True

    def verify_known(self) -> np.ndarray:
        """Whether each request count's row of the verification tables is costed (a copy: a replica's own)."""
        with self._lock:
            return self._have.copy()

    def fill_verify(self, n: int) -> np.ndarray:
        """Cost the verification tables' row of ``n`` requests (``RowTables.fill``) for the loop; past ``ROWS_APART``
        rows asked for, every row left at once. Returns the rows costed by then (``verify_known``): each was written
        before this call took the lock, so the replica that asked may read them all."""
        with self._lock:
            if not self._have[n]:  # another replica's may be read by its loop meanwhile: written once
                self._asked += 1
                ask = [n] if self._asked <= ROWS_APART else np.flatnonzero(~self._have)
                for rows in self.verify_rows:
                    rows.fill(ask)
                self._copy(ask)
            return self._have.copy()

    def flat(self) -> tuple:
        """The tables as ``loop.run_replica`` takes them: draft (variant, n, ctx), verify (variant, q - 1, n,
        ctx), decode (n, ctx), prefill (model, n, ctx), GPU and PIM each; the context step; draft variants
        with FC on PIM; verify variants with attention on PIM."""

        def stack(tables, empty):
            if not tables:
                return np.zeros(empty), np.zeros(empty)
            return np.stack([t.gpu for t in tables]), np.stack([t.pim for t in tables])

        dg, dp = stack(self.draft, (0, 1, 2))
        vg, vp = self._vg, self._vp
        decg, decp = (self.decode.gpu, self.decode.pim) if self.decode else (np.zeros((1, 2)), np.zeros((1, 2)))
        pg, pp = stack(self.prefill, (0, 1, 2))
        fc_on_pim = np.array([m.get("fc") == "pim" for m in self.draft_maps] + [False], np.int64)
        attn_on_pim = np.array([m.get("attention") == "pim" for m in self.target_maps] + [False], np.int64)
        return (dg, dp, vg, vp, decg, decp, pg, pp, float(CTX_STEP), fc_on_pim, attn_on_pim)


# draft-length policies that decide per batch, not per drafted token: no Controller on the draft's path
NO_CONTROLLER = ("fixed", "batch_schedule")


def layout_tuple(setup: Setup, layout: Layout) -> tuple:
    """(stages, PIM machines, machines per stage, replicated draft, shared stacks, the Controller's seconds
    per draft step) as ``loop.run_replica`` takes them."""
    ctrl = 0.0 if setup.policy in NO_CONTROLLER else float(setup.controller_step_s)
    return (
        layout.stages,
        layout.pim,
        layout.machines_per_stage,
        setup.draft_copies > 1,
        setup.system.shared_stacks,
        ctrl,
    )
