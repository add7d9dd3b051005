"""Elementwise functions of arrays that repeat few values, evaluated once per distinct value.

Drawn streams take their confidences from the generator's quantile tables, and the quantities the draft
policies derive from them (calibrated acceptance, a request's running acceptance estimate) repeat a few
thousand values over hundreds of thousands of positions. An elementwise function's value at an element
depends only on that element, so evaluating it on the sorted distinct values and spreading the results
back gives the same values, bit for bit, for less work.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def per_distinct(fn: Callable[[np.ndarray], np.ndarray], x, share: float = 0.25) -> np.ndarray:
    """``fn(x)`` for an ``fn`` that maps each element of its argument on its own (trailing result axes
    allowed): on the distinct values of ``x`` when they are at most ``share`` of its elements, else directly."""
    x = np.asarray(x)
    values, inverse = np.unique(x, return_inverse=True)
    if values.size > share * x.size:
        return fn(x)
    return fn(values)[inverse.reshape(x.shape)]
