"""Setups and streams the simulator's tests share."""

import dataclasses
import importlib.util

import numba
import numpy as np

from adsl.fitting.generator import CONTINUED, FIRST, running_product_lengths
from adsl.settings import MicroBatching
from adsl.sim import core, result, tables
from adsl.sim.setup import Setup

PIM = {"fc": "gpu", "attention": "pim"}
PIM_DRAFT = {"fc": "pim", "attention": "pim"}
GPU = {"fc": "gpu", "attention": "gpu"}


def overlapping(system):
    """``system`` with NeuPIMs-style dual row buffers: GPU accesses and PIM compute on the same stacks
    overlap (the hand-timed tests count on it; ``test_stacks.py`` checks the exclusive default)."""
    if system.pim is None:
        return system
    return dataclasses.replace(system, pim=dataclasses.replace(system.pim, access="dual_row_buffer"))


def setup(hw, system="saddle-tp", decoding="sd", d=4, mb=1, **kw):
    """A Setup on ``system`` (with dual row buffers, ``overlapping``): target attention in PIM where it
    has PIM, the draft placed like the target unless ``draft_mapping`` says otherwise."""
    s = overlapping(hw.system(system))
    m = kw.pop("target_mapping", PIM if s.pim else GPU)
    return Setup("t", s, decoding, d if decoding == "sd" else 0, m, kw.pop("draft_mapping", m), MicroBatching(mb), **kw)


def pooled(hw, eager, trigger="complete", mb=2, d=4, pool=64, system="saddle-tp"):
    """SADDLE-s (``eager``) or SADDLE-p on ``system``: a Shared Pool of ``pool`` tokens, the draft on PIM
    where the system has PIM."""
    return setup(
        hw,
        system,
        "sd",
        d,
        mb,
        policy="running_product",
        pool_tokens=pool,
        eager=eager,
        pool_trigger=trigger,
        draft_mapping=PIM_DRAFT if hw.system(system).pim is not None else GPU,
    )


def pim_sd(hw, mb=2, d=4):
    """SpecPIM-style PIM-SD: ``mb`` micro-batches, each verified on its own."""
    return dataclasses.replace(setup(hw, mb=mb, d=d), micro_batching=MicroBatching(mb, split="always"))


def streams(seed, x, n, t, p=None):
    """Confidences (float32) and bool acceptance streams drawn from them (or with probability ``p``)."""
    rng = np.random.default_rng(seed)
    conf = rng.beta(5, 1, (x, n, t)).astype(np.float32)
    acc = rng.random((x, n, t)) < (conf if p is None else p)
    return conf, acc


def inputs(seed, x, n, t=140, flagged=False):
    """Confidences, a later-token calibration of them, acceptance streams (bool, or FIRST / CONTINUED
    flags that differ), outputs and running-product lengths up to 12 (the core caps them at 2 d + 1)."""
    rng = np.random.default_rng(seed)
    conf = rng.beta(5, 1, (x, n, t)).astype(np.float32)
    later = (conf * rng.uniform(0.6, 1.0, conf.shape)).astype(np.float32)
    acc = rng.random((x, n, t)) < conf
    if flagged:
        cont = rng.random((x, n, t)) < np.sqrt(conf)
        acc = acc.astype(np.uint8) * FIRST | cont.astype(np.uint8) * CONTINUED
    out = rng.integers(8, 50, (x, n))
    lengths = np.stack([running_product_lengths(c, 0.5, 12) for c in conf])
    return conf, later, acc, out, lengths


def logged(monkeypatch, *args, **kw):
    """``core.simulate_core(*args, **kw)``, its pass tables and the replicas' logs it turned into its result."""
    seen = {}
    inner = core.run_result

    def spy(setup_, tables, reps, serving, timelines):
        seen.update(tables=tables, reps=reps)
        return inner(setup_, tables, reps, serving, timelines)

    with monkeypatch.context() as m:
        m.setattr(core, "run_result", spy)
        res = core.simulate_core(*args, **kw)
    return res, seen["tables"], seen["reps"]


def uncompiled(module):
    """A fresh copy of ``module`` whose ``njit`` functions stay plain Python (numba reads DISABLE_JIT when
    it decorates): the loop's functions that only compiled code may call (``loop.INNER``) called from a test."""
    numba.config.DISABLE_JIT = True
    try:
        spec = importlib.util.spec_from_file_location(f"{module.__name__}_uncompiled", module.__file__)
        copy = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(copy)
    finally:
        numba.config.DISABLE_JIT = False
    return copy


def use_loop(monkeypatch, plain):
    """The core and the pass tables call ``plain`` (an ``uncompiled`` copy of the loop) for the loop."""
    monkeypatch.setattr(core, "loop", plain)
    monkeypatch.setattr(tables, "loop", plain)


def flat_costs(monkeypatch, draft_gpu_s=None, draft_pim_s=None, verify_gpu_s=None, verify_pim_s=None):
    """``PassTables.flat`` (all the loop reads) with its draft and verification tables (GPU, PIM) at the seconds
    given, whatever the requests and context (None: as costed)."""
    flat = tables.PassTables.flat

    def unit(self):
        tab = list(flat(self))
        for i, s in enumerate((draft_gpu_s, draft_pim_s, verify_gpu_s, verify_pim_s)):
            tab[i] = tab[i] if s is None else np.full_like(tab[i], s)
        return tuple(tab)

    monkeypatch.setattr(tables.PassTables, "flat", unit)


def union(intervals, lo, hi):
    """``union_length`` over a list of (start, end) pairs."""
    iv = np.array(intervals, dtype=float).reshape(-1, 2)
    return result.union_length(iv[:, 0].copy(), iv[:, 1].copy(), float(lo), float(hi))
