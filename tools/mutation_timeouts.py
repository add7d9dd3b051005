"""pytest plugin for mutation runs (``tools/mutation.py --test-timeouts``): each test gets a pytest-timeout
of max(10 s, 4 x its clean duration in mutmut's stats), so a mutant that loops forever fails the first test
it hangs in within seconds instead of running to mutmut's per-mutant CPU limit (2 x --timeout-multiplier x
the clean time of every test that reaches it). A test without a recorded duration gets none: mutmut's own
stats and clean runs, the first of which may include numba's cold compile of the loop (over a minute),
must not be cut short."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

STATS = Path("mutants/mutmut-stats.json")  # mutmut runs the tests from its work folder


def pytest_collection_modifyitems(items):
    durations = json.loads(STATS.read_text())["duration_by_test"] if STATS.exists() else {}
    for item in items:
        d = durations.get(item.nodeid)
        if d is not None:
            item.add_marker(pytest.mark.timeout(max(10.0, 4.0 * d)))
