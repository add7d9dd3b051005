"""The simulator's entry: every system, every replica, through one event loop (``adsl.sim.loop``).

The batch's slots are cut into the setup's micro-batches (a knob of ``adsl.sim.search``); each runs
its own rounds on the system's machines, so the passes of different micro-batches overlap wherever they
use different machines and serialise where they share one:

- AD: a decode pass over the micro-batch's requests, one token each, again and again;
- speculative decoding without a pool (GPU-SD, SpecPIM-style PIM-SD, SADDLE-d): the micro-batch drafts
  (d passes, or the adaptive rule's lengths), then verifies its own requests, strictly alternating;
- SADDLE-p (Shared Pool, sequential): the pool without the Eager Pool: every request drafts what fits in
  the pool (at most C tokens, the ones most likely to pass first), then one pooled pass verifies them all;
- SADDLE-s / SADDLE (Shared + Eager Pool, asynchronous): a micro-batch's finished drafts wait in the
  Shared Pool; the verifier takes everything in the pool (at most C tokens, highest running product
  first) as soon as it is idle, so drafting of some micro-batches runs while others are verified; while
  a micro-batch is verified its requests keep drafting optimistically (Eager Pool) and keep those tokens
  only if every verified token passed and the first eager token is the target's bonus token.

Time is event-driven per replica (clocks of different replicas diverge with their acceptance streams).
Requests are served through slots: a finished request's slot takes the next queued request (continuous
batching, with its prefill) and results cover the steady-state window, or the slots run one static
batch; open loop, requests enter free slots once they have arrived.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence

import numpy as np

from adsl.fitting.generator import capped_dtype, match_runs
from adsl.perf.models import Pair
from adsl.settings import Continuous
from adsl.sim import loop
from adsl.sim.result import ReplicaLog, RunResult, account, last_completion, run_result
from adsl.sim.setup import Setup, SimError, cpus, thread_pool
from adsl.sim.tables import Layout, PassTables, layout_tuple
from adsl.sim.workload import Workload

NO_RUNS = np.zeros((1, 1), np.uint8)  # a stream array a mode does not read, of the type of those it reads
NO_ROWS = np.zeros((1, 1), np.uint8)
NO_CONF = np.zeros((1, 1), np.float32)
NO_TIMES = np.zeros(1)


def log_rows(tokens: int, timelines: bool) -> tuple[int, ...]:
    """Rows the loop's logs start with for a replica emitting ``tokens``: jobs, passes, token events, rounds,
    timeline segments (none unless kept). Measured at batch 16-128 (OPT-66B): 0.008-0.17 jobs, 0.008-0.75
    passes and at most 0.09 events or rounds a token; a decode pass of one request is one job a token
    (then a log fills up, counts the rows it could not take, and the run starts again with that many)."""
    jobs = 1024 + tokens // 4
    return jobs, 4 * jobs, jobs, jobs, 16 * jobs if timelines else 0


def narrow(a: np.ndarray, cap: int) -> np.ndarray:
    """``a`` (integers >= 0) capped at ``cap``, as uint8 where ``cap`` fits (else int64): the loop reads a
    request's streams at random rows every round, and a replica's runs and draft lengths then take an eighth
    of the cache that int64 took (SADDLE's loop 18 % faster with float32 confidences, docs/simulator.md). Exact
    where the loop reads no value above ``cap`` apart: it takes ``min(run, tokens)`` of tokens <= d, and whether
    a run exceeds them, against runs capped at d + 1; draft lengths at most 2 d + 1 (a pool's full draft)."""
    return np.minimum(a, cap, out=np.empty(np.shape(a), capped_dtype(cap)), casting="unsafe")


def _as_drawn(conf: np.ndarray) -> np.ndarray:
    """Confidences as the loop reads them: float32, the precision ``adsl.fitting.generator`` draws them in (the
    loop widens each to float64 exactly, and reads half the cache float64 took). A float64 array is rounded to
    float32, so every workload runs on one compiled loop."""
    return np.asarray(conf, np.float32)


def micro_batches(setup: Setup, slots: int) -> tuple[np.ndarray, np.ndarray]:
    """The slots of each micro-batch, ``starts[i]`` .. ``stops[i]``: at most one micro-batch a slot, so the edges
    rise by a slot or more (the count is a knob of the search, ``adsl.sim.search``)."""
    mb = max(1, setup.micro_batching.micro_batches)
    edges = np.linspace(0, slots, max(1, min(mb, slots)) + 1).round().astype(np.int64)
    return edges[:-1], edges[1:]


def most_requests(setup: Setup, slots: int) -> int:
    """The most requests one pass of a run on ``slots`` slots serves: a micro-batch's slots (each pass of the
    micro-batch loop, its prefills included, serves one micro-batch), or every slot on a Shared Pool (it
    verifies, and prefills what it admits, across the micro-batches)."""
    if setup.pool_tokens:
        return slots
    starts, stops = micro_batches(setup, slots)
    return int((stops - starts).max())


def pass_tables(
    setup: Setup, pair: Pair, workload: Workload, serving: Continuous | None = None, reuse: Sequence[PassTables] = ()
) -> PassTables:
    """The pass costs a run of ``workload`` reads: from the shortest prompt up to the longest context it can reach
    and the most requests a pass serves, at its mean prompt (``reuse``: see ``PassTables``); a closed loop on a Shared
    Pool asks for its verification rows as it reads them."""
    prompt, out = workload.prompt_len, workload.output_len
    slots = out.shape[1] if serving is None else serving.slots
    ctx_max = float(prompt.max() + out.max() + 4 * setup.draft_length + 4)
    n_max, mean = most_requests(setup, slots), float(prompt.mean())
    asks = workload.arrivals is None  # an open loop verifies most request counts (``PassTables``)
    return PassTables(setup, pair, n_max, ctx_max, mean, reuse, ctx_min=float(prompt.min()), asks=asks)


def tables_digest(tables: PassTables) -> str:
    """The part of ``loop_key`` the pass tables make: their costs as the loop reads them. A pass takes the
    fastest of its draft variants, so their order counts only where two of them tie on the grid; elsewhere
    they enter in a canonical order (which placement a variant stands for counts only in the placement
    statistics, not in the key)."""
    dg, dp, _, _, decg, decp, pg, pp, *_ = tables.flat()  # the context step is one constant (CTX_STEP)
    total = (dg + dp)[:, 1:]  # row 0 (no request) is never read
    tie = any((total[i] == total[j]).any() for i in range(len(total)) for j in range(i))
    if not tie:
        order = sorted(range(len(dg)), key=lambda v: (dg[v].tobytes(), dp[v].tobytes()))
        dg, dp = dg[order], dp[order]
    digest = hashlib.sha1(tables.verify_key.encode())  # the verification's rows are costed as runs ask for them
    for a in (dg, dp, decg, decp, pg, pp):
        digest.update(np.ascontiguousarray(a).tobytes())
    return digest.hexdigest()


def loop_key(setup: Setup, tables: PassTables, serving: Continuous | None, digest: str | None = None) -> tuple:
    """What the event loop's timing reads of a run besides its workload: two runs of one workload with
    equal keys emit the same tokens at the same times, whatever their configurations are called.
    ``digest``: ``tables_digest(tables)`` where already taken."""
    return (
        setup.decoding,
        setup.draft_length,
        setup.pool_tokens,
        setup.eager,
        setup.pool_trigger,
        setup.micro_batching.micro_batches,
        layout_tuple(setup, Layout.of(setup.system)),
        len(Layout.of(setup.system).machines),
        tables_digest(tables) if digest is None else digest,
        serving,
    )


def simulate_core(
    setup: Setup, pair: Pair, workload: Workload, serving: Continuous | None = None, timelines: bool = False, **run
) -> RunResult:
    """Run every replica of ``workload`` (``adsl.sim.workload.Workload``) and account for it; ``run``:
    ``workers``, ``tables`` and ``done`` (``replica_logs``, which says what every argument means)."""
    tables, reps = replica_logs(setup, pair, workload, serving, timelines, accounted=True, **run)
    return result_of(setup, tables, reps, serving, timelines)


def result_of(
    setup: Setup, tables: PassTables, reps: list[ReplicaLog], serving: Continuous | None = None, timelines: bool = False
) -> RunResult:
    """The run of ``reps`` (every replica's log, in order) with its accounting."""
    result = run_result(setup, tables, reps, serving, timelines)
    mb = max(1, setup.micro_batching.micro_batches)
    return dataclasses.replace(result, placement={**result.placement, "micro_batches": float(mb)})


def replica_logs(
    setup: Setup,
    pair: Pair,
    workload: Workload,
    serving: Continuous | None = None,
    timelines: bool = False,
    workers: int | None = None,
    tables: PassTables | None = None,
    done: Sequence[ReplicaLog] = (),
    accounted: bool = False,
) -> tuple[PassTables, list[ReplicaLog]]:
    """The pass tables and every replica's log of a run of ``workload``: ``done``'s logs first, then the
    replicas after them, run. ``timelines``: keep every segment's (machine, start, end, kind). With
    arrivals (open loop; ``serving`` gives the slots and the prefill) requests enter free slots once they
    have arrived, and results cover the window from the ``serving.warmup``-th arrival to the last one.
    ``workers``: replicas run at once, one thread each (default: the CPUs this process may use); results
    do not depend on it. ``tables``: ``pass_tables`` of this setup's costs, built once where several runs
    share them (setups that differ in the pool trigger). ``done``: the logs of the workload's first
    replicas, already run with these ``tables``; the result is the whole run's. ``accounted``: each log carries
    its replica's accounting (``adsl.sim.result.account``), done in the replica's thread while the other threads
    run their loops (SADDLE's point at batch 128: 3 ms shorter than accounting for every replica after them)."""
    w = workload
    prompt, out, accept, draft_lengths, confidence = w.prompt_len, w.output_len, w.accept, w.draft_lengths, w.confidence
    later, arrivals, light = w.confidence_later, w.arrivals, w.light_lengths
    x, n_req = out.shape
    if len(done) > x:
        raise SimError(f"{len(done)} replicas already run of a workload of {x}")
    slots = n_req if serving is None else serving.slots
    if slots < 1:
        raise SimError(f"serving needs at least one slot, got {slots}")
    if slots > n_req and arrivals is None:  # open loop: slots wait empty for requests to arrive
        raise SimError(f"{slots} slots but only {n_req} requests")
    sd = setup.decoding == "sd"
    d = setup.draft_length
    if sd and (accept is None or accept.shape[:2] != (x, n_req)):
        raise SimError(f"SD needs acceptance streams of shape ({x}, {n_req}, T)")
    # a request drafts from positions below its output length and reads at most d positions on
    if sd and accept.shape[2] < out.max() + d + 1:
        raise SimError(f"acceptance streams of {accept.shape[2]} positions; need >= {out.max() + d + 1}")
    for name, a in (
        ("draft_lengths", draft_lengths),
        ("confidence", confidence),
        ("confidence_later", later),
        ("light_lengths", light),
    ):
        if a is not None and (np.ndim(a) != 3 or np.shape(a)[:2] != (x, n_req) or np.shape(a)[2] < out.max() + d + 1):
            raise SimError(f"{name} must be (replicas, requests, >= {out.max() + d + 1}), got {np.shape(a)}")
    if light is not None and draft_lengths is None:
        raise SimError("light_lengths lower an adaptive rule's tau: they need draft_lengths")
    if setup.pool_tokens and setup.pool_tokens < slots + 1:
        raise SimError(f"{setup.name}: pool of {setup.pool_tokens} tokens cannot hold one query token per request")
    if setup.pool_tokens and setup.eager and draft_lengths is None:
        raise SimError(f"{setup.name}: the asynchronous pool needs each request's draft lengths (draft_lengths)")
    if setup.pool_tokens and confidence is None:  # a full pool's cut ranks them; the loop has no other order
        raise SimError(f"{setup.name}: the Shared Pool admits drafts by their running product: it needs confidence")
    if arrivals is not None:
        arrivals = np.asarray(arrivals, dtype=float)
        if serving is None or arrivals.shape != out.shape or (np.diff(arrivals) < 0).any():
            raise SimError("open loop needs serving slots and sorted arrival times of shape (replicas, requests)")
    if tables is None:
        tables = pass_tables(setup, pair, w, serving)
    elif tables.n_max < (need := most_requests(setup, slots)):  # the compiled loop reads its tables unchecked
        raise SimError(f"pass tables for {tables.n_max} requests; a pass of this run serves up to {need}")
    layout = Layout.of(setup.system)
    starts, stops = micro_batches(setup, slots)
    mode = loop.POOL if setup.pool_tokens else loop.SD if sd else loop.AD
    later = confidence if later is None else later
    if not setup.pool_tokens:  # only a pool's cut reads the confidences
        confidence = later = None
    tab, lay = tables.flat(), layout_tuple(setup, layout)
    prefill = serving is not None and serving.prefill
    # closed loop without the drain: nothing after the window's end enters a result, so the run ends there
    closed = serving is not None and arrivals is None
    stop = last_completion(n_req, slots) if closed and not serving.drain else loop.NEVER
    args = (mode, d, setup.pool_tokens, setup.pool_trigger == "complete", setup.eager, prefill, stop)

    flagged = sd and accept.dtype != bool  # a draft that continues a kept one reads other runs

    def replica(r: int) -> ReplicaLog:
        # each replica's streams prepared in its own thread (match_runs releases the GIL; so do numpy's passes)
        if draft_lengths is not None and draft_lengths[r].size and draft_lengths[r].min() < 0:  # one pass, no mask
            raise SimError("draft_lengths must be >= 0 (0: no draft)")
        rq = (
            prompt[r],
            out[r],
            NO_TIMES if arrivals is None else arrivals[r],
            arrivals is not None,
            match_runs(accept[r], cap=d + 1) if sd else NO_RUNS,
            flagged,
            match_runs(accept[r], True, d + 1) if flagged else NO_RUNS,
            NO_ROWS if draft_lengths is None else narrow(draft_lengths[r], 2 * d + 1),
            draft_lengths is not None,
            NO_CONF if confidence is None else _as_drawn(confidence[r]),
            NO_CONF if later is None else _as_drawn(later[r]),
            NO_ROWS if light is None else narrow(light[r], 2 * d + 1),
            np.int64(w.light_at_most if light is not None else 0),
        )
        rows = log_rows(int(out[r].sum()), timelines)
        while True:  # a log that filled up counted its rows: again with that many (runs are deterministic)
            logs = loop.new_logs(rows)
            costed = (tables.verify_known(), tables.fill_verify) if sd else (None, None)
            counts, times = loop.run_replica(
                *args, logs, tab, lay, len(layout.machines), rq, slots, starts, stops, costed
            )
            if all(int(logs[5][k]) <= len(logs[k]) for k in range(5)):
                break
            rows = tuple(max(n, int(c)) for n, c in zip(rows, logs[5], strict=True))
        log = ReplicaLog.of(logs, counts, times, out[r], slots, None if arrivals is None else arrivals[r])
        return dataclasses.replace(log, account=account(tables, log, serving)) if accounted else log

    # replicas are independent and the loop releases the GIL: one thread each, up to ``workers``
    todo = range(len(done), x)
    workers = min(len(todo), workers or cpus())
    if workers > 1:
        reps = list(thread_pool(workers).map(replica, todo))
    else:
        reps = [replica(r) for r in todo]
    return tables, [*done, *reps]
