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


def test_a_replay_through_plan_keeps_no_orders_of_its_own(tmp_path):
    """Through plan() (through.py) the replay's queue draws no order (easy.py's head, order.py), so it
    keeps none of their indexes (~20 MB each at 200,000 pending): learned's short-jobs-first ones too.
    The shortcut path, the same replay, keeps them while jobs wait."""
    from labq.cli.whatif import parse_nodes
    from labq.scheduler.settings import config as config_mod
    from labq.scheduler.sim.engine import Simulator
    from labq.scheduler.sim.policies import resolve
    jobs = load(_write(tmp_path / "t.csv"))[:400]
    for through in (True, False):
        cfg, hooks = resolve(config_mod.Config(), "learned")
        seen: list[tuple[int, int]] = []
        sim = Simulator(jobs, parse_nodes("1x8:64:512G"), cfg, hooks=hooks, through=through,
                        progress=lambda done, total: seen.append(
                            (len(sim.queue), len(sim.queue.fifo) + len(sim.queue.by_shape) + len(sim.queue.keys)
                             + (sim.queue.runtimes is not None))))
        sim.run()
        assert max(n for n, _ in seen) > 100        # a deep queue while the jobs came
        kept = max(k for _, k in seen)
        assert (kept == 0) if through else (kept > 100), (through, kept)


def test_the_clock_holds_the_arrivals_as_bare_times():
    """The replay's clock keeps each submit time as 8 bytes: a (time, place) pair a job was ~110 bytes,
    22 MB of a 200,000-job replay."""
    from labq.scheduler.sim.clock import Clock
    times = [float(i // 3) for i in range(ROWS)]
    tracemalloc.start()
    try:
        clock = Clock(t + 1e9 for t in times)
        kept, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert kept < 16 * ROWS, kept
    got = [(t, arrivals) for t, _, arrivals in clock.batches()]
    assert got[:2] == [(1e9, [0, 1, 2]), (1e9 + 1, [3, 4, 5])] and sum(len(a) for _, a in got) == ROWS


def test_the_report_reads_the_records_without_lists_beside_them(tmp_path):
    """At a replay's end every job's record is alive; the report sums over them in passes rather than
    copying each figure into a list per job (~150 bytes a job, ~30 MB at 200,000)."""
    from labq.cli.whatif import parse_nodes
    from labq.scheduler.settings import config as config_mod
    from labq.scheduler.sim import metrics
    from labq.scheduler.sim.engine import simulate
    from labq.scheduler.sim.policies import policy_config
    jobs = load(_write(tmp_path / "t.csv"))[:1500]
    res = simulate(jobs, parse_nodes("64x8:64:512G"), policy_config(config_mod.Config(), "fifo"))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        rep = metrics.report(res)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert rep["jobs"]["completed"] == len(jobs)
    assert peak < 120 * len(jobs), peak / len(jobs)       # (the lists: ~155 a job; now ~85)
