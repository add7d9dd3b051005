"""What a run gives: ``RunResult``, the measured window and the accounting of energy, device, operator-class
and stage time over it, from the logs of the event loop (``adsl.sim.loop.run_replica``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numba import njit

from adsl.sim import loop
from adsl.sim.setup import SimError

# stage -> the job kinds whose busy time it is (loop.KINDS)
STAGES = {"draft": (loop.DRAFT, loop.EAGER), "verify": (loop.VERIFY, loop.DECODE), "prefill": (loop.PREFILL,)}
STAGE_OF = np.array([next(i for i, kinds in enumerate(STAGES.values()) if k in kinds) for k in range(len(loop.KINDS))])
POOL_STATS = ("eager", "migrated", "discarded", "wasted", "pool_max")
STAGE_S = (*STAGES, "overlap")  # the stage times a run reports: each stage's, and their overlap
WINDOW = ("start_s", "end_s", "completed", "total_s", "total_tokens")


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
    # start_s, end_s, completed; total_s, total_tokens: of the run as far as it went (``Continuous.drain``)
    window: dict[str, np.ndarray]
    pool: dict[str, np.ndarray]  # eager drafted / migrated / discarded, pool_max, wasted: over the run
    placement: dict[str, float] = field(default_factory=dict)  # the run's passes with draft FC / target attn on PIM
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


@dataclass(frozen=True)
class ReplicaLog:
    """One replica's run as the loop logged it (named fields of ``loop.run_replica``'s arrays)."""

    job_kind: np.ndarray  # loop.KINDS index per job
    job_start: np.ndarray
    job_end: np.ndarray
    pass_job: np.ndarray  # per pass (a draft chain's steps are passes of one job)
    pass_table: np.ndarray  # loop.TABLES index
    pass_variant: np.ndarray
    pass_n: np.ndarray
    pass_ctx: np.ndarray
    pass_q0: np.ndarray
    pass_f: np.ndarray
    event_t: np.ndarray  # token events: time, tokens emitted, requests completed
    event_emitted: np.ndarray
    event_completed: np.ndarray
    round_t: np.ndarray  # rounds: time, requests verified, draft tokens
    round_n: np.ndarray
    round_drafted: np.ndarray
    segments: tuple  # (machine, start, end, kind) arrays, when recorded
    counts: np.ndarray  # draft FC on PIM, draft passes, attention on PIM, verify passes, POOL_STATS
    t_admit: np.ndarray
    t_first: np.ndarray
    t_done: np.ndarray
    out: np.ndarray  # output tokens per request
    arrival: np.ndarray | None  # open loop: each request's arrival
    slots: int
    account: Account | None = None  # its accounting, where the replica's thread did it (``account``)

    @classmethod
    def of(cls, logs, counts, times, out, slots, arrival) -> ReplicaLog:
        """From ``loop.run_replica``'s logs (float arrays, whole numbers stored exactly), counters and times."""
        jobs, passes, events, rounds, iv = (logs[i][: logs[5][i]] for i in range(5))
        i64 = np.int64
        return cls(
            jobs[:, 0].astype(i64),
            jobs[:, 1].copy(),
            jobs[:, 2].copy(),
            *(passes[:, k].astype(i64) for k in range(4)),
            passes[:, 4].copy(),
            passes[:, 5].astype(i64),
            passes[:, 6].copy(),
            events[:, 0].copy(),
            events[:, 1].copy(),
            events[:, 2].astype(i64),
            rounds[:, 0].copy(),
            rounds[:, 1].astype(i64),
            rounds[:, 2].astype(i64),
            (iv[:, 0].astype(i64), iv[:, 1].copy(), iv[:, 2].copy(), iv[:, 3].astype(i64)),
            counts,
            *times,
            out,
            arrival,
            slots,
        )


def last_completion(requests: int, slots: int) -> int:
    """The completion that ends a closed-loop window: the queue runs dry when the N - slots + 1-th request
    completes, and from then on a freed slot stays idle."""
    return requests - slots + 1


def window(rep: ReplicaLog, serving) -> tuple[float, float]:
    """[start, end) of the measured time: the whole run for a static batch; open loop from the warm-up-th
    arrival to the last; else from the warm-up-th completion to the first time a slot finds the queue
    empty."""
    end_all = float(rep.job_end.max()) if rep.job_end.size else 0.0
    if serving is None:
        return 0.0, end_all
    if rep.arrival is not None:
        arr = rep.arrival
        return float(arr[min(serving.warmup, arr.size - 1)]), float(arr[-1])
    order = np.argsort(rep.event_t, kind="stable")
    times, done = rep.event_t[order], np.cumsum(rep.event_completed[order])
    if done.size == 0 or done[-1] < serving.warmup:
        raise SimError("continuous batching: the run ended before its warm-up; raise requests_per_slot")
    start = float(times[np.searchsorted(done, max(serving.warmup, 1))]) if serving.warmup else 0.0
    dry = last_completion(rep.out.size, rep.slots)
    end = float(times[min(np.searchsorted(done, dry), times.size - 1)])
    if end <= start:
        raise SimError("continuous batching: empty steady-state window; raise simulation.batching.requests_per_slot")
    return start, end


def union_length(starts, ends, lo, hi):
    """Length of the union of intervals [starts, ends) clipped to [lo, hi] (in start order, then end order,
    summed in that order)."""
    return float(union_lengths(starts, ends, np.zeros(len(starts), np.int64), 1, lo, hi)[1])


def union_lengths(starts, ends, group, groups: int, lo, hi) -> np.ndarray:
    """``union_length`` of the intervals of each group 0 .. ``groups`` - 1 (``group``: each interval's), then of
    them all, from one ordering: the intervals of a group keep among themselves the order that they take alone."""
    return _merged_lengths(starts, ends, np.lexsort((ends, starts)), group, groups, lo, hi)


@njit(cache=True, nogil=True)
def _merged_lengths(starts, ends, order, group, groups, lo, hi):
    total, cur_s, cur_e = np.zeros(groups + 1), np.zeros(groups + 1), np.zeros(groups + 1)
    have = np.zeros(groups + 1, np.bool_)
    for i in order:
        s, e = max(starts[i], lo), min(ends[i], hi)
        if e <= s:
            continue
        for g in (group[i], groups):
            if not have[g] or s > cur_e[g]:
                if have[g]:
                    total[g] += cur_e[g] - cur_s[g]
                cur_s[g], cur_e[g], have[g] = s, e, True
            else:
                cur_e[g] = max(cur_e[g], e)
    for g in range(groups + 1):
        if have[g]:
            total[g] += cur_e[g] - cur_s[g]
    return total


def pass_groups(rep: ReplicaLog, lo: float, hi: float) -> list[tuple[tuple, tuple[np.ndarray, ...]]]:
    """The passes with their job's share inside [lo, hi], grouped by (table, variant, q0) in the order each
    group first appears: ((table, variant, q0), (n, ctx, f, share)), rows in the order they were booked."""
    w, codes, bounds, order = _grouped(
        rep.job_start, rep.job_end, rep.pass_job, rep.pass_table, rep.pass_variant, rep.pass_q0, rep.pass_n, lo, hi
    )
    out = []
    for g, code in enumerate(codes.tolist()):
        rows = order[bounds[g] : bounds[g + 1]]
        table, rest = divmod(code, 1_000_000)
        variant, q0 = divmod(rest, 1000)
        n, ctx = rep.pass_n[rows], rep.pass_ctx[rows]
        out.append(((loop.TABLES[table], variant, q0), (n, ctx, rep.pass_f[rows], w[rows])))
    return out


@njit(cache=True, nogil=True)
def _grouped(start, end, job, table, variant, q0, n, lo, hi):
    """Each pass's share of its job inside [lo, hi] (a job of no time: all of it), and the passes of some share
    and some requests by (table, variant, q0) code: the codes in the order each first appears, and the passes'
    indices group by group (group g's between ``bounds[g]`` and ``bounds[g + 1]``), each group's in booking order."""
    w = np.empty(job.size)
    group = np.full(job.size, -1, np.int64)
    codes = np.empty(job.size, np.int64)
    sizes = np.zeros(job.size + 1, np.int64)
    found = 0
    for k in range(job.size):
        s, e = start[job[k]], end[job[k]]
        w[k] = 1.0 if e <= s else max(0.0, min(e, hi) - max(s, lo)) / (e - s)
        if w[k] > 0 and n[k] > 0:
            code = (table[k] * 1000 + variant[k]) * 1000 + q0[k]
            g = 0
            while g < found and codes[g] != code:  # a run has a few codes
                g += 1
            if g == found:
                codes[g] = code
                found += 1
            group[k] = g
            sizes[g + 1] += 1
    bounds = np.cumsum(sizes[: found + 1])
    order = np.empty(bounds[found], np.int64)
    at = bounds[:found].copy()
    for k in range(job.size):
        if group[k] >= 0:
            order[at[group[k]]] = k
            at[group[k]] += 1
    return w, codes[:found], bounds, order


def window_tokens(rep: ReplicaLog, serving) -> tuple[float, float, float]:
    """(start, end, tokens emitted) of a replica's measured window: all a throughput needs."""
    lo, hi = window(rep, serving)
    inside = (lo < rep.event_t) & (rep.event_t <= hi) if serving is not None else slice(None)
    return lo, hi, float(rep.event_emitted[inside].sum())


def throughput(reps: list[ReplicaLog], serving) -> np.ndarray:
    """Tokens per second of each replica's window, as ``run_result`` gives it (``RunResult.throughput_tok_s``)
    without the rest of its accounting: what the search compares candidates by."""
    tokens, time_s = np.zeros(len(reps)), np.zeros(len(reps))
    for r, rep in enumerate(reps):
        lo, hi, tokens[r] = window_tokens(rep, serving)
        time_s[r] = hi - lo
    return tokens / time_s


@dataclass(frozen=True)
class Account:
    """One replica's accounting over its measured window: its entries of ``RunResult``'s arrays and dicts
    (devices and classes in the order its passes first use them) and its placement shares."""

    time_s: float
    energy_j: float
    tokens: float
    iterations: float
    drafted: float
    request_rounds: float
    busy_s: dict[str, float]
    class_s: dict[str, float]
    stage_s: dict[str, float]
    window: dict[str, float]
    pool: dict[str, float]
    placement: dict[str, float]


def account(tables, rep: ReplicaLog, serving) -> Account:
    """A replica's accounting: energy, device and class times of its passes, each counted by its share inside
    its window, its stages' busy times and its pool's counters."""
    lo, hi, tokens = window_tokens(rep, serving)
    inside = (lo < rep.event_t) & (rep.event_t <= hi) if serving is not None else slice(None)
    win = {"start_s": lo, "end_s": hi, "completed": float(rep.event_completed[inside].sum())}
    win["total_s"] = float(rep.job_end.max())  # every replica books a job: it serves a request
    win["total_tokens"] = float(rep.event_emitted.sum())
    in_rounds = (lo < rep.round_t) & (rep.round_t <= hi) if serving is not None else slice(None)
    energy, busy, cls = 0.0, {}, {}
    lookup = {"draft": tables.draft, "prefill": tables.prefill}
    for (table, variant, q0), (n_a, c_a, f_a, w_a) in pass_groups(rep, lo, hi):
        if table == "verify":
            if not tables.verify_rows[variant].have[n_a].all():  # a row never costed holds zeros, not costs
                raise RuntimeError("adsl.sim.result: a verification's passes read rows of its tables never costed")
            parts = [(tables.verify[variant][q0 - 1], 1 - f_a)]
            if (f_a > 0).any():
                parts.append((tables.verify[variant][min(q0, len(tables.verify[variant]) - 1)], f_a))
        elif table == "decode":
            parts = [(tables.decode, np.ones_like(f_a))]
        else:
            parts = [(lookup[table][variant], np.ones_like(f_a))]
        for pt, wt in parts:
            e, by_device, by_class = pt.table.sums(n_a, c_a, wt, w_a)
            energy += e
            for k, v in by_device.items():
                busy[k] = busy.get(k, 0.0) + v
            for k, v in by_class.items():
                cls[k] = cls.get(k, 0.0) + v
    unions = union_lengths(rep.job_start, rep.job_end, STAGE_OF[rep.job_kind], len(STAGES), lo, hi)
    stage = dict(zip(STAGES, unions[:-1].tolist(), strict=True))  # the last: every job's
    stage["overlap"] = stage["draft"] + stage["verify"] + stage["prefill"] - unions[-1]
    shares = (("draft_fc_on_pim", rep.counts[0:2]), ("target_attention_on_pim", rep.counts[2:4]))
    return Account(
        time_s=hi - lo,
        energy_j=energy,
        tokens=tokens,
        iterations=float((rep.round_n[in_rounds] > 0).sum()),
        drafted=float(rep.round_drafted[in_rounds].sum()),
        request_rounds=float(rep.round_n[in_rounds].sum()),
        busy_s=busy,
        class_s=cls,
        stage_s=stage,
        window=win,
        pool={k: float(rep.counts[4 + i]) for i, k in enumerate(POOL_STATS)},
        placement={k: hits / total if total else np.nan for k, (hits, total) in shares},
    )


def run_result(setup, tables, reps: list[ReplicaLog], serving, timelines: bool) -> RunResult:
    """The run's result over each replica's measured window (each replica's ``account``: the one its log carries,
    else done here)."""
    x = len(reps)
    acc = [rep.account or account(tables, rep, serving) for rep in reps]
    arrays = {f: np.array([getattr(a, f) for a in acc], dtype=float) for f in ARRAY_FIELDS}

    def per_key(name: str, first=()) -> dict[str, np.ndarray]:  # keys in the order the replicas first use them
        out = {k: np.zeros(x) for k in first}
        for r, a in enumerate(acc):
            for k, v in getattr(a, name).items():
                out.setdefault(k, np.zeros(x))[r] = v
        return out

    placement = per_key("placement")
    if setup.static_power:
        arrays["energy_j"] = arrays["energy_j"] + setup.system.static_power_w * arrays["time_s"]
    return RunResult(
        **arrays,
        busy_s=per_key("busy_s", ("gpu", "pim", "link")),
        class_s=per_key("class_s"),
        stage_s=per_key("stage_s", STAGE_S),
        window=per_key("window", WINDOW),
        pool=per_key("pool", POOL_STATS),
        placement={k: float(np.nanmean(v)) for k, v in placement.items() if np.isfinite(v).any()},
        timelines=[_timeline(rep) for rep in reps] if timelines else None,
        requests=_requests(reps) if reps and reps[0].arrival is not None else None,
    )


def concat(results: list[RunResult]) -> RunResult:
    """Runs of one setup over different replicas as one run (replicas in order; per-run shares such as the
    placement weighted by each run's replicas)."""
    if len(results) == 1:
        return results[0]
    first = results[0]
    cat = lambda arrays: np.concatenate(list(arrays))  # noqa: E731
    per_key = lambda name: {k: cat(getattr(r, name)[k] for r in results) for k in getattr(first, name)}  # noqa: E731
    sizes = np.array([r.time_s.size for r in results], dtype=float)
    placement = {
        k: float(np.average([r.placement.get(k, np.nan) for r in results], weights=sizes)) for k in first.placement
    }
    requests = None
    if first.requests is not None:
        offsets = np.cumsum([0, *sizes[:-1]])
        requests = {
            k: cat(r.requests[k] + (o if k == "replica" else 0) for r, o in zip(results, offsets, strict=True))
            for k in first.requests
        }
    return RunResult(
        **{f: cat(getattr(r, f) for r in results) for f in ARRAY_FIELDS},
        **{f: per_key(f) for f in DICT_FIELDS},
        placement=placement,
        timelines=None if first.timelines is None else [t for r in results for t in r.timelines],
        requests=requests,
    )


ARRAY_FIELDS = ("time_s", "energy_j", "tokens", "iterations", "drafted", "request_rounds")
DICT_FIELDS = ("busy_s", "class_s", "stage_s", "window", "pool")


def _timeline(rep: ReplicaLog) -> dict:
    m, s, e, k = rep.segments
    return {
        "segments": [(int(a), float(b), float(c), loop.KINDS[d]) for a, b, c, d in zip(m, s, e, k, strict=True)],
        "jobs": [
            (loop.KINDS[k], float(a), float(b))
            for k, a, b in zip(rep.job_kind, rep.job_start, rep.job_end, strict=True)
        ],
    }


def _requests(reps: list[ReplicaLog]) -> dict[str, np.ndarray]:
    """Every request of every replica: when it arrived, took a slot, had its first token and finished."""
    return {
        "replica": np.concatenate([np.full(r.out.size, i) for i, r in enumerate(reps)]),
        "arrival": np.concatenate([r.arrival for r in reps]),
        "admitted": np.concatenate([r.t_admit for r in reps]),
        "first_token": np.concatenate([r.t_first for r in reps]),
        "finished": np.concatenate([r.t_done for r in reps]),
        "out": np.concatenate([r.out for r in reps]).astype(float),
    }
