"""A real single-node SLURM cluster on localhost runs the workflow (tests/cluster/slurm_check.sh).
Needs root and Debian's package index (the script installs slurm-wlm and munge when missing)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("slurm_check.sh")


@pytest.mark.slurm
def test_workflow_on_a_local_slurm_cluster():
    if os.geteuid() != 0:
        pytest.skip("starting munged, slurmctld and slurmd needs root")
    env = {**os.environ, "PYTHON": sys.executable}
    res = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env, timeout=1800)
    print(res.stdout[-4000:])
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-3000:]
    assert "PASS" in res.stdout
