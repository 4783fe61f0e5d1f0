"""The trace simulator (scheduler/sim/): loader, policy variants, the replay against the daemon's
transitions, the report, and the skip — a replay that skips plan() passes (and gives plan() only
the part of the queue that decides a strict-order pass) must equal one that calls it on the whole
queue at every instant."""
import os
from dataclasses import replace

import pytest

from labq.scheduler.errors import UsageError
from labq.scheduler.jobs import states
from labq.scheduler.jobs.model import Gpu, Node
from labq.scheduler.settings import config as config_mod
from labq.scheduler.sim.clock import Clock
from labq.scheduler.sim.engine import simulate
from labq.scheduler.sim.metrics import percentile, report
from labq.scheduler.sim.policies import policy_config
from labq.scheduler.sim.result import EPOCH
from labq.scheduler.sim.trace import TraceJob, load
from tests.harness import DATA

SMALL = os.path.join(DATA, "sim_small.csv")
KTH = os.path.join(DATA, "kth_sp2_excerpt.csv")
KTH_EXTRA = os.path.join(DATA, "kth_sp2_excerpt_extra.csv")
POLICIES = ("fifo", "priority", "backfill", "fairshare", "config")
G = 1 << 30


def nodes(count=2, gpus=4, cpus=16, mem=64 * G):
    return tuple(Node(f"n{i}", cpus, mem, cpus, tuple(Gpu(f"GPU-{i}-{g}", g, "fake") for g in range(gpus)))
                 for i in range(count))


def cpu_machine(cpus=100):
    return (Node("n0", cpus, 64 * G, cpus),)


def cfg(text=""):
    return config_mod.loads(text)


def tj(name, submit, duration, limit=None, **kw):
    return TraceJob(name=name, submit=float(submit), duration=float(duration),
                    time_limit=limit or max(1, int(duration)), **kw)


def write(tmp_path, text, name="t.csv"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def schedule(res):
    """Every job's outcome and attempts: what must not depend on skipping."""
    return {i: (j.state, tuple((a.node, a.gpus, a.dispatch_time, a.end_time, a.outcome, a.lost_work_s, a.cost)
                               for a in j.attempts)) for i, j in res.jobs.items()}


def without_plan_counts(rep):
    return {k: v for k, v in rep.items() if k != "plan"}


# -- the trace loader ------------------------------------------------------------------------------

def test_loads_the_shared_format_with_an_extra_file_and_a_time_column():
    jobs = load(KTH, extra=KTH_EXTRA, time_column="req_time_s")
    assert len(jobs) == 300
    first = jobs[0]
    assert (first.name, first.submit, first.duration, first.cpus, first.gpus, first.mem) == ("kth-15", 0.0, 3477.0, 4, 0, 0)
    assert first.time_limit == 53940 and first.user == "12" and first.account == "12"
    assert [j.submit for j in jobs] == sorted(j.submit for j in jobs)


def test_time_limits_from_the_factor_and_column_fallback(tmp_path):
    path = write(tmp_path, "job_id,submit_s,duration_s,time_limit_s\na,0,100,\nb,5,100,300\nc,9,0,-1\n")
    jobs = {j.name: j for j in load(path, time_factor=1.5)}
    assert (jobs["a"].time_limit, jobs["b"].time_limit, jobs["c"].time_limit) == (150, 300, 1)
    only = {j.name: j for j in load(write(tmp_path, "job_id,submit_s,duration_s\na,0,10\n", "u.csv"))}
    assert only["a"].time_limit == 10 and only["a"].cpus == 1 and only["a"].user == "user"


def test_a_cpu_trace_maps_onto_gpus(tmp_path):
    path = write(tmp_path, "job_id,submit_s,duration_s,gpus,cpus\na,0,10,0,4\n")
    (job,) = load(path, cpus_as_gpus=True)
    assert (job.gpus, job.cpus) == (4, 1)


@pytest.mark.parametrize("text,kwargs,needle", [
    ("job_id,submit_s\na,0\n", {}, "missing column 'duration_s'"),
    ("job_id,submit_s,duration_s\na,x,10\n", {}, ":2: submit_s: expected a number"),
    ("job_id,submit_s,duration_s\na,0,-1\n", {}, "duration_s: expected a number ≥ 0"),
    ("job_id,submit_s,duration_s,cpus\na,0,10,-2.5\n", {}, "cpus: expected a number ≥ 0"),
    ("job_id,submit_s,duration_s\na,0,10\na,1,10\n", {}, "appears twice"),
    ("job_id,submit_s,duration_s\na,0,10\n", {"time_column": "req"}, "--time-column: no column 'req'"),
    ("job_id,submit_s,duration_s\na,0,10\n", {"time_factor": 0}, "--time-factor"),
])
def test_bad_traces_name_the_problem(tmp_path, text, kwargs, needle):
    with pytest.raises(UsageError) as e:
        load(write(tmp_path, text), **kwargs)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_a_missing_trace_is_a_usage_error():
    with pytest.raises(UsageError, match="no such file"):
        load("/nonexistent/trace.csv")


# -- policy variants are configs -------------------------------------------------------------------

def test_policy_variants_are_configs():
    base = cfg()
    fifo, prio = policy_config(base, "fifo"), policy_config(base, "priority")
    bf, fs = policy_config(base, "backfill"), policy_config(base, "fairshare")
    assert (fifo.priority["qos_weight"], fifo.priority["fairshare_weight"], fifo.priority["burst_penalty"]) == (0, 0, 0)
    assert (fifo.backfill_depth, fifo.preemption) == (0, False)
    assert prio.backfill_depth == 0 and prio.priority["qos_weight"] == 1.0 and prio.priority["fairshare_weight"] == 0
    assert bf.backfill_depth == 1 and bf.priority == fifo.priority and not bf.preemption
    assert fs.priority["fairshare_weight"] > 0 and fs.backfill_depth == 0
    assert policy_config(base, "backfill", 3).backfill_depth == 3
    assert policy_config(base, "config") is base
    with pytest.raises(UsageError, match="--policy"):
        policy_config(base, "lottery")


# -- the clock -------------------------------------------------------------------------------------

def test_the_clock_batches_an_instant_ends_first():
    c = Clock([1.0, 1.0, 3.0])        # arrivals by their places in the trace
    c.at(1.0, "end1")
    out = []
    for t, ends, arrivals in c.batches():
        out.append((t, ends, arrivals))
        if t == 1.0 and "end1" in ends:
            c.at(1.0, "zero-length")      # scheduled while the instant is handled: a further batch
    assert out == [(1.0, ["end1"], [0, 1]), (1.0, ["zero-length"], []), (3.0, [], [2])]


# -- the replay ------------------------------------------------------------------------------------

def test_fifo_replay_by_hand():
    """One 4-GPU node: two 2-GPU jobs start at once, the 4-GPU job waits for both, the last one
    runs past its limit."""
    trace = [tj("a", 0, 100, gpus=2), tj("b", 0, 50, gpus=2), tj("c", 10, 30, gpus=4), tj("d", 20, 100, 40, gpus=1)]
    res = simulate(trace, nodes(1), policy_config(cfg(), "fifo"))
    j = {res.trace_of(i).name: job for i, job in res.jobs.items()}
    starts = {k: v.attempts[0].dispatch_time - EPOCH for k, v in j.items()}
    assert starts == {"a": 0, "b": 0, "c": 100, "d": 130}
    assert (j["d"].state, j["d"].attempts[0].end_time - EPOCH) == (states.TIMEOUT, 170)
    rep = report(res)
    assert rep["makespan_s"] == 170 and rep["jobs"]["completed"] == 3 and rep["jobs"]["timeout"] == 1
    assert rep["wait_s"] == {"mean": (0 + 0 + 90 + 110) / 4, "p50": 45.0, "p95": percentile([0, 0, 90, 110], 0.95)}
    # bounded slowdown: max(1, response / max(run, 10)), run = the last attempt
    assert rep["bounded_slowdown"]["mean"] == round((1 + 1 + 120 / 30 + 150 / 40) / 4, 3)
    assert rep["utilisation"] == round((2 * 100 + 2 * 50 + 4 * 30 + 1 * 40) / (4 * 170), 4)
    assert rep["cost"] == pytest.approx((200 + 100 + 120 + 40) / 3600 * 2.0, abs=1e-5)   # $2/GPU-h, rounded down per attempt
    assert rep["timeouts"]["lost_work_s"] == 40


def test_rates_come_from_the_config_by_gpu_model():
    """A100 nodes at $3/GPU-h (rates.gpu_hour_by_model); a job asking for an H100 could never run."""
    a100 = tuple(Node(f"n{i}", 16, 64 * G, 16, tuple(Gpu(f"GPU-{i}-{g}", g, "A100") for g in range(4))) for i in range(2))
    trace = [tj("a", 0, 3600, gpus=2), tj("b", 0, 1800, gpus=4, gpu_type="A100"), tj("h", 0, 60, gpus=1, gpu_type="H100")]
    rep = report(simulate(trace, a100, cfg('[rates]\ngpu_hour_by_model = { "A100" = 3.0 }\n')))
    assert rep["cost"] == 2 * 3.0 + 4 * 0.5 * 3.0 and rep["refused"]["by_kind"] == {"capacity": 1}


def test_refused_at_submit_like_labq_sub():
    trace = [tj("ok", 0, 10, gpus=1), tj("big", 0, 10, gpus=8), tj("odd", 0, 10, qos="platinum")]
    rep = report(simulate(trace, nodes(1), cfg()))
    assert rep["refused"]["count"] == 2 and rep["refused"]["by_kind"] == {"capacity": 1, "qos": 1}
    assert rep["jobs"]["queued"] == 1


def test_a_preempted_job_loses_its_work_and_is_requeued():
    """A low-QoS job runs 20 min (past min_runtime 10 min); a normal job that needs its GPUs
    preempts it, it ends after the 120 s grace, and restarts from scratch once the GPUs free."""
    trace = [tj("low", 0, 3600, 7200, gpus=4, qos="low"), tj("high", 1200, 600, gpus=4)]
    res = simulate(trace, nodes(1), cfg())
    low, high = res.jobs[1], res.jobs[2]
    assert [a.outcome for a in low.attempts] == ["preempted", "completed"]
    first = low.attempts[0]
    assert (first.end_time - EPOCH, first.lost_work_s) == (1320, 1320)
    assert high.attempts[0].dispatch_time - EPOCH == 1320
    assert low.attempts[1].dispatch_time - EPOCH == 1920 and low.state == states.COMPLETED
    rep = report(res)
    assert rep["preemptions"] == {"count": 1, "jobs": 1, "lost_work_s": 1320.0, "lost_gpu_hours": round(1320 * 4 / 3600, 3),
                                  "lost_cpu_hours": round(1320 / 3600, 3)}


def test_a_deferred_preemption_happens_when_the_victim_reaches_min_runtime():
    """The normal job arrives 5 min into the low job's run; min_runtime is 10 min, so it waits
    (PreemptionDeferred) and preempts at 600 s with no event of its own then; it starts after the grace."""
    trace = [tj("low", 0, 3600, 7200, gpus=4, qos="low"), tj("high", 300, 600, gpus=4)]
    res = simulate(trace, nodes(1), cfg())
    assert res.jobs[1].attempts[0].end_time - EPOCH == 720 and res.jobs[1].attempts[0].outcome == "preempted"
    assert res.jobs[2].attempts[0].dispatch_time - EPOCH == 720


def test_a_victim_whose_work_ends_within_its_grace_still_ends_preempted():
    """As the runner reports it: once the preempt control is seen the attempt ends `preempted`,
    here when its work is done (60 s into the 120-s grace); with no checkpoint it runs again."""
    trace = [tj("low", 0, 1260, 7200, gpus=4, qos="low"), tj("high", 1200, 600, gpus=4)]
    low = simulate(trace, nodes(1), cfg()).jobs[1]
    assert [a.outcome for a in low.attempts] == ["preempted", "completed"]
    assert low.attempts[0].end_time - EPOCH == 1260 and low.attempts[0].lost_work_s == 1260
    assert low.attempts[1].dispatch_time - EPOCH == 1860


def test_budgets_hold_jobs_and_charge_what_ran():
    """$2/GPU-h, a $9 account budget, 1-GPU jobs with a 2-h limit (commit $4) that run 1 h ($2):
    two start, the third waits for their commitments to settle (BudgetReserved), the fourth can
    never fit once $6 is spent (BudgetExhausted)."""
    text = '[accounts.eta]\nusers = ["alice"]\n[[budgets]]\nname = "eta"\naccount = "eta"\nlimit = 9.0\n'
    trace = [tj(f"j{i}", 0, 3600, 7200, gpus=1, user="alice") for i in range(4)]
    res = simulate(trace, nodes(1), cfg(text))
    rep = report(res)
    assert rep["budgets"]["eta"]["spent"] == 6.0 and rep["budgets"]["eta"]["left"] == 3.0 and rep["cost"] == 6.0
    assert rep["held_by_budget"] == {"jobs": 2, "never_started": 1}
    assert rep["jobs"]["completed"] == 3 and rep["jobs"]["never_started"] == 1
    assert res.jobs[3].attempts[0].dispatch_time - EPOCH == 3600
    stuck = [j for j in res.jobs.values() if j.state == states.PENDING]
    assert [j.reason for j in stuck] == [states.BUDGET_EXHAUSTED]


def test_a_job_that_fits_neither_room_nor_budget_counts_as_held_by_budget():
    """B arrives while A holds every GPU and A's $16 commitment leaves B's $2 no room in the $17
    budget: plan() gives B BudgetReserved though it does not fit the node either. No skipping may
    lose that (a pending job charged to a budget keeps every instant's pass)."""
    text = '[accounts.eta]\nusers = ["alice"]\n[[budgets]]\nname = "eta"\naccount = "eta"\nlimit = 17.0\n'
    trace = [tj("a", 0, 3600, 7200, gpus=4, user="alice"), tj("b", 60, 600, 3600, gpus=1, user="alice")]
    c = cfg(text)
    fast, full = simulate(trace, nodes(1), c), simulate(trace, nodes(1), c, skip=False)
    assert report(fast)["held_by_budget"] == report(full)["held_by_budget"] == {"jobs": 1, "never_started": 0}
    assert fast.jobs[2].attempts[0].dispatch_time - EPOCH == 3600


def test_a_periodic_budget_starts_again_at_its_rollover():
    """A weekly budget spent in week one: the waiting job starts when week two begins, with no
    event of its own then (the rollover is an instant of the replay)."""
    text = ('[accounts.eta]\nusers = ["alice"]\n[[budgets]]\nname = "eta"\naccount = "eta"\nlimit = 4.1\n'
            'period = "week"\n')   # one job: 2 GPUs × (1 h + kill_wait) × $2 = $4.03
    trace = [tj("a", 0, 3600, gpus=2, user="alice"), tj("b", 60, 3600, gpus=2, user="alice")]
    res = simulate(trace, nodes(1), cfg(text))
    from labq.scheduler.money import periods
    b = res.cfg.budgets[0]
    week_two = periods.bounds("week", periods.current(b, EPOCH), "UTC")[1]
    assert res.jobs[2].attempts[0].dispatch_time == week_two
    assert report(res)["budgets"]["eta"]["periods"] == 2


# -- skipping changes nothing ----------------------------------------------------------------------

BUDGET_TOML = ('[accounts.lab-a]\nusers = ["ana", "ben"]\nmax_running = 3\n[[budgets]]\nname = "a"\naccount = "lab-a"\n'
               'limit = 30.0\nperiod = "week"\n')


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("case", ["small", "small-budget", "kth", "kth-gpus"])
def test_skipping_plan_passes_changes_nothing(policy, case):
    if case.startswith("small"):
        trace, cluster = load(SMALL), nodes(2)
    elif case == "kth":
        trace, cluster = load(KTH, extra=KTH_EXTRA, time_column="req_time_s"), cpu_machine(100)
    else:
        trace, cluster = load(KTH, extra=KTH_EXTRA, time_column="req_time_s", cpus_as_gpus=True), nodes(8, 8, 16)
    base = cfg(BUDGET_TOML if case == "small-budget" else "")
    c = policy_config(base, policy)
    fast, full = simulate(trace, cluster, c), simulate(trace, cluster, c, skip=False)
    assert schedule(fast) == schedule(full)
    assert without_plan_counts(report(fast)) == without_plan_counts(report(full))
    assert fast.plan_skipped > 0 and full.plan_skipped == 0
    if case == "kth" and policy in ("fifo", "priority", "fairshare"):
        assert fast.plan_calls < full.plan_calls / 2      # the point of it: strict order needs few passes


@pytest.mark.parametrize("spacing", [1, 30])
def test_a_submit_burst_turns_off_the_submit_order_shortcut(spacing):
    """One user submits 300 one-GPU jobs, every `spacing` s (1 s: far past burst_jobs = 100 within
    10 minutes, so the pending tail is penalised; 30 s: never), and another user 20 more. Under
    `priority` (burst_penalty 20) a pending burst tail means the queue is not in submit order and
    the simulator makes whole passes; without one it uses windowed passes, as always under fifo
    (burst_penalty 0). Either way skipping changes nothing."""
    from labq.scheduler.jobs.model import Job
    from labq.scheduler.sim.queue import Queue
    trace = [tj(f"u{i}", i * spacing, 600, gpus=1, user="una") for i in range(300)]
    trace += [tj(f"v{i}", 150 * spacing + 60 * i, 300, gpus=1, user="vic") for i in range(20)]
    trace.sort(key=lambda j: j.submit)
    for policy in ("priority", "fifo"):
        c = policy_config(cfg(), policy)
        fast, full = simulate(trace, nodes(1), c), simulate(trace, nodes(1), c, skip=False)
        assert schedule(fast) == schedule(full)
        assert without_plan_counts(report(fast)) == without_plan_counts(report(full))
        q = Queue(c)
        for i, t in enumerate(trace):
            q.add(Job(id=i + 1, user=t.user, account="x", gpus=1, submit_time=EPOCH + t.submit))
        assert q.accounts_in_submit_order(EPOCH + 9000) == (policy == "fifo" or spacing == 30)


def test_a_wide_strict_pass_widens_its_window():
    """Forty 1-CPU jobs at once on an empty 100-CPU machine: the first window (4 jobs) starts all
    of its jobs, so the pass is widened until one stays pending or the window is the queue."""
    trace = [tj(f"j{i}", 0, 100, cpus=1) for i in range(40)] + [tj("big", 0, 100, cpus=100)]
    c = policy_config(cfg(), "fifo")
    fast, full = simulate(trace, cpu_machine(), c), simulate(trace, cpu_machine(), c, skip=False)
    assert schedule(fast) == schedule(full)
    assert sum(1 for j in fast.jobs.values() if j.attempts[0].dispatch_time == EPOCH) == 40


def test_percentile_interpolates():
    assert percentile([], 0.5) == 0.0
    assert percentile([3, 1, 2], 0.5) == 2
    assert percentile([0, 10], 0.95) == 9.5


def test_replay_is_deterministic():
    c = cfg()
    a, b = simulate(load(SMALL), nodes(2), c), simulate(load(SMALL), nodes(2), c)
    assert schedule(a) == schedule(b) and report(a) == report(b)


def test_progress_is_reported():
    seen = []
    simulate(load(SMALL), nodes(2), cfg(), progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (23, 23) and all(d <= t for d, t in seen)


def test_progress_is_reported_when_the_last_job_is_submitted_and_again_at_the_end():
    """Reports come every 1/200 of the jobs, and once all are in even off that step (bench/sim_bench.py
    times the drain after the last submit from it): 401 jobs, a step of 2, the last one alone."""
    trace = [tj(f"j{i}", i, 10_000, gpus=1) for i in range(401)]
    seen = []
    simulate(trace, nodes(2), cfg(), progress=lambda done, total: seen.append(done))
    assert seen.count(401) == 2 and seen[-3:-1] == [400, 401]


def test_nodes_are_always_up_on_the_virtual_clock():
    down = tuple(replace(n, state="drain", lease_expiry=0.0) for n in nodes(1))
    rep = report(simulate([tj("a", 0, 10, gpus=1)], down, cfg()))
    assert rep["jobs"]["completed"] == 1


def test_a_backfill_replay_keeps_its_running_jobs_timelines_between_passes(monkeypatch):
    """As the daemon does (policy.Kept): every backfill pass of one replay is given the same Tracks,
    repaired from pass to pass; the reference (skip=False) builds its timelines anew, and the
    schedules are the same."""
    from labq.scheduler import policy
    from labq.scheduler.sim import engine
    given, plan = [], policy.plan

    def spy(*a, **kw):
        given.append(kw.get("tracks"))
        return plan(*a, **kw)
    monkeypatch.setattr(engine.policy, "plan", spy)
    trace = load(KTH, extra=KTH_EXTRA, time_column="req_time_s", cpus_as_gpus=True)
    c = policy_config(cfg(), "backfill")
    fast = simulate(trace, nodes(8, 8, 16), c)
    kept, given[:] = given[:], []
    full = simulate(trace, nodes(8, 8, 16), c, skip=False)
    assert kept and isinstance(kept[0], policy.Tracks) and all(t is kept[0] for t in kept)
    assert given and set(given) == {None}
    assert schedule(fast) == schedule(full)


@pytest.mark.parametrize("policy", ["fifo", "priority", "fairshare", "backfill", "learned"])
def test_the_queue_keeps_the_per_shape_orders_only_where_a_backfill_window_reads_them(policy):
    """easy.py's indexes (each request shape's jobs by span and in submit order, short jobs first)
    cost ~20 MB each at 200,000 pending: a backfill-off replay (strict.py's windows, kept.py's walk)
    never reads them, so its queue keeps none; nor does a replay through plan() (`ordered=False`,
    through.py); a backfill one keeps them for every job, and the submit order (order.SubmitOrder) too."""
    from labq.scheduler.jobs.model import Job
    from labq.scheduler.sim.policies import resolve
    from labq.scheduler.sim.queue import Queue
    c, _ = resolve(cfg(), policy)
    for ordered in (True, False):
        q = Queue(c, ordered=ordered)
        for i in range(50):
            q.add(Job(id=i + 1, user=f"u{i % 3}", account="x", gpus=1 + i % 4, submit_time=EPOCH + i, time_limit=600 + i))
        backfill = c.backfill_depth > 0 and ordered
        assert len(q.keys) == (50 if backfill else 0)
        assert bool(q.by_shape) == bool(q.shape_fifo) == backfill
        assert len(q.fifo) == sum(map(len, q.by_account.values())) == (50 if backfill else 0)
        assert (q.runtimes is not None) == (backfill and policy == "learned")
        for i in range(1, 51):
            q.remove(i)
        assert not (q.keys or q.by_shape or q.shape_fifo or q.fifo or q.by_account or q.shaped)
