"""What a run serves: per replica and request, the prompt and output lengths and the streams that decide
each draft's fate (acceptance, the adaptive rule's draft lengths, the draft's confidences), and, open
loop, when each request arrives."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from adsl.sim.setup import SimError, requests


@dataclass(frozen=True)
class Workload:
    """Arrays of one run, (replicas X, requests N) or (X, N, stream positions T). ``accept``: bool streams
    or FIRST / CONTINUED bit flags (``adsl.fitting.generator``); ``draft_lengths``: the adaptive rule's
    length of a draft starting at each position (for a pool: up to 2 d + 1); ``confidence`` /
    ``confidence_later``: a draft's first / later tokens' confidences, the pool's ranking (needed on a
    pool; later: the first's when None); ``arrivals`` (X, N), sorted: open-loop serving;
    ``light_lengths``: as ``draft_lengths``, under a tau lowered for light load. Prompt and output lengths are
    checked and stored as float and int64 arrays, confidences checked to lie in [0, 1] (the loop reads them as
    float32, the precision they are drawn in: a float64 array is rounded to it); the rest is checked
    against the setup that runs it (``adsl.sim.core.simulate_core``)."""

    prompt_len: np.ndarray
    output_len: np.ndarray
    accept: np.ndarray | None = None
    draft_lengths: np.ndarray | None = None
    confidence: np.ndarray | None = None
    confidence_later: np.ndarray | None = None
    arrivals: np.ndarray | None = None
    # the Controller's lowered tau: draft lengths under it, in force while at most ``light_at_most``
    # requests of the replica are in flight (``simulation.tau_light_load``); None: tau stays
    light_lengths: np.ndarray | None = None
    light_at_most: int = 0

    def __post_init__(self):
        prompt, out = requests(self.prompt_len, self.output_len)
        object.__setattr__(self, "prompt_len", prompt)
        object.__setattr__(self, "output_len", out)
        for name in ("confidence", "confidence_later"):  # a pool ranks drafts by their products
            a = getattr(self, name)
            if a is not None and not _probabilities(_flat(a)):
                raise SimError(f"{name} must lie in [0, 1] (a probability; NaN is not one)")


def _flat(a) -> np.ndarray:
    """``a`` as one row for ``_probabilities``: float32 and float64 as they are, any other type as float64 (the
    compiled check takes neither float16 nor longdouble)."""
    v = np.ravel(a)
    return v if v.dtype in (np.float32, np.float64) else v.astype(np.float64)


@njit(cache=True, nogil=True)
def _probabilities(a) -> bool:
    """Whether every value of ``a`` lies in [0, 1] (NaN does not): one pass that the compiler vectorises (bounds
    of ``a``'s type, a count), where numpy's min and max took two (2 M float32 values: 0.28 ms, numpy 0.56 ms)."""
    lo, hi = a.dtype.type(0), a.dtype.type(1)
    inside = 0
    for i in range(a.size):
        inside += np.int64((a[i] >= lo) & (a[i] <= hi))
    return inside == a.size
