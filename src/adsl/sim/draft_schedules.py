"""Stateful draft-length schedules of serving stacks, replayed on acceptance streams.

A schedule whose next draft length depends on how the last draft fared is not a function of the text
position, so it is replayed here request by request (vectorized over requests) and handed to the engine
as the draft length at each position a request visits; the engine then follows the same positions."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from adsl.fitting.generator import match_runs


@dataclass(frozen=True)
class ScheduleReplay:
    lengths: np.ndarray  # (n, t) draft length a request uses when it starts drafting at each position
    steps: np.ndarray  # (n,) verification steps per request
    emitted: np.ndarray  # (n,) tokens emitted per request
    drafted: np.ndarray  # (n,) draft tokens per request

    @property
    def tokens_per_step(self) -> float:
        """Emitted tokens per verification step over all steps of all requests (Spec-Bench's "mean
        accepted tokens": matches + 1)."""
        return float(self.emitted.sum() / self.steps.sum())


def assisted_generation(accept: np.ndarray, out_len: np.ndarray, start: float = 5.0) -> ScheduleReplay:
    """Hugging Face assisted generation's "heuristic" schedule (transformers 4.37.1,
    generation/candidate_generator.py, AssistedCandidateGenerator): a generate() call starts at
    ``num_assistant_tokens`` = 5; each step drafts int(n) tokens; n += 2 when every drafted token was
    accepted, else n = max(1, n - 1). The state restarts with every generate() call, i.e. every request.
    ``accept`` (n, t) streams, ``out_len`` (n,) tokens to generate."""
    n_req, t = accept.shape
    runs = match_runs(accept)
    rows = np.arange(n_req)
    lengths = np.ones((n_req, t), dtype=np.int64)
    budget = np.full(n_req, float(start))
    pos = np.zeros(n_req, dtype=np.int64)
    gen = np.zeros(n_req, dtype=np.int64)
    steps = np.zeros(n_req, dtype=np.int64)
    drafted = np.zeros(n_req, dtype=np.int64)
    active = gen < out_len
    while active.any():
        k = np.floor(budget).astype(np.int64)
        if (pos[active] + k[active] > t).any():
            raise ValueError(f"acceptance streams of {t} positions are too short for this schedule")
        p = np.minimum(pos, t - 1)
        lengths[rows[active], p[active]] = k[active]
        acc = np.minimum(runs[rows, p], k)
        emitted = np.where(active, np.minimum(acc + 1, out_len - gen), 0)
        budget = np.where(active, np.where(acc == k, budget + 2.0, np.maximum(1.0, budget - 1.0)), budget)
        steps += active
        drafted += np.where(active, k, 0)
        gen += emitted
        pos = np.where(active, pos + acc + 1, pos)
        active = gen < out_len
    return ScheduleReplay(lengths, steps, gen, drafted)
