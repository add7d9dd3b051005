"""Progress lines for long jobs: a job's log shows how far it is, not only its start and end."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def progress(items: Iterable[T], what: str, total: int | None = None, steps: int = 10) -> Iterator[T]:
    """Yield ``items``, printing ``<what> i of n, elapsed, estimated left`` after each tenth of them
    (``steps`` lines in all; every item when there are fewer), flushed so a log being followed shows it."""
    items = list(items) if total is None else items
    n = len(items) if total is None else total
    t0 = time.perf_counter()
    shown = 0
    for i, item in enumerate(items, 1):
        yield item
        if i * steps // max(n, 1) > shown or i == n:
            shown = i * steps // max(n, 1)
            elapsed = time.perf_counter() - t0
            left = elapsed / i * (n - i)
            print(f"{what} {i} of {n}: {elapsed:.1f} s elapsed, about {left:.0f} s left", flush=True)
