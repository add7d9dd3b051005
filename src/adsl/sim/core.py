"""Event-driven simulation core, one for every system.

The batch's slots are cut into micro-batches (``Setup.schedule.micro_batches``); each micro-batch runs
its own loop on the system's machines (``adsl.sim.resources``), so the passes of different micro-batches
overlap wherever they use different machines and serialise where they share one:

- AD: a decode pass over the micro-batch's requests, one token each, again and again;
- speculative decoding without a pool (GPU-SD, SpecPIM-style PIM-SD, SADDLE-d): the micro-batch drafts
  (d passes, or the adaptive rule's lengths), then verifies its own requests, strictly alternating;
- SADDLE-p (Shared Pool, sequential): every micro-batch drafts, then one pooled pass verifies them all
  (at most C tokens, the ones most likely to pass first);
- SADDLE-s / SADDLE (Shared + Eager Pool, asynchronous): a micro-batch's finished drafts wait in the
  Shared Pool; the verifier takes everything in the pool (at most C tokens, highest running product
  first) as soon as it is idle, so drafting of some micro-batches runs while others are verified; while
  a micro-batch is verified its requests keep drafting optimistically (Eager Pool) and keep those tokens
  only if every verified token passed and the first eager token is the target's bonus token.

Time is event-driven per replica (clocks of different replicas diverge with their acceptance streams);
the requests of a micro-batch are handled as arrays, and the asynchronous pool decides the k-th pass of
every replica at once (``_AsyncPools``: a replica's passes depend only on its own earlier ones). Costs
come from ``PassTable`` (one vectorized cost-model call per kind of pass); energy and operator-class
times are read for all passes at once after the run. Requests are served through ``batching``'s slots:
a finished request's slot takes the next queued request (continuous batching, with its prefill) and
results cover the steady-state window, or the slots run one static batch.
"""

from __future__ import annotations

import dataclasses
import heapq
from dataclasses import dataclass, field

import numpy as np

from adsl.fitting.generator import match_runs
from adsl.perf.models import Pair
from adsl.sim.batching import Continuous
from adsl.sim.engine import PREFILL_MAPPING, Setup, SimError, requests, simulate
from adsl.sim.pools import pool_admit
from adsl.sim.resources import Layout, Machines, PassTable

KINDS = ("draft", "eager", "verify", "decode", "prefill")
SCALAR_STEPS = 16  # PassTables.draft_costs: up to this many passes, scalar look-ups are faster


@dataclass(frozen=True)
class RunResult:
    """One run of a system over R replicas (arrays of shape (R,) unless said otherwise)."""

    time_s: np.ndarray  # measured wall time (the steady-state window, or the whole static batch)
    energy_j: np.ndarray
    tokens: np.ndarray  # tokens emitted in the measured window
    iterations: np.ndarray  # verification (or decode) passes in the window
    busy_s: dict[str, np.ndarray]  # "gpu" / "pim" / "link" -> busy seconds per device in the window
    class_s: dict[str, np.ndarray]  # operator class -> seconds (serial sum) in the window
    stage_s: dict[str, np.ndarray]  # draft / verify / prefill busy time and their overlap, in the window
    drafted: np.ndarray  # draft tokens in the window (eager included)
    request_rounds: np.ndarray  # requests verified, summed over the passes in the window
    window: dict[str, np.ndarray]  # start_s, end_s, completed, total_s, total_tokens
    pool: dict[str, np.ndarray]  # eager drafted / migrated / discarded, pool_max, wasted
    placement: dict[str, float] = field(default_factory=dict)  # share of passes with draft FC / target attn on PIM
    # per replica, when asked for: {"segments": [(machine, start, end, kind)], "jobs": [(kind, start, end)]}
    timelines: list | None = None
    # open loop: per request (all replicas): replica, arrival, admitted, first_token, finished, out (tokens)
    requests: dict[str, np.ndarray] | None = None

    @property
    def throughput_tok_s(self) -> np.ndarray:
        return self.tokens / self.time_s

    @property
    def tokens_per_j(self) -> np.ndarray:
        return self.tokens / self.energy_j


def from_engine(res: dict) -> RunResult:
    """The round-based engines' result dict (``adsl.sim.engine``, ``adsl.sim.pools``) as a RunResult."""
    x = res["time_s"].shape[0]
    pool = res.get("pool", {})
    win = res["window"]
    return RunResult(
        time_s=res["time_s"],
        energy_j=res["energy_j"],
        tokens=np.asarray(res["tokens"], dtype=float),
        iterations=np.asarray(res["iterations"], dtype=float),
        busy_s=res["busy_s"],
        class_s=res["class_s"],
        stage_s={k: np.broadcast_to(np.asarray(v, dtype=float), (x,)) for k, v in res["stage_s"].items()},
        drafted=np.asarray(res["drafted"], dtype=float),
        request_rounds=np.asarray(win["request_rounds"], dtype=float),
        window={k: np.asarray(v, dtype=float) for k, v in win.items() if k != "request_rounds"},
        pool={k: np.asarray(v, dtype=float) for k, v in pool.items() if k != "capacity"},
        placement=dict(res["placement"]),
    )


def _flip(mapping: dict, family: str) -> dict:
    return {**mapping, family: "pim" if mapping.get(family) == "gpu" else "gpu"}


class PassTables:
    """Every kind of pass a run issues, as scalar look-ups, with the dynamic scheduler's alternatives."""

    def __init__(self, setup: Setup, pair: Pair, slots: int, ctx_max: float, prompt: float):
        s, sd = setup.system, setup.decoding == "sd"
        d = setup.draft_length
        pim_weights = s.weights_in == "pim"
        self.draft = []
        self.verify: list[list[PassTable]] = []
        if sd:
            maps = [setup.draft_mapping] + ([_flip(setup.draft_mapping, "fc")] if setup.dynamic and pim_weights else [])
            self.draft = [PassTable.build(pair.draft, s, 1, m, slots, ctx_max, setup.draft_copies) for m in maps]
            tmaps = [setup.target_mapping] + ([_flip(setup.target_mapping, "attention")] if setup.dynamic else [])
            self.verify = [
                [PassTable.build(pair.target, s, q, m, slots, ctx_max) for q in range(1, d + 3)] for m in tmaps
            ]
        else:
            self.decode = PassTable.build(pair.target, s, 1, setup.target_mapping, slots, ctx_max)
        q = max(1, int(round(prompt)))
        self.prefill = [PassTable.build(pair.target, s, q, PREFILL_MAPPING, slots, 1.0)]
        if sd:
            self.prefill.append(PassTable.build(pair.draft, s, q, PREFILL_MAPPING, slots, 1.0, setup.draft_copies))

    def draft_costs(self, n: np.ndarray, ctx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``draft_pass`` element by element over arrays of request counts and mean contexts."""
        if n.size <= SCALAR_STEPS:  # one chain: Python floats beat numpy's cost per call
            rows = [self.draft_pass(a, b) for a, b in zip(n.ravel().tolist(), ctx.ravel().tolist(), strict=True)]
            v, g, p = zip(*rows, strict=True) if rows else ((), (), ())
            return np.array(v, np.int64).reshape(n.shape), np.array(g).reshape(n.shape), np.array(p).reshape(n.shape)
        v = np.zeros(n.shape, np.int64)
        g, p = self.draft[0].at_many(n, ctx)
        for k, t in enumerate(self.draft[1:], 1):
            g1, p1 = t.at_many(n, ctx)
            better = g1 + p1 < g + p  # ties keep the lower variant, as draft_pass
            v, g, p = np.where(better, k, v), np.where(better, g1, g), np.where(better, p1, p)
        return v, g, p

    def draft_pass(self, n: int, ctx: float) -> tuple[int, float, float]:
        """(variant, GPU s, PIM s): the faster placement of draft FC when the scheduler is on."""
        best = None
        for v, t in enumerate(self.draft):
            g, p = t.at(n, ctx)
            if best is None or g + p < best[1] + best[2]:
                best = (v, g, p)
        return best

    def verify_pass(self, n: int, ctx: float, q: float) -> tuple[int, int, float, float, float]:
        """(variant, integer q, weight of q + 1, GPU s, PIM s): linear between integer-q tables."""
        q0 = min(int(q), len(self.verify[0]) - 1)
        f = q - q0 if q0 + 1 <= len(self.verify[0]) else 0.0
        best = None
        for v, tables in enumerate(self.verify):
            g0, p0 = tables[q0 - 1].at(n, ctx)
            g1, p1 = tables[q0].at(n, ctx) if f > 0 else (g0, p0)
            g, p = g0 * (1 - f) + g1 * f, p0 * (1 - f) + p1 * f
            if best is None or g + p < best[3] + best[4]:
                best = (v, q0, f, g, p)
        return best


@dataclass(frozen=True)
class DraftChains:
    """Draft chains of many (replica, micro-batch) pairs at once. Step j of a chain drafts for its
    requests with a length > j; (R, G, K) arrays hold each step's draft-table variant, request count and
    mean context, (R, G) arrays each chain's steps, serial GPU + link and PIM seconds (the sums of its
    steps', in step order) and steps with the draft's FC on PIM."""

    steps: np.ndarray
    gpu_s: np.ndarray
    pim_s: np.ndarray
    variant: np.ndarray
    n: np.ndarray
    ctx: np.ndarray
    fc_on_pim: np.ndarray


def draft_chains(tables: PassTables, lengths, ctx, starts, fc_on_pim) -> DraftChains:
    """``lengths`` (R, S) draft tokens per slot (0: not drafting), ``ctx`` (R, S) each slot's context
    when the chain starts, ``starts`` the first slot of each micro-batch (contiguous, non-empty);
    ``fc_on_pim[v]``: draft variant v places FC on PIM."""
    step = np.arange(int(lengths.max()))
    drafting = lengths[:, :, None] > step
    n = np.add.reduceat(drafting.astype(np.int64), starts, axis=1)
    total = np.add.reduceat(np.where(drafting, ctx[:, :, None], 0.0), starts, axis=1)
    c = total / np.maximum(n, 1) + step
    v, g, p = tables.draft_costs(n, c)
    some = n > 0
    g, p = np.where(some, g, 0.0), np.where(some, p, 0.0)
    return DraftChains(
        steps=np.maximum.reduceat(lengths, starts, axis=1),
        # cumsum adds in step order, as one pass after the other (a plain sum may pair them up)
        gpu_s=g.cumsum(axis=2)[..., -1],
        pim_s=p.cumsum(axis=2)[..., -1],
        variant=v,
        n=n,
        ctx=c,
        fc_on_pim=(some & np.asarray(fc_on_pim)[v]).sum(axis=2),
    )


@dataclass
class _Slots:
    """Request slots of one replica (arrays over slots) and the queue behind them."""

    cur: np.ndarray
    pos: np.ndarray
    left: np.ndarray
    ctx: np.ndarray
    next_id: int
    n: int
    arrival: np.ndarray | None = None  # open loop: each request's arrival time (sorted); None: all queued at 0

    def waiting(self, t: float) -> int:
        """Requests queued (arrived by ``t``) and not yet in a slot."""
        arrived = self.n if self.arrival is None else int(np.searchsorted(self.arrival, t, side="right"))
        return max(0, arrived - self.next_id)

    def next_arrival(self) -> float | None:
        """When the next request not yet admitted arrives (None: none left)."""
        if self.next_id >= self.n:
            return None
        return 0.0 if self.arrival is None else float(self.arrival[self.next_id])

    def admit(self, done: np.ndarray, prompt: np.ndarray, out: np.ndarray, t: float = np.inf) -> np.ndarray:
        """Slots in ``done`` take the requests queued by time ``t`` in slot order; returns the slots that
        got one."""
        idx = np.flatnonzero(done)
        take = idx[: min(idx.size, self.waiting(t))]
        ids = np.arange(self.next_id, self.next_id + take.size)
        self.next_id += take.size
        self.cur[take] = ids
        self.pos[take] = 0
        self.left[take] = out[ids]
        self.ctx[take] = prompt[ids]
        admitted = np.zeros_like(done)
        admitted[take] = True
        return admitted


class _Replica:
    """One replica's event-driven run."""

    def __init__(
        self, setup, tables, layout, prompt, out, runs, cont_runs, lengths, conf, later, slots, record, mb, arrival=None
    ):
        self.s, self.t, self.layout = setup, tables, layout
        self.prompt, self.out = prompt, out
        self.runs, self.cont_runs, self.lengths, self.conf, self.later = runs, cont_runs, lengths, conf, later
        self.m = Machines(layout, record)
        n = out.size
        if arrival is None:
            self.slots = _Slots(
                np.arange(slots), np.zeros(slots, np.int64), out[:slots].copy(), prompt[:slots].copy(), slots, n
            )
        else:  # open loop: slots start empty; requests enter as they arrive
            empty = np.zeros(slots, np.int64)
            self.slots = _Slots(np.full(slots, n), empty.copy(), empty.copy(), np.zeros(slots), 0, n, arrival)
        # per request: when it took a slot, produced its first token (its prefill's end) and finished
        self.t_admit, self.t_first, self.t_done = (np.full(n, np.nan) for _ in range(3))
        mb = max(1, min(mb, slots))
        edges = np.linspace(0, slots, mb + 1).round().astype(int)
        self.groups = [slice(a, b) for a, b in zip(edges[:-1], edges[1:], strict=True) if b > a]
        self._stretch: list[list | None] = [None] * len(self.groups)  # AD: see _ad_round
        # (kind, start, end, passes): passes = [(table, variant, n, ctx, q0, f)] issued as one job
        self.jobs: list[tuple] = []
        self.events: list[tuple[float, float, int]] = []  # (time, emitted, completed) at verify ends
        self.rounds: list[tuple[float, int, int]] = []  # (time, requests verified, draft tokens)
        self.continuing = np.zeros(slots, bool)
        self.held = np.zeros(slots, np.int64)  # kept eager tokens: the next pool entry
        self.stats = dict(eager=0, migrated=0, discarded=0, wasted=0, pool_max=0)
        self.placement = {"draft_fc_on_pim": [0, 0], "target_attention_on_pim": [0, 0]}
        maps = [setup.draft_mapping, _flip(setup.draft_mapping, "fc")]
        self.fc_on_pim = [m.get("fc") == "pim" for m in maps]  # per draft variant of PassTables

    # -- passes -----------------------------------------------------------------------------------
    def _issue(self, kind, release, g, p, passes, everywhere=False):
        """Book a job of GPU + link ``g`` and PIM ``p`` seconds; ``passes`` are its passes' look-up keys."""
        if everywhere and self.layout.stages > 1:
            start, end = self.m.run_everywhere(release, g, p, kind)
        else:
            start, end = self.m.run(release, self.layout.segments(g, p), kind)
        self.jobs.append((kind, start, end, passes))
        return end

    def _draft_chain(self, release, lengths, ctx, offset, kind):
        """Draft passes of one micro-batch: step j drafts for the requests with length > j. The chain is
        booked as one job (its passes follow each other on the same machines): its serial time and its
        GPU / PIM split are the sum of its passes'."""
        if lengths.size == 0 or lengths.max() <= 0:
            return release
        k = int(lengths.max())
        counts = np.bincount(lengths, minlength=k + 1)[1:]  # requests drafting exactly j + 1 tokens
        csum = np.bincount(lengths, weights=ctx + offset, minlength=k + 1)[1:]
        n = counts[::-1].cumsum()[::-1]
        c = csum[::-1].cumsum()[::-1] / np.maximum(n, 1) + np.arange(k)
        v, g, p = self.t.draft_costs(n, c)
        # cumsum adds in step order, as one pass after the other
        g_s, p_s = float(g.cumsum()[-1]), float(p.cumsum()[-1])
        return self._book_steps(kind, release, v, n, c, g_s, p_s, int(np.asarray(self.fc_on_pim)[v].sum()))

    def _book_chain(self, kind, release, chains, r, g):
        """Book chain (r, g) of ``chains`` (``draft_chains``) from ``release``; returns its end."""
        k = int(chains.steps[r, g])
        steps = chains.variant[r, g, :k], chains.n[r, g, :k], chains.ctx[r, g, :k]
        g_s, p_s = float(chains.gpu_s[r, g]), float(chains.pim_s[r, g])
        return self._book_steps(kind, release, *steps, g_s, p_s, int(chains.fc_on_pim[r, g]))

    def _book_steps(self, kind, release, variant, n, ctx, gpu_s, pim_s, on_pim):
        """Book a chain of ``n.size`` draft steps (their variants, request counts, mean contexts; serial GPU
        and PIM seconds; steps with FC on PIM) as one job from ``release``; returns its end."""
        hits = self.placement["draft_fc_on_pim"]
        hits[0] += on_pim
        hits[1] += n.size
        passes = [("draft", variant, n, ctx, 0, 0.0)]
        return self._issue(kind, release, gpu_s, pim_s, passes, everywhere=self.s.draft_copies > 1)

    def _verify(self, release, n, ctx, q):
        v, q0, f, g, p = self.t.verify_pass(n, ctx, q)
        m = self.s.target_mapping if v == 0 else _flip(self.s.target_mapping, "attention")
        self.placement["target_attention_on_pim"][0] += m.get("attention") == "pim"
        self.placement["target_attention_on_pim"][1] += 1
        return self._issue("verify", release, g, p, [("verify", v, n, ctx, q0, f)])

    def _prefill(self, release, n):
        if n == 0:
            return release
        t = release
        for i, table in enumerate(self.t.prefill):
            g, p = table.at(n, 0.0)
            t = self._issue("prefill", t, g, p, [("prefill", i, n, 0.0, 0, 0.0)])
        return t

    # -- requests ---------------------------------------------------------------------------------
    def _advance(self, sl, t, emitted, advance, verified):
        """Emit tokens of slots ``sl``, refill finished slots; returns the time the group may go on."""
        s = self.slots
        s.left[sl] -= emitted
        s.ctx[sl] += emitted
        s.pos[sl] += np.where(verified, advance, 0)
        return self._settle(sl, t, emitted, verified)

    def _settle(self, sl, t, emitted, verified):
        """After slots ``sl`` emitted ``emitted`` at ``t``: record finished requests, refill their slots."""
        s = self.slots
        done = verified & (s.left[sl] == 0)
        finished = int(np.add.reduce(done))
        if finished:
            self.t_done[s.cur[sl][done]] = t
            self.continuing[sl] &= ~done
            self.held[sl] = np.where(done, 0, self.held[sl])
        self.events.append((t, float(np.add.reduce(emitted)), finished))
        # finished slots (and, open loop, idle ones) take the requests queued by now
        if s.arrival is None and not finished:
            return t
        free = done if s.arrival is None else s.left[sl] == 0
        if free.any() and s.waiting(t):
            mask = np.zeros(s.cur.size, bool)
            mask[sl] = free
            return self._start(sl, s.admit(mask, self.prompt, self.out, t)[sl], t)
        return t

    def _start(self, sl, admitted, t):
        """Prefill the requests just admitted to slots ``sl`` at ``t``; returns when the group may go on."""
        if not admitted.any():
            return t
        ids = self.slots.cur[sl][admitted]
        self.t_admit[ids] = t
        serving = self.serving
        if serving is not None and serving.prefill:
            t = self._prefill(t, int(admitted.sum()))
        self.t_first[ids] = t
        return t

    def _wake(self, sl, t):
        """Open loop, a group with nothing in flight at ``t``: admit what has arrived (returns when the
        group may go on), or the time the next request arrives (None: no request left)."""
        s = self.slots
        if s.waiting(t):
            mask = np.zeros(s.cur.size, bool)
            mask[sl] = s.left[sl] == 0
            return self._start(sl, s.admit(mask, self.prompt, self.out, t)[sl], t)
        return s.next_arrival()

    def _window_runs(self, sl):
        s = self.slots
        req = np.minimum(s.cur[sl], s.n - 1)
        return req, s.pos[sl]

    # -- the loops --------------------------------------------------------------------------------
    def run(self, serving: Continuous | None):
        self.serving = serving
        if self.s.decoding == "ad":
            return self._loop(self._ad_round, self._ad_end)
        if not self.s.pool_tokens:
            return self._loop(self._sd_round, lambda i, sl, t, ending: self._advance(sl, t, *ending))
        return self._sequential_pool()  # the asynchronous pool runs every replica at once: _AsyncPools

    def _active(self, sl):
        return self.slots.left[sl] > 0

    def _loop(self, round_fn, end_fn):
        """Every micro-batch on its own: a heap of (time, group, what happens then): a round starts (its
        passes are booked and end at a known time), or a round ends (its tokens are emitted and finished
        slots take queued requests, in the order rounds end, so the queue goes to whichever group frees a
        slot first). Open loop: a group with nothing in flight admits what has arrived, or waits for the
        next arrival."""
        heap = [(0.0, i, None) for i in range(len(self.groups))]
        while heap:
            t, i, ending = heapq.heappop(heap)
            self.m.advance(t)
            sl = self.groups[i]
            if ending is not None:
                heapq.heappush(heap, (end_fn(i, sl, t, ending), i, None))
                continue
            if self._stretch[i] is None and not self._active(sl).any():
                if self.slots.arrival is None:
                    continue
                wake = self._wake(sl, t)
                if wake is not None:
                    heapq.heappush(heap, (max(wake, t), i, None))
                continue
            end, ending = round_fn(i, sl, t)
            heapq.heappush(heap, (end, i, ending))

    def _ad_round(self, i, sl, t):
        """Book one decode pass of group ``i``'s requests: (its end, what _ad_end does then). Until one of
        them finishes (or, open loop, an idle slot takes a request) the group decodes the same requests
        and each context grows by one token a pass, so the pass's request count and context sum carry
        over from its first pass (``_stretch``: emitted per slot, n, context sum, passes to the first
        completion, passes so far); contexts are whole tokens, so the sums are exact."""
        st = self._stretch[i]
        if st is None:
            act = self._active(sl)
            n = int(act.sum())
            s = self.slots
            st = [act.astype(np.int64), n, float(np.add.reduce(s.ctx[sl][act])), int(s.left[sl][act].min()), 0]
            self._stretch[i] = st
        n, k = st[1], st[4]
        c = (st[2] + k * n) / n
        g, p = self.t.decode.at(n, c)
        end = self._issue("decode", t, g, p, [("decode", 0, n, c, 0, 0.0)])
        self.rounds.append((end, n, 0))
        return end, True

    def _ad_end(self, i, sl, t, _ending):
        """Group ``i``'s decode pass ends at ``t``: every request emits one token; returns when it goes on."""
        st = self._stretch[i]
        emit, n = st[0], st[1]
        s = self.slots
        s.left[sl] -= emit
        s.ctx[sl] += emit
        s.pos[sl] += emit
        st[4] += 1
        if st[4] < st[3] and (s.arrival is None or n == emit.size or not s.waiting(t)):
            self.events.append((t, float(n), 0))  # nobody finished, nobody admitted
            return t
        self._stretch[i] = None
        return self._settle(sl, t, emit, emit.astype(bool))

    def _fresh_lengths(self, sl, cap, act=None):
        """Draft length of each slot from where it stands (0 for an idle slot)."""
        act = self._active(sl) if act is None else act
        d = self.s.draft_length
        if self.lengths is None:
            return np.where(act, d, 0)
        req, pos = self._window_runs(sl)
        return np.where(act, np.minimum(self.lengths[req, pos], cap), 0)

    def _sd_round(self, i, sl, t):
        act = self._active(sl)
        lengths = self._fresh_lengths(sl, self.s.draft_length, act)
        ctx = self.slots.ctx[sl]
        t = self._draft_chain(t, lengths, ctx, 0.0, "draft")
        n = int(act.sum())
        drafted = int(lengths.sum())
        # means as sum / n: what ndarray.mean computes, without its per-call overhead
        end = self._verify(t, n, float(np.add.reduce(ctx[act])) / n, (drafted + n) / n)
        req, pos = self._window_runs(sl)
        # only kept eager tokens continue a draft (``cont_runs``, in _finish); here every draft is fresh
        acc = np.where(act, np.minimum(self.runs[req, pos], lengths), 0)
        self.rounds.append((end, n, drafted))
        emitted = np.where(act, np.minimum(acc + 1, self.slots.left[sl]), 0)
        return end, (emitted, acc + 1, act)

    def _admit_pool(self, members, offered):
        """Pool admission over the requests of ``members`` (groups): at most d a request, C in all.
        Returns (slot indices, active, admitted draft tokens per slot of the whole replica)."""
        d = self.s.draft_length
        idx = np.concatenate([np.arange(self.groups[i].start, self.groups[i].stop) for i in members])
        s = self.slots
        act = s.left[idx] > 0
        want = np.where(act, np.minimum(offered[idx], d), 0)
        req = np.minimum(s.cur[idx], s.n - 1)
        win = np.arange(d)

        def conf_window():
            w = self.later[req[:, None], s.pos[idx][:, None] + win]
            w[:, 0] = self.conf[req, s.pos[idx]]
            return w[None]

        lv = np.zeros(s.cur.size, np.int64)
        lv[idx] = np.where(act, pool_admit(want[None], conf_window, np.array([act.sum()]), self.s.pool_tokens)[0], 0)
        self.stats["pool_max"] = max(self.stats["pool_max"], int((lv[idx] + 1)[act].sum()))
        return idx, act, lv

    def _pooled_verify(self, t, idx, act, lv):
        n = int(act.sum())
        ctx = self.slots.ctx[idx]
        return self._verify(t, n, float(ctx[act].mean()), float((lv[idx][act] + 1).mean()))

    def _sequential_pool(self):
        """SADDLE-p: every micro-batch drafts, one pooled pass verifies them all, again. A full pool cuts
        drafts short: the C tokens most likely to pass are drafted, the others are not."""
        t = 0.0
        members = list(range(len(self.groups)))
        cap = self.s.draft_length
        while self.slots.left.any():
            self.m.advance(t)
            want = np.zeros(self.slots.cur.size, np.int64)
            for i in members:
                want[self.groups[i]] = self._fresh_lengths(self.groups[i], cap)
            idx, act, lv = self._admit_pool(members, want)
            ready = max([t] + [self._draft_chain(t, lv[g], self.slots.ctx[g], 0.0, "draft") for g in self.groups])
            end = self._pooled_verify(ready, idx, act, lv)
            self.rounds.append((end, int(act.sum()), int(lv.sum())))
            t = end
            for i in members:
                sl = self.groups[i]
                a = self.slots.left[sl] > 0
                req, pos = self._window_runs(sl)
                acc = np.where(a, np.minimum(self.runs[req, pos], lv[sl]), 0)
                emitted = np.where(a, np.minimum(acc + 1, self.slots.left[sl]), 0)
                t = max(t, self._advance(sl, end, emitted, acc + 1, a))


class _AsyncPools:
    """SADDLE-s / SADDLE (``pool_tokens`` with ``eager``) over every replica in lockstep. Each request's
    next pool entry is ready when its drafting ends (at once for a request that keeps its eager tokens);
    the verifier takes every ready entry as soon as it is idle (``pool_trigger: idle``) or once every
    request's entry is ready (``complete``). Replicas keep their own clocks and machines, and a replica's
    k-th pass depends only on its own earlier ones, so the k-th passes of all replicas are decided
    together as (replicas, slots) arrays; only what touches one replica's machines or queue (booking,
    admission, prefill) runs replica by replica, in the order that replica alone would run it."""

    def __init__(self, reps: list[_Replica], runs, cont_runs, lengths, conf, later):
        self.reps = reps
        setup = reps[0].s
        self.d, self.trigger, self.capacity = setup.draft_length, setup.pool_trigger, setup.pool_tokens
        # every replica's slot state as one row of a stacked array; the replica keeps a view of its row
        for obj, names in ((lambda r: r.slots, ("cur", "pos", "left", "ctx")), (lambda r: r, ("held", "continuing"))):
            for name in names:
                stacked = np.stack([getattr(obj(r), name) for r in reps])
                setattr(self, name, stacked)
                for i, r in enumerate(reps):
                    setattr(obj(r), name, stacked[i])
        self.runs, self.cont_runs, self.lengths, self.conf, self.later = runs, cont_runs, lengths, conf, later
        self.rows = np.arange(len(reps))[:, None]
        self.n_req = reps[0].slots.n
        groups = reps[0].groups
        self.starts = np.array([g.start for g in groups])
        self.group_of = np.repeat(np.arange(len(groups)), [g.stop - g.start for g in groups])
        shape = self.left.shape
        self.ready = np.zeros(shape)  # when each slot's entry is in the pool
        self.offered = np.zeros(shape, np.int64)  # tokens of that entry
        self.full = np.zeros(shape, np.int64)  # running-product length from where each request stands
        self.stats = {
            k: np.zeros(len(reps), np.int64) for k in ("eager", "migrated", "discarded", "wasted", "pool_max")
        }

    def run(self, serving: Continuous | None) -> None:
        reps = self.reps
        for rep in reps:
            rep.serving = serving
        x = len(reps)
        open_loop = reps[0].slots.arrival is not None
        self._draft_fresh(np.ones(self.left.shape, bool), np.zeros(self.left.shape))
        verifier_free = np.zeros(x)
        gone = np.zeros(x, bool)  # open loop: no request left
        while True:
            if open_loop:  # idle slots take what has arrived before the next pass
                for i in np.flatnonzero(~gone):
                    now = self._refill(i, float(verifier_free[i]))
                    gone[i] = now is None
                    verifier_free[i] = verifier_free[i] if now is None else now
            act = self.left > 0
            alive = act.any(axis=1) & ~gone
            if not alive.any():
                break
            if self.trigger == "complete":
                pending = np.where(act, self.ready, -np.inf).max(axis=1)
            else:
                pending = np.where(act, self.ready, np.inf).min(axis=1)
            start = np.maximum(verifier_free, pending)
            sel = act & (self.ready <= start[:, None]) & alive[:, None]
            lv = self._admit(sel)
            end = np.zeros(x)
            for i in np.flatnonzero(alive):
                rep, m = reps[i], sel[i]
                rep.m.advance(min(float(start[i]), float(verifier_free[i])))
                n = int(m.sum())
                # means as sum / n: what ndarray.mean computes, without its per-call overhead
                ctx, q = float(np.add.reduce(self.ctx[i][m])) / n, float(np.add.reduce(lv[i][m] + 1)) / n
                end[i] = rep._verify(float(start[i]), n, ctx, q)
                # the next pass may enter once this one has cleared the first pipeline stage (all of a
                # tensor-parallel group): verification passes of a pipeline overlap stage by stage
                verifier_free[i] = rep.m.first_stage
                rep.rounds.append((float(end[i]), n, 0))
            self._finish(sel, alive, start, end, lv)
        for i, rep in enumerate(reps):
            rep.stats = {k: int(v[i]) for k, v in self.stats.items()}

    def _refill(self, i: int, now: float) -> float | None:
        """Open loop, replica ``i`` before a pooled pass at ``now``: idle slots take the requests that have
        arrived, are prefilled and draft their first entries; with nothing in flight, wait for the next
        arrival. Returns the time the verifier may start (None: no request left)."""
        rep = self.reps[i]
        s = rep.slots
        while True:
            idle = s.left == 0
            if idle.any() and s.waiting(now):
                admitted = s.admit(idle, rep.prompt, rep.out, now)
                t = rep._start(slice(None), admitted, now)
                mask = np.zeros(self.left.shape, bool)
                mask[i] = admitted
                self._draft_fresh(mask, np.full(self.left.shape, t))
            if (s.left > 0).any():
                return now
            nxt = s.next_arrival()
            if nxt is None:
                return None
            now = max(now, nxt)

    def _windows(self, width: int) -> np.ndarray:
        """(replicas, slots, width) confidences from where each slot's request stands: the draft's first
        token, then its later ones."""
        req = np.minimum(self.cur, self.n_req - 1)
        w = self.later[self.rows[:, :, None], req[:, :, None], self.pos[:, :, None] + np.arange(width)]
        w[:, :, 0] = self.conf[self.rows, req, self.pos]
        return w

    def _admit(self, sel: np.ndarray) -> np.ndarray:
        """Pool admission of the entries of slots ``sel``: at most d tokens a request, C in all, the
        tokens with the highest running product first."""
        want = np.where(sel, np.minimum(self.offered, self.d), 0)
        lv = pool_admit(want, lambda: self._windows(self.d), sel.sum(axis=1), self.capacity)
        st = self.stats
        st["pool_max"] = np.maximum(st["pool_max"], np.where(sel, lv + 1, 0).sum(axis=1))
        return lv

    def _chains(self, kind: str, lengths: np.ndarray, ctx: np.ndarray, release: np.ndarray) -> np.ndarray:
        """One draft chain per (replica, micro-batch) of the slots with ``lengths`` > 0, each released at
        ``release`` (replicas, groups); returns the chains' ends (``release`` where a group drafts none)."""
        chains = draft_chains(self.reps[0].t, lengths, ctx, self.starts, self.reps[0].fc_on_pim)
        ends = release.copy()
        for i, g in zip(*np.nonzero(chains.steps > 0), strict=True):  # a replica's groups in order
            ends[i, g] = self.reps[i]._book_chain(kind, float(release[i, g]), chains, i, g)
        return ends[self.rows, self.group_of]

    def _draft_fresh(self, sel: np.ndarray, releases: np.ndarray) -> None:
        """Slots ``sel`` without a kept eager entry draft a fresh one (from ``releases``, per micro-batch)."""
        d = self.d
        act = sel & (self.left > 0)
        req = np.minimum(self.cur, self.n_req - 1)
        full = np.where(act, np.minimum(self.lengths[self.rows, req, self.pos], 2 * d + 1), 0)
        self.full = np.where(sel, full, self.full)
        fresh = np.where(act & (self.held == 0), np.minimum(self.full, d), 0)
        self.offered = np.where(sel, np.where(self.held > 0, self.held, fresh), self.offered)
        self.ready = np.where(sel, releases, self.ready)
        draft = fresh > 0
        if not draft.any():
            return
        start = np.maximum.reduceat(np.where(draft, releases, -np.inf), self.starts, axis=1)
        self.ready = np.where(draft, self._chains("draft", fresh, self.ctx + 0.0, start), self.ready)
        first = np.where(draft, releases, np.inf).min(axis=1)
        tokens = fresh.sum(axis=1)
        for i in np.flatnonzero(draft.any(axis=1)):
            self.reps[i].rounds.append((float(first[i]), 0, int(tokens[i])))

    def _finish(self, sel, alive, start, end, lv) -> None:
        """Eager drafting of the verified requests during the pass, then acceptance and their next entries."""
        d, rows = self.d, self.rows
        off = self.offered
        extra = np.where(sel, np.clip(np.minimum(self.full, off + d + 1) - off, 0, d + 1), 0)
        eager_end = np.broadcast_to(start[:, None], sel.shape)
        e = extra > 0
        if e.any():
            release = np.broadcast_to(start[:, None], (start.size, self.starts.size))
            eager_end = np.where(e, self._chains("eager", extra, self.ctx + off, release), eager_end)
            tokens = extra.sum(axis=1)
            for i in np.flatnonzero(e.any(axis=1)):
                self.reps[i].rounds.append((float(start[i]), 0, int(tokens[i])))
        req = np.minimum(self.cur, self.n_req - 1)
        run = self.runs[rows, req, self.pos]
        if self.cont_runs is not self.runs:
            run = np.where(self.continuing, self.cont_runs[rows, req, self.pos], run)
        acc = np.minimum(run, lv)
        left = off + extra - lv
        bonus = (acc == lv) & (run > lv) & (left > 0)
        keep = bonus & (left > 1) & sel
        lost = sel & ~keep
        st = self.stats
        st["eager"] += extra.sum(axis=1)
        st["migrated"] += np.where(keep, left - 1, 0).sum(axis=1)
        st["discarded"] += np.where(lost, extra, 0).sum(axis=1)
        st["wasted"] += np.where(lost, off + extra - acc - bonus, 0).sum(axis=1)
        self.held[sel] = np.where(keep, left - 1, 0)[sel]
        self.continuing[sel] = keep[sel]
        emitted = np.where(sel, np.minimum(acc + 1, self.left), 0)
        t = self._advance(sel, alive, end, emitted, acc + 1)  # refills finished slots (their prefill)
        self._draft_fresh(sel, np.maximum(t[:, None], eager_end))

    def _advance(self, sel, alive, end, emitted, advance) -> np.ndarray:
        """Emit the verified slots' tokens, refill finished slots; returns when each replica may go on."""
        self.left -= emitted
        self.ctx += emitted
        self.pos += np.where(sel, advance, 0)
        done = sel & (self.left == 0)
        self.continuing &= ~done
        self.held[done] = 0
        tokens, completed = emitted.sum(axis=1), done.sum(axis=1)
        # finished slots (and, open loop, idle ones) take the requests queued by now
        free = done if self.reps[0].slots.arrival is None else sel & (self.left == 0)
        t = end.copy()
        for i in np.flatnonzero(alive):
            rep = self.reps[i]
            if completed[i]:
                rep.t_done[self.cur[i][done[i]]] = end[i]
            rep.events.append((float(end[i]), float(tokens[i]), int(completed[i])))
            if free[i].any() and rep.slots.waiting(end[i]):
                admitted = rep.slots.admit(free[i], rep.prompt, rep.out, end[i])
                t[i] = rep._start(slice(None), admitted, float(end[i]))
        return t


def _union(intervals: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Length of the union of intervals clipped to [lo, hi]."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(intervals):
        s, e = max(s, lo), min(e, hi)
        if e <= s:
            continue
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (cur_e - cur_s if cur_e is not None else 0.0)


def simulate_core(
    setup: Setup,
    pair: Pair,
    prompt_len,
    output_len,
    accept=None,
    draft_lengths=None,
    confidence=None,
    confidence_later=None,
    serving: Continuous | None = None,
    timelines: bool = False,
    force_events: bool = False,
    arrivals=None,
) -> RunResult:
    """Run every replica. ``prompt_len``/``output_len`` (X, N) per request; ``accept`` (X, N, T) streams
    (bool or bit flags), ``draft_lengths`` (X, N, T) the adaptive rule's lengths from each position (for a
    pool: up to 2 d + 1), ``confidence``/``confidence_later`` (X, N, T) for the pool's ranking.
    ``timelines``: keep every segment's (machine, start, end, kind); ``force_events``: use the event loop
    even where one micro-batch makes it the vectorized engine (for tests). ``arrivals`` (X, N), sorted:
    open-loop serving (``serving`` gives the slots and the prefill): requests enter free slots once they
    have arrived, and results cover the window from the ``serving.warmup``-th arrival to the last one."""
    prompt, out = requests(prompt_len, output_len)
    x, n_req = out.shape
    slots = n_req if serving is None else serving.slots
    sd = setup.decoding == "sd"
    d = setup.draft_length
    if sd and (accept is None or accept.shape[:2] != (x, n_req)):
        raise SimError(f"SD needs acceptance streams of shape ({x}, {n_req}, T)")
    if sd and accept.shape[2] < out.max() + 4 * d + 4:
        raise SimError(f"acceptance streams of {accept.shape[2]} positions; need >= {out.max() + 4 * d + 4}")
    if setup.pool_tokens and setup.pool_tokens < slots + 1:
        raise SimError(f"{setup.name}: pool of {setup.pool_tokens} tokens cannot hold one query token per request")
    ctx_max = float(prompt.max() + out.max() + 4 * d + 4)
    tables = PassTables(setup, pair, slots, ctx_max, float(prompt.mean()))
    layout = Layout.of(setup.system)
    mb = micro_batches(setup, tables, layout, slots, float(prompt.mean() + out.mean() / 2))
    if arrivals is not None:
        arrivals = np.asarray(arrivals, dtype=float)
        if serving is None or arrivals.shape != out.shape or (np.diff(arrivals, axis=1) < 0).any():
            raise SimError("open loop needs serving slots and sorted arrival times of shape (replicas, requests)")
        if setup.pool_tokens and not setup.eager:
            raise SimError(f"{setup.name}: open-loop serving runs on the asynchronous pool only")
    if mb == 1 and not setup.pool_tokens and not force_events and arrivals is None:
        # one micro-batch never overlaps two passes: the event loop reduces to the vectorized engine,
        # which gives the same results for every replica at once (tests/sim/test_core.py)
        one = dataclasses.replace(setup, schedule=dataclasses.replace(setup.schedule, micro_batches=1))
        res = from_engine(simulate(one, pair, prompt, out, accept, draft_lengths, serving))
        return dataclasses.replace(res, placement={**res.placement, "micro_batches": 1.0})
    runs = cont = None
    if sd:
        runs = match_runs(accept.reshape(x * n_req, -1)).reshape(x, n_req, -1)
        cont = runs if accept.dtype == bool else match_runs(accept.reshape(x * n_req, -1), True).reshape(runs.shape)
    conf = confidence
    later = conf if confidence_later is None else confidence_later
    lengths = None if draft_lengths is None else np.asarray(draft_lengths)
    replicas = [
        _Replica(
            setup,
            tables,
            layout,
            prompt[r],
            out[r],
            None if runs is None else runs[r],
            None if cont is None else cont[r],
            None if lengths is None else lengths[r],
            None if conf is None else conf[r],
            None if later is None else later[r],
            slots,
            timelines,
            mb,
            None if arrivals is None else arrivals[r],
        )
        for r in range(x)
    ]
    if setup.pool_tokens and setup.eager:
        _AsyncPools(replicas, runs, cont, lengths, conf, later).run(serving)
    else:
        for rep in replicas:
            rep.run(serving)
    res = _result(setup, tables, replicas, serving, timelines)
    return dataclasses.replace(res, placement={**res.placement, "micro_batches": float(mb)})


def micro_batches(setup: Setup, tables: PassTables, layout: Layout, batch: int, ctx: float) -> int:
    """How many micro-batches a run cuts its slots into. The system's count where the modelled system
    requires it (pipeline stages, SpecPIM-style per-micro-batch verification, SADDLE's Draft Generator per
    micro-batch); else whichever of 1 and that count finishes one round of the whole batch sooner on the
    machines (a decode pass, or d draft passes and a verification, per micro-batch): a micro-batch pays
    the weight reads again, and pays off only where GPU and PIM work of different micro-batches overlap."""
    m = setup.schedule.micro_batches
    if m <= 1 or layout.stages > 1 or setup.schedule.split == "always" or setup.pool_tokens:
        return max(1, m)

    def round_time(k: int) -> float:
        machines, n = Machines(layout), -(-batch // k)
        end = 0.0
        for _ in range(k):
            if setup.decoding == "ad":
                end = max(end, machines.run(0.0, layout.segments(*tables.decode.at(n, ctx)), "")[1])
                continue
            t = 0.0
            for j in range(setup.draft_length):
                t = machines.run(t, layout.segments(*tables.draft_pass(n, ctx + j)[1:]), "")[1]
            end = max(
                end, machines.run(t, layout.segments(*tables.verify_pass(n, ctx, setup.draft_length + 1)[3:]), "")[1]
            )
        return end

    return m if round_time(m) < round_time(1) else 1


def _window(rep: _Replica, serving: Continuous | None) -> tuple[float, float]:
    """[start, end) of the measured time: the whole run for a static batch; else from the warm-up-th
    completion to the first time a slot finds the queue empty."""
    ev = rep.events
    end_all = max((j[2] for j in rep.jobs), default=0.0)
    if serving is None:
        return 0.0, end_all
    if rep.slots.arrival is not None:  # open loop: from the warmup-th arrival to the last arrival
        arr = rep.slots.arrival
        return float(arr[min(serving.warmup, arr.size - 1)]), float(arr[-1])
    times = np.array([e[0] for e in ev])
    done = np.cumsum([e[2] for e in ev])
    order = np.argsort(times, kind="stable")
    times, done = times[order], np.cumsum(np.array([e[2] for e in ev])[order])
    if done.size == 0 or done[-1] < serving.warmup:
        raise SimError("continuous batching: the run ended before its warm-up; raise requests_per_slot")
    start = float(times[np.searchsorted(done, max(serving.warmup, 1))]) if serving.warmup else 0.0
    # the queue runs dry when the N - slots + 1-th request completes: from then on a slot stays idle
    dry = rep.slots.n - rep.slots.cur.size + 1
    end = float(times[min(np.searchsorted(done, dry), times.size - 1)])
    if end <= start:
        raise SimError("continuous batching: empty steady-state window; raise simulation.batching.requests_per_slot")
    return start, end


def _result(setup, tables, replicas, serving, timelines) -> RunResult:
    x = len(replicas)
    time_s, energy, tokens, iters, drafted, rounds = (np.zeros(x) for _ in range(6))
    busy = {k: np.zeros(x) for k in ("gpu", "pim", "link")}
    cls: dict[str, np.ndarray] = {}
    stage = {k: np.zeros(x) for k in ("draft", "verify", "prefill", "overlap")}
    win = {k: np.zeros(x) for k in ("start_s", "end_s", "completed", "total_s", "total_tokens")}
    pool = {k: np.zeros(x) for k in ("eager", "migrated", "discarded", "wasted", "pool_max")}
    placement = {}
    lookup = {"draft": tables.draft, "prefill": tables.prefill}
    for r, rep in enumerate(replicas):
        lo, hi = _window(rep, serving)
        time_s[r] = hi - lo
        win["start_s"][r], win["end_s"][r] = lo, hi
        win["total_s"][r] = max((j[2] for j in rep.jobs), default=0.0)
        win["total_tokens"][r] = sum(e[1] for e in rep.events)
        inside = [e for e in rep.events if lo < e[0] <= hi] if serving is not None else rep.events
        tokens[r] = sum(e[1] for e in inside)
        win["completed"][r] = sum(e[2] for e in inside)
        in_rounds = [q for q in rep.rounds if (lo < q[0] <= hi) or serving is None]
        iters[r] = sum(1 for q in in_rounds if q[1] > 0)
        rounds[r] = sum(q[1] for q in in_rounds)
        drafted[r] = sum(q[2] for q in in_rounds)
        # energy, device and class times of the passes, each counted by its share inside the window
        for (table, variant, q0), (n_a, c_a, f_a, w_a) in _pass_groups(rep.jobs, lo, hi):
            if table == "verify":
                parts = [(tables.verify[variant][q0 - 1], 1 - f_a)]
                if (f_a > 0).any():
                    parts.append((tables.verify[variant][min(q0, len(tables.verify[variant]) - 1)], f_a))
            elif table == "decode":
                parts = [(tables.decode, np.ones_like(f_a))]
            else:
                parts = [(lookup[table][variant], np.ones_like(f_a))]
            for pt, wt in parts:
                c = pt.table.lookup(n_a.astype(np.int64), c_a)
                energy[r] += float((c.energy_j * wt * w_a).sum())
                for k, v in c.busy_s.items():
                    busy.setdefault(k, np.zeros(x))[r] += float((v * wt * w_a).sum())
                for k, v in c.by_class_s.items():
                    cls.setdefault(k, np.zeros(x))[r] += float((v * wt * w_a).sum())
        spans = {k: [(j[1], j[2]) for j in rep.jobs if j[0] in kinds] for k, kinds in _STAGES.items()}
        for k, iv in spans.items():
            stage[k][r] = _union(iv, lo, hi)
        stage["overlap"][r] = (
            stage["draft"][r]
            + stage["verify"][r]
            + stage["prefill"][r]
            - _union([iv for v in spans.values() for iv in v], lo, hi)
        )
        for k, v in rep.stats.items():
            pool[k][r] = v
        for k, (hits, total) in rep.placement.items():
            placement.setdefault(k, []).append(hits / total if total else np.nan)
    if setup.static_power:
        energy = energy + setup.system.static_power_w * time_s
    return RunResult(
        time_s=time_s,
        energy_j=energy,
        tokens=tokens,
        iterations=iters,
        busy_s=busy,
        class_s=cls,
        stage_s=stage,
        drafted=drafted,
        request_rounds=rounds,
        window=win,
        pool=pool,
        placement={k: float(np.nanmean(v)) for k, v in placement.items() if np.isfinite(v).any()},
        timelines=[{"segments": rep.m.intervals, "jobs": [j[:3] for j in rep.jobs]} for rep in replicas]
        if timelines
        else None,
        requests=_requests(replicas) if replicas and replicas[0].slots.arrival is not None else None,
    )


def _pass_groups(jobs, lo: float, hi: float) -> list[tuple[tuple, tuple[np.ndarray, ...]]]:
    """The passes of ``jobs`` with their share inside [lo, hi], grouped by (table, variant, q0) in the
    order each group first appears: ((table, variant, q0), (n, ctx, f, share)), rows in job order. A
    draft chain's passes come as one block of arrays (variant, n, ctx per step)."""
    groups: dict = {}
    first: dict = {}
    blocks = []  # draft chains: (position of the first step, variants, n, ctx, share)
    at = 0
    for _kind, s, e, passes in jobs:
        share = 1.0 if e <= s else max(0.0, min(e, hi) - max(s, lo)) / (e - s)
        if share <= 0:
            continue
        for table, variant, n, ctx, q0, f in passes:
            if isinstance(n, np.ndarray):
                blocks.append((at, variant, n, ctx, share))
                at += n.size
            elif n > 0:
                key = (table, variant, q0)
                if key not in groups:
                    groups[key], first[key] = [], at
                groups[key].append((n, ctx, f, share))
                at += 1
    out = {key: tuple(np.array(v) for v in zip(*rows, strict=True)) for key, rows in groups.items()}
    if blocks:
        v_a = np.concatenate([b[1] for b in blocks])
        n_a = np.concatenate([b[2] for b in blocks])
        c_a = np.concatenate([b[3] for b in blocks])
        w_a = np.repeat([b[4] for b in blocks], [b[2].size for b in blocks])
        where = np.concatenate([b[0] + np.arange(b[2].size) for b in blocks])
        for v in np.unique(v_a):
            m = v_a == v
            key = ("draft", int(v), 0)
            out[key], first[key] = (n_a[m], c_a[m], np.zeros(int(m.sum())), w_a[m]), int(where[m][0])
    return sorted(out.items(), key=lambda item: first[item[0]])


def _requests(replicas) -> dict[str, np.ndarray]:
    """Every request of every replica: when it arrived, took a slot, had its first token and finished."""
    return {
        "replica": np.concatenate([np.full(r.out.size, i) for i, r in enumerate(replicas)]),
        "arrival": np.concatenate([r.slots.arrival for r in replicas]),
        "admitted": np.concatenate([r.t_admit for r in replicas]),
        "first_token": np.concatenate([r.t_first for r in replicas]),
        "finished": np.concatenate([r.t_done for r in replicas]),
        "out": np.concatenate([r.out for r in replicas]).astype(float),
    }


_STAGES = {"draft": ("draft", "eager"), "verify": ("verify", "decode"), "prefill": ("prefill",)}
__all__ = ["RunResult", "simulate_core", "KINDS", "dataclasses"]
