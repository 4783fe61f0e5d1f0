"""`labq plan` reads -G as `labq sub` and SLURM do: with -N the job's total (split evenly over its
nodes), --gpus-per-node per node; a gang's parts go on different nodes; a plan no node (or set of
nodes) could ever run is refused with the numbers, exit 3, never "0 at once, waves 0"."""
import json
import os
import subprocess
import sys

import pytest

from labq.scheduler.errors import RefusedError
from labq.scheduler.jobs.model import Job
from labq.scheduler.settings import config
from labq.scheduler.whatif import gangs_at_once, what_if
from tests.harness import ROOT, ClusterBuilder


def labq(*args):
    env = dict(os.environ, LABQ_REDIS_URL="unix:///nonexistent/labq.sock", PYTHONPATH=ROOT)
    env.pop("LABQ_CONFIG", None)
    return subprocess.run([sys.executable, "-m", "labq.cli.main", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=60)


def plan(*args) -> dict:
    p = labq("plan", "--nodes", "4x8:64:512G", "--jobs", "4", "-t", "1h", "--json", *args)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_g_with_n_is_the_jobs_total_as_sub_reads_it():
    total = plan("-N", "2", "-G", "16")            # 8 per node: one gang per two nodes
    assert total["concurrency"]["overall"] == 2 and total["waves"] == 2
    assert plan("-N", "2", "--gpus-per-node", "8") == total
    assert plan("-N", "2", "-G", "8")["concurrency"]["overall"] == 4      # 4 per node: two gangs' parts a node
    p = labq("plan", "--nodes", "4x8", "--jobs", "1", "-t", "1h", "-N", "2", "-G", "7")
    assert p.returncode == 2 and "do not split evenly" in p.stderr


def test_an_impossible_plan_is_refused_with_the_numbers():
    p = labq("plan", "--nodes", "1x8:64:512G", "--jobs", "3", "-t", "1h", "-N", "2", "-G", "16")
    assert p.returncode == 3 and "no set of 2 nodes" in p.stderr and "8 GPUs" in p.stderr, p.stderr
    assert p.stderr.count("\n") == 1 and "waves" not in p.stdout
    p = labq("plan", "--nodes", "2x4", "--jobs", "1", "-t", "1h", "-G", "8", "--json")
    assert p.returncode == 3 and "no node of the cluster (2 nodes) could ever hold one job (8 GPUs" in p.stderr, p.stderr


def test_gang_parts_go_on_different_nodes():
    assert gangs_at_once([2, 2, 2, 2, 2], 2) == 5
    assert gangs_at_once([4], 2) == 0                   # one node holding both parts is not a gang
    assert gangs_at_once([4, 1], 2) == 1 and gangs_at_once([3, 3, 0], 3) == 0
    nodes = ClusterBuilder().node("a", gpus=8).build().nodes
    job = Job(id=0, user="plan", account="", gpus=4, cpus=1, nodes=2, time_limit=60)
    with pytest.raises(RefusedError, match="no set of 2 nodes"):
        what_if(nodes, job, 1, config.loads(""))
