"""How many threads a process's replicas use (``adsl.sim.core.cpus``): the CPUs it may run on, capped by
``OMP_NUM_THREADS``, which Snakemake sets to each job's ``threads``."""

import os

import pytest

from adsl.sim.core import cpus
from adsl.sim.setup import thread_pool

AVAILABLE = len(os.sched_getaffinity(0))


@pytest.mark.parametrize(
    ("omp", "expected"),
    [(None, AVAILABLE), ("1", 1), (str(AVAILABLE + 7), AVAILABLE), ("0", 1), ("two", AVAILABLE), ("", AVAILABLE)],
)
def test_replica_threads_follow_the_jobs_allotment(monkeypatch, omp, expected):
    if omp is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", omp)
    assert cpus() == expected


def test_the_process_keeps_one_pool_of_threads_for_each_count():
    """Runs share the process's threads (``thread_pool``): the same pool for the same count, of that many threads."""
    assert thread_pool(2) is thread_pool(2) and thread_pool(2) is not thread_pool(3)
    assert thread_pool(3)._max_workers == 3
