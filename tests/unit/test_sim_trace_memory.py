"""A long trace loads without its rows: `labq simulate` of 200,000 jobs peaked at 537-538 MB (issue
41, target 500 MB), and reading the file first as rows (a dict of ten strings each) held several
times the jobs' own size at once. The jobs are made as the rows are read, and the few users,
accounts and outcomes of a trace are one string each, not one per job."""
import csv
import tracemalloc

from labq.scheduler.sim.trace import load

ROWS = 5000


def _write(path) -> str:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["job_id", "submit_s", "duration_s", "gpus", "cpus", "mem_gib", "user", "group", "status",
                    "time_limit_s"])
        for i in range(ROWS):
            w.writerow([i + 1, i, 600 + i % 7, 1 + i % 2, 4, 32, f"u{i % 5}", f"vc-{i % 3}", "completed", 3600])
    return str(path)


def test_loading_a_trace_holds_little_more_than_its_jobs(tmp_path):
    path = _write(tmp_path / "t.csv")
    tracemalloc.start()
    try:
        jobs = load(path)
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(jobs) == ROWS
    assert peak < 1.5 * kept, (peak, kept)     # (before: 2.2×; now 1.4×)


def test_a_traces_users_accounts_and_outcomes_are_one_string_each(tmp_path):
    jobs = load(_write(tmp_path / "t.csv"))
    a, b = jobs[0], jobs[15]               # the same user, group and status, rows apart
    assert (a.user, a.account, a.status) == (b.user, b.account, b.status)
    assert a.user is b.user and a.account is b.account and a.status is b.status


def test_a_replay_keeps_no_run_times_of_the_attempts_that_ended(tmp_path):
    """Each running attempt's natural end is read only while it runs (a preemption's grace is cut
    to it): a 200,000-job replay kept one per job to the end."""
    from labq.cli.whatif import parse_nodes
    from labq.scheduler.settings import config as config_mod
    from labq.scheduler.sim.engine import Simulator
    from labq.scheduler.sim.policies import policy_config
    jobs = load(_write(tmp_path / "t.csv"))[:200]
    sim = Simulator(jobs, parse_nodes("1x8:64:512G"), policy_config(config_mod.Config(), "fifo"))
    res = sim.run()
    assert len(res.jobs) == 200 and not sim.running
    assert sim.natural_end == {}
