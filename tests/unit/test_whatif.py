import json
import os
import subprocess
import sys

import pytest

from labq.scheduler.errors import UsageError
from labq.scheduler.jobs.model import Job
from labq.scheduler.whatif import PLAN_BUDGET, load_jobs, plan_file, what_if
from tests.harness import ROOT, SWEEP_TOML, ClusterBuilder, G, cfg


def test_the_worked_example():
    """4 GPUs, 16 CPUs, 64 GiB; 12 jobs × (1 GPU, 4 CPUs, 12 GiB, 2 h) at $2/GPU-h against $120."""
    nodes = ClusterBuilder().node("n", gpus=4, cpus=16, mem=64 * G, slots=16).build().nodes
    job = Job(id=0, user="a", account="eta", gpus=1, cpus=4, mem=12 * G, time_limit=7200)
    w = what_if(nodes, job, 12, cfg("[rates]\ngpu_hour = 2.0\n"), budget_limit=120_000_000)
    assert w.concurrency == {"gpus": 4, "cpus": 4, "mem": 5, "slots": 16, "overall": 4}
    assert (w.waves, w.makespan_s, w.cost, w.budget_remaining) == (3, 6 * 3600, 48_000_000, 72_000_000)
    assert w.warn_levels == ((0.7, 84_000_000), (0.9, 108_000_000))
    assert w.binding in ("gpus", "cpus")


def test_a_cpu_job_is_not_limited_by_gpus():
    nodes = ClusterBuilder().node("a", gpus=0, cpus=8).node("b", gpus=2, cpus=8).build().nodes
    w = what_if(nodes, Job(id=0, user="a", account="x", cpus=3, time_limit=60), 10, cfg())
    assert w.concurrency["gpus"] is None and w.concurrency["overall"] == 4 and w.waves == 3


# -- labq plan --file: a list of different jobs, replayed by the simulator -------------------------
JOBS = os.path.join(ROOT, "tests", "data", "plan_jobs.csv")


def one_node(gpus=4):
    return ClusterBuilder().node("n", gpus=gpus, cpus=16, mem=64 * G, slots=16).build().nodes


def test_the_job_list_expands_counts_and_reads_each_column():
    jobs = load_jobs(JOBS, cfg())
    assert len(jobs) == 20
    sweep, pretrain, ev = jobs[0], jobs[12], jobs[14]
    assert (sweep.name, sweep.gpus, sweep.cpus, sweep.mem, sweep.time_limit, sweep.duration) == (
        "sweep[1]", 1, 4, 12 * G, 7200, 7200)
    assert (pretrain.gpus, pretrain.time_limit, pretrain.duration) == (4, 6 * 3600, 5 * 3600)
    assert (ev.gpus, ev.cpus, ev.time_limit, ev.duration) == (0, 2, 1800, 600)
    assert all(j.submit == 0 for j in jobs)


def test_the_worked_example_as_a_file_agrees_with_the_arithmetic(tmp_path):
    """The 12-job sweep of test_the_worked_example: 3 waves of 2 h, $48, $72 left of $120."""
    p = tmp_path / "sweep.csv"
    p.write_text("count,gpus,cpus,mem,time\n12,1,4,12G,2h\n")
    res, rep = plan_file(str(p), one_node(), cfg("[rates]\ngpu_hour = 2.0\n"), amount=120_000_000)
    assert rep["makespan_s"] == 6 * 3600 and rep["cost"] == 48.0
    assert rep["budgets"][PLAN_BUDGET]["left"] == 72.0 and rep["utilisation"] == 1.0


def test_a_small_budget_holds_what_it_cannot_pay_for(tmp_path):
    res, rep = plan_file(JOBS, one_node(), cfg(), amount=20_000_000)
    # each 4-GPU pretraining run could never fit $20 (4 × 6 h × $2): refused like labq sub
    assert rep["refused"]["count"] == 2 and rep["refused"]["by_kind"] == {"budget": 2}
    assert rep["budgets"][PLAN_BUDGET]["spent"] <= 20.0 and rep["held_by_budget"]["jobs"] > 0


def test_a_configured_budget_is_charged_by_its_scope():
    res, rep = plan_file(JOBS, one_node(), cfg(SWEEP_TOML), budget="eta-sweep")
    assert all(j.account == "eta" for j in res.jobs.values())
    assert rep["budgets"]["eta-sweep"]["spent"] > 0


@pytest.mark.parametrize("text,needle", [
    ("count,gpus\n1,1\n", "missing column 'time'"),
    ("time,colour\n1h,red\n", "unknown column 'colour'"),
    ("count,time\nmany,1h\n", ":2: expected whole numbers"),
    ("time,mem\n1h,lots\n", ":2: mem"),
    ("time,gpus\n1h,x\n", ":2: gpus"),
    ("time,qos\n1h,gold\n", "unknown QoS"),
    ("count,time\n0,1h\n", "at least 1"),
    ("time\n", "no jobs"),
])
def test_a_bad_job_list_names_the_problem(tmp_path, text, needle):
    p = tmp_path / "jobs.csv"
    p.write_text(text)
    with pytest.raises(UsageError) as e:
        load_jobs(str(p), cfg())
    assert needle in str(e.value) and "\n" not in str(e.value)


def _labq(*args):
    env = dict(os.environ, LABQ_REDIS_URL="unix:///nonexistent/labq.sock", PYTHONPATH=ROOT)
    env.pop("LABQ_CONFIG", None)
    return subprocess.run([sys.executable, "-m", "labq.cli.main", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=120)


def test_labq_plan_file_prints_the_report_and_the_budget_left():
    p = _labq("plan", "--file", JOBS, "--nodes", "1x4:16:64G", "--budget", "200")
    assert p.returncode == 0, p.stderr
    assert "makespan       16:10:00" in p.stdout and "budget left    $72.00 of $200.00" in p.stdout
    d = json.loads(_labq("plan", "--file", JOBS, "--nodes", "1x4:16:64G", "--budget", "200", "--json").stdout)
    assert d["budget"]["left"] == 72.0 and d["cost"] == 128.0 and d["jobs"]["completed"] == 20


@pytest.mark.parametrize("args,needle", [
    (["plan", "--file", JOBS, "--jobs", "3", "--nodes", "1x4"], "drop --jobs"),
    (["plan", "--file", "/nonexistent.csv", "--nodes", "1x4"], "no such file"),
    (["plan", "--nodes", "1x4", "-t", "1h"], "--jobs N"),
])
def test_labq_plan_file_bad_input_exits_2(args, needle):
    p = _labq(*args)
    assert p.returncode == 2 and needle in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
