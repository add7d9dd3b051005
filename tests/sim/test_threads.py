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


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_runs_on_threads_of_its_own():
    """A child forked after the parent used its kept pool (multiprocessing's fork, mutmut's runner) does not inherit
    it: the parent's threads do not exist there, and a copy of the pool would wait forever. The child's work runs,
    on a new pool; the parent keeps its own."""
    parent = thread_pool(2)
    assert list(parent.map(abs, [-1, -2, -3])) == [1, 2, 3]
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        try:
            os.close(read)
            done = thread_pool(2).map(abs, [-4, -5, -6], timeout=20)
            os.write(write, f"{list(done)} {thread_pool(2) is not parent}".encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as answer:
        got = answer.read()
    os.waitpid(pid, 0)
    assert got == "[4, 5, 6] True"
    assert thread_pool(2) is parent
