"""The compiled loop equals the same loop run uncompiled (the scalar reference) on random small cases:
every system kind, both pool triggers, static and continuous batching (ending with its window, or drained),
open loop, timelines; and a run that ends with its window gives the drained run's results."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adsl.settings import Continuous, MicroBatching
from adsl.sim import core, loop, result, tables, timing
from adsl.sim.setup import SimError
from adsl.sim.workload import Workload
from tests.sim.builders import inputs, pim_sd, pooled, setup, uncompiled, use_loop

# the accounting's compiled helpers (each calls no other compiled function)
HELPERS = ((result, "_merged_lengths"), (result, "_grouped"), (timing, "_weighted"))


@pytest.fixture(scope="module")
def plain():
    # (with NUMBA_DISABLE_JIT=1, as under mutation testing, the helpers are the plain functions already)
    return uncompiled(loop), [getattr(getattr(m, name), "py_func", getattr(m, name)) for m, name in HELPERS]


def _run(args, kw, plain=None):
    """The run's result, or the message of the SimError it raised (a random case's window may be empty)."""
    mp = pytest.MonkeyPatch()
    try:
        if plain is not None:  # the core, the pass tables and the accounting call the uncompiled functions
            use_loop(mp, plain[0])
            for (m, name), f in zip(HELPERS, plain[1], strict=True):
                mp.setattr(m, name, f)
        return core.simulate_core(*args, **kw)
    except SimError as e:
        return str(e)
    finally:
        mp.undo()


def _equal(a, b, path=""):
    """Every field of two RunResults, to the bit (NaN equal to NaN)."""
    if dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            _equal(getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}")
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            _equal(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), path
        for i, (u, v) in enumerate(zip(a, b, strict=True)):
            _equal(u, v, f"{path}[{i}]")
    elif a is None or isinstance(a, str):
        assert a == b, path
    else:
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=path)


KINDS = ["AD", "SD", "PIM-SD", "SADDLE-p", "SADDLE-s", "SADDLE"]
# what a random run draws (``_random_run``): system kind, pool trigger, serving, micro-batches, d, seed
KIND, TRIGGER, MB, D, SEED = (
    st.sampled_from(KINDS),
    st.sampled_from(["complete", "idle"]),
    st.integers(1, 3),
    st.integers(1, 5),
    st.integers(0, 2**31),
)
SERVING = st.sampled_from(["static", "continuous", "drained", "open"])


def _case(hw, kind, trigger, mb, d):
    if kind == "AD":
        return dataclasses.replace(setup(hw, decoding="ad"), micro_batching=MicroBatching(mb, split="always"))
    if kind == "SD":
        return setup(hw, "motivation-4gpu", d=d, mb=mb)
    if kind == "PIM-SD":
        return pim_sd(hw, mb=mb, d=d)
    return dataclasses.replace(pooled(hw, kind != "SADDLE-p", trigger, mb=mb, d=d, pool=64), dynamic=kind == "SADDLE")


@settings(max_examples=30, deadline=None)
@given(KIND, TRIGGER, SERVING, MB, D, st.booleans(), SEED)
def test_compiled_equals_uncompiled(pair, hw, plain, kind, trigger, serving, mb, d, flagged, seed):
    args, kw = _random_run(pair, hw, kind, trigger, serving, mb, d, flagged, seed)
    fast, slow = _run(args, kw), _run(args, kw, plain)
    if isinstance(fast, str) or isinstance(slow, str):
        assert fast == slow
        return
    _equal(fast, slow)


def _random_run(pair, hw, kind, trigger, serving, mb, d, flagged, seed):
    """A random small run: (simulate_core's arguments, its keywords)."""
    s = _case(hw, kind, trigger, mb, d)
    x, n, slots = 2, 10, 5
    conf, later, acc, out, lengths = inputs(seed, x, n, 80, flagged and s.decoding == "sd")
    out = np.minimum(out, 20)
    prompt = np.random.default_rng(seed).integers(16, 200, (x, n)).astype(float)
    if serving == "static":
        prompt, out = prompt[:, :slots], out[:, :slots]
        conf, later, acc, lengths = (a[:, :slots] for a in (conf, later, acc, lengths))
    sd = s.decoding == "sd"
    adaptive = sd and (s.pool_tokens or seed % 2)
    arrivals = np.cumsum(np.random.default_rng(seed).exponential(0.05, (x, n)), axis=1) if serving == "open" else None
    work = Workload(prompt, out, acc if sd else None, lengths if adaptive else None, conf, later, arrivals)
    args = (s, pair, work)
    kw = {"timelines": seed % 3 == 0}
    if serving != "static":
        kw["serving"] = Continuous(slots, 2, bool(seed % 2), drain=serving != "continuous")
    return args, kw


# what a run that ends with its window reports of the run as far as it went, not of the whole
RUN_TOTALS = ("window", "pool", "placement", "timelines")


@settings(max_examples=40, deadline=None)
@given(KIND, TRIGGER, MB, D, st.booleans(), SEED)
def test_a_run_that_ends_with_its_window_gives_the_drained_runs_results(pair, hw, kind, trigger, mb, d, flag, seed):
    args, kw = _random_run(pair, hw, kind, trigger, "drained", mb, d, flag, seed)
    drained = _run(args, kw)
    ended = _run(args, kw | {"serving": dataclasses.replace(kw["serving"], drain=False)})
    if isinstance(drained, str) or isinstance(ended, str):
        assert ended == drained
        return
    for f in dataclasses.fields(ended):
        if f.name not in RUN_TOTALS:
            _equal(getattr(ended, f.name), getattr(drained, f.name), f.name)
    for k in ("start_s", "end_s", "completed"):
        _equal(ended.window[k], drained.window[k], k)
    out = args[2].output_len
    np.testing.assert_array_equal(drained.window["total_tokens"], out.sum(axis=1))
    # the run ends once its window is complete: with requests left unfinished, unless the window's last
    # completions were every request's
    left = ended.window["total_tokens"] < drained.window["total_tokens"]
    assert (left | (ended.window["total_tokens"] == out.sum(axis=1))).all()
    assert (ended.window["end_s"] <= ended.window["total_s"]).all()
    assert (ended.window["total_s"] <= drained.window["total_s"]).all()


LOGS = ("job_kind", "job_start", "job_end", "pass_job", "pass_table", "pass_variant", "pass_n", "pass_ctx", "pass_q0")
LOGS += ("pass_f", "event_t", "event_emitted", "event_completed", "round_t", "round_n", "round_drafted")


@pytest.mark.parametrize("kind,trigger", [(k, "idle") for k in KINDS] + [("SADDLE", "complete")])
def test_a_run_ends_at_its_windows_end_with_the_drained_runs_logs_up_to_there(pair, hw, kind, trigger):
    s = _case(hw, kind, trigger, 2, 3)
    x, n, slots = 2, 16, 4
    conf, later, acc, out, lengths = inputs(7, x, n)  # outputs of 8-49 tokens: requests finish one by one
    sd = s.decoding == "sd"
    work = Workload(np.full((x, n), 64.0), out, acc if sd else None, lengths if s.pool_tokens else None, conf, later)
    logs = {}
    for drain in (True, False):
        serving = Continuous(slots, 2, True, drain)
        _, logs[drain] = core.replica_logs(s, pair, work, serving)
    for r, (ended, drained) in enumerate(zip(logs[False], logs[True], strict=True)):
        lo, hi = result.window(drained, serving)
        assert result.window(ended, serving) == (lo, hi)
        for name in LOGS:  # the same passes, events and rounds in the same order, the ended run's cut short
            whole, cut = getattr(drained, name), getattr(ended, name)
            assert cut.size < whole.size, name
            np.testing.assert_array_equal(cut, whole[: cut.size], err_msg=name)
        # it stops at the window's end: the micro-batch loops log no event after it, the pool (one verifier
        # stage) at most that of the pass running at it; the last requests are left unfinished
        assert (ended.event_t > hi).sum() <= (1 if s.pool_tokens else 0)
        assert (drained.event_t[ended.event_t.size :] > hi).all()
        assert ended.event_emitted.sum() < out[r].sum() == drained.event_emitted.sum()


def _every_row(args, kw):
    """The run's pass tables with every verification row costed."""
    every = core.pass_tables(*args, kw.get("serving"))
    for n in range(every.n_max + 1):
        every.fill_verify(n)
    return every


def _forgetful(args, kw):
    """The run of a replica that forgets every row it was given once it is given the next: it stops before each
    verification of another count than the last, so every piece of the loop's state is kept across many stops."""
    fill = tables.PassTables.fill_verify
    mp = pytest.MonkeyPatch()
    mp.setattr(tables.PassTables, "verify_known", lambda self: self._have & False)
    mp.setattr(tables.PassTables, "fill_verify", lambda self, n: fill(self, n) & (np.arange(self._have.size) == n))
    try:
        return _run(args, kw | {"workers": 1})
    finally:
        mp.undo()


@pytest.mark.parametrize("kind", ["SADDLE-p", "SADDLE-s", "SADDLE"])
@pytest.mark.parametrize("stages", [1, 2])
def test_a_run_that_stops_before_every_new_verification_count_ends_where_it_would(pair, hw, kind, stages):
    """A closed loop that ends with its window counts its completions and keeps its latest event across every
    stop for a row, also on a pipeline, whose passes may end out of order: it ends where the run on tables that
    cost every row at once ends, every field to the bit (its stops come after requests have finished)."""
    args, kw = _random_run(pair, hw, kind, "idle", "continuous", 2, 3, False, 0)
    s = args[0]
    args = (dataclasses.replace(s, system=s.system.replace(pipeline_stages=stages)), *args[1:])
    _equal(_forgetful(args, kw), _run(args, kw | {"tables": _every_row(args, kw)}))


@settings(max_examples=30, deadline=None)
@given(KIND, TRIGGER, SERVING, MB, D, SEED)
def test_a_run_that_asks_for_its_verification_rows_runs_as_with_every_row(
    pair, hw, kind, trigger, serving, mb, d, seed
):
    """The pool loop stops before a verification whose row of the tables it was not given, and goes on once it
    is costed (``PassTables.fill_verify``): its result is that of a run on tables that cost every row at once,
    to the bit, also where it stops before every verification of a new count (a replica that forgets its rows);
    the rows costed are the full pass's and those its verifications read, or every row once more than
    ``ROWS_APART`` were asked for (an open loop's: every row at once)."""
    args, kw = _random_run(pair, hw, kind, trigger, serving, mb, d, False, seed)
    asked, whole, forgetful = _run(args, kw), _run(args, kw | {"tables": _every_row(args, kw)}), _forgetful(args, kw)
    if isinstance(asked, str) or isinstance(whole, str) or isinstance(forgetful, str):
        assert asked == whole == forgetful
        return
    _equal(asked, whole)
    _equal(forgetful, whole)
    if args[0].pool_tokens:
        built, reps = core.replica_logs(*args, kw.get("serving"))
        read = {int(n) for rep in reps for n in rep.pass_n[rep.pass_table == loop.TABLES.index("verify")]}
        costed = set(np.flatnonzero(built.verify_known()).tolist())
        if len(read - {built.n_max}) > tables.ROWS_APART or args[2].arrivals is not None:  # all at once
            assert costed == set(range(built.n_max + 1))
        else:
            assert costed == read | {built.n_max}
