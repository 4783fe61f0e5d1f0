"""A backfill-off pass that stops at its blocker (policy/strict.py) decides as the whole per-job pass
(policy.plan_per_job): on random snapshots with deep queues (QoS levels, fair share, bursts, holds,
--begin, dependencies, caps, budgets, preemption), and on random trace replays where every instant's
plan() over the whole queue is compared with a replay made of whole per-job passes; and the same
walk over a Backlog kept by the caller (policy/backlog.py, strict.run_kept) on the same snapshots."""
import random
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from labq.scheduler import policy
from labq.scheduler.jobs import states
from labq.scheduler.jobs.model import Gpu, Node
from labq.scheduler.jobs.plan import Pendings
from labq.scheduler.policy import strict
from labq.scheduler.policy.floors import Floors
from labq.scheduler.settings import config as config_mod
from labq.scheduler.sim.engine import simulate
from labq.scheduler.sim.policies import policy_config
from labq.scheduler.sim.trace import TraceJob
from tests.harness import ClusterBuilder, G, cfg

CONFIG = """
[scheduler]
backfill_depth = 0
preemption = {preempt}
[priority]
fairshare_weight = {fairshare}
burst_jobs = {burst_jobs}
burst_window = "{burst_window}"
burst_penalty = {burst_penalty}
[qos.normal]
priority = 100
[qos.low]
priority = 0
preemptible = true
[qos.high]
priority = 200
[accounts.eta]
users = ["alice", "bob"]
share = 3
[accounts.phi]
users = ["carol"]
max_running = {max_running}
share = 1
[users.bob]
max_gpus = 3
[[budgets]]
name = "eta-b"
account = "eta"
limit = {limit}
"""

_RUN = strict.run


def same(a, b) -> None:
    """The same decisions: admissions, expiries, every pending job's reason and detail, preemptions."""
    assert sorted(a.places, key=lambda p: p.job_id) == sorted(b.places, key=lambda p: p.job_id)
    assert a.expires == b.expires
    assert {p.job_id: (p.reason, p.detail) for p in a.pending} == {p.job_id: (p.reason, p.detail) for p in b.pending}
    assert len(a.pending) == len(b.pending)
    assert a.preempts == b.preempts
    assert a.starts == b.starts

WHO = [("eta", "alice"), ("eta", "bob"), ("phi", "carol"), ("default", "dave")]


@st.composite
def scenes(draw, config=CONFIG, limits=(2, 50, 100000)):
    text = config.format(period=draw(st.sampled_from(["none", "week"])), preempt=draw(st.sampled_from(["true", "false"])),
                         fairshare=draw(st.sampled_from([0, 50])), burst_jobs=draw(st.sampled_from([1, 3, 100])),
                         burst_window=draw(st.sampled_from(["60s", "1h"])), burst_penalty=draw(st.sampled_from([0, 20])),
                         max_running=draw(st.sampled_from([1, 3, 100])), limit=draw(st.sampled_from(limits)))
    b = ClusterBuilder()
    for n in range(draw(st.integers(1, 3))):
        b.node(f"n{n}", gpus=draw(st.sampled_from([0, 2, 4])), cpus=16, mem=64 * G, slots=8)
    for n in list(b.nodes):
        left = len(n.gpus)
        for _ in range(draw(st.integers(0, 3))):
            g = draw(st.sampled_from([1, 2, 0]))
            if g > left:
                break
            acct, user = draw(st.sampled_from(WHO))
            b.running(n.name, gpus=g, cpus=1, qos=draw(st.sampled_from(["low", "normal"])), account=acct, user=user,
                      started_ago=draw(st.sampled_from([30.0, 7200.0])), time_limit=3600)
            left -= g
    ended = b._next
    b._next += 1
    for k in range(draw(st.integers(1, 60))):
        extra = draw(st.sampled_from(["", "", "", "", "held", "begin", "dep", "throttle"]))
        acct, user = draw(st.sampled_from(WHO))
        kw: dict = {}
        if extra == "held":
            kw["held"] = True
        elif extra == "begin":
            kw["begin"] = b.now + 600
        elif extra == "dep":
            kw["deps"] = (("afterok", (ended,)),)
        elif extra == "throttle":
            kw.update(array_id=1000, array_index=k, array_throttle=2)
        b.job(gpus=draw(st.sampled_from([0, 1, 2, 4])), cpus=draw(st.sampled_from([1, 4])), time_limit=3600,
              qos=draw(st.sampled_from(["normal", "low", "high"])), account=acct, user=user,
              submit_offset=-float(draw(st.integers(0, 20)) * draw(st.sampled_from([1, 30, 700, 90000]))), **kw)
    snap = b.build()
    usage = (("eta", draw(st.sampled_from([0.0, 5e4]))), ("phi", draw(st.sampled_from([0.0, 5e5]))))
    return replace(snap, ended=((ended, states.COMPLETED),), usage=usage,
                   spent=(("eta-b", draw(st.sampled_from([0, 10**8]))),)), cfg(text)


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(scenes())
def test_a_pass_stopped_at_its_blocker_decides_as_the_whole_pass(monkeypatch, scene):
    snap, c = scene
    assert strict.applies(c)
    ran = []
    monkeypatch.setattr(strict, "run", lambda *a: ran.append(_RUN(*a)) or ran[-1])
    same(policy.plan(snap, c), policy.plan_per_job(snap, c))
    assert ran == [True]


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(scenes())
def test_a_pass_over_the_backlog_decides_as_the_whole_pass(monkeypatch, scene):
    snap, c = scene
    w = c.priority
    b = policy.Backlog((w.burst_jobs, w.burst_window) if w.burst_penalty else None)
    for j in snap.jobs:
        if j.state == states.PENDING:
            b.add(j)
    ran = []
    real = strict.run_kept
    monkeypatch.setattr(strict, "run_kept", lambda *a: ran.append(real(*a)) or ran[-1])
    running = replace(snap, jobs=tuple(j for j in snap.jobs if j.state != states.PENDING))
    same(policy.plan(running, c, backlog=b), policy.plan_per_job(snap, c))
    assert ran in ([True], [False])


# Budget floors pend jobs unquoted only where no cap reads them first: no user caps here.
FLOORED = CONFIG.replace('[users.bob]\nmax_gpus = 3\n', '') + 'period = "{period}"\n'
BUDGET = {states.BUDGET_RESERVED, states.BUDGET_EXHAUSTED}


def backlog_of(snap, c, floors=None):
    w = c.priority
    b = policy.Backlog((w.burst_jobs, w.burst_window) if w.burst_penalty else None, floors)
    for j in snap.jobs:
        if j.state == states.PENDING:
            b.add(j)
    return b, replace(snap, jobs=tuple(j for j in snap.jobs if j.state != states.PENDING))


def same_but_unquoted(a, b) -> int:
    """`same`, but a job `a` pended for a budget unquoted (by its floors: strict.UNQUOTED) need only
    be pended for a budget in `b`; how many were."""
    assert sorted(a.places, key=lambda p: p.job_id) == sorted(b.places, key=lambda p: p.job_id)
    assert a.expires == b.expires and a.preempts == b.preempts and a.starts == b.starts
    mine, theirs = {p.job_id: (p.reason, p.detail) for p in a.pending}, {p.job_id: (p.reason, p.detail) for p in b.pending}
    assert mine.keys() == theirs.keys() and len(a.pending) == len(b.pending)
    unquoted = {i for i, (_, d) in mine.items() if d == strict.UNQUOTED}
    assert all(mine[i][0] in BUDGET and theirs[i][0] in BUDGET for i in unquoted)
    assert {i: v for i, v in mine.items() if i not in unquoted} == {i: v for i, v in theirs.items() if i not in unquoted}
    return len(unquoted)


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(scenes(FLOORED, (1, 3, 5, 9, 50, 100000)))
def test_a_walk_with_budget_floors_pends_unquoted_only_whom_the_budget_would(scene):
    """A Backlog that keeps budget floors (budget.Floors: the simulator's) lets the walk pend, without a
    quote, the jobs a budget has no room for by their floors: the same plan as the per-job pass, each
    of those pended there for a budget too (a planted floor 2x too high, or a walk that keeps skipping
    past the blocker, fails this)."""
    snap, c = scene
    b, running = backlog_of(snap, c, Floors(c, snap.nodes))
    same_but_unquoted(policy.plan(running, c, backlog=b), policy.plan_per_job(snap, c))


def test_a_spent_budget_pends_its_groups_unquoted_up_to_the_blocker():
    """A spent budget's 40 jobs before an unbudgeted blocker and 20 after it: the first are pended for
    the budget without a quote each (one floor look per group), the rest take the blocker's verdict."""
    b = ClusterBuilder()
    b.node("n0", gpus=2, cpus=16, mem=64 * G, slots=8)
    b.running("n0", gpus=2, cpus=1, account="phi", user="carol", time_limit=3600)
    for k in range(40):
        b.job(gpus=1, account="eta", user="alice", time_limit=3600, submit_offset=-1000.0 + k)
    b.job(gpus=1, account="phi", user="carol", time_limit=3600, submit_offset=-500.0)
    for k in range(20):
        b.job(gpus=1, account="eta", user="alice", time_limit=3600, submit_offset=-100.0 + k)
    snap = replace(b.build(), spent=(("eta-b", 10**8),))
    c = cfg(FLOORED.format(preempt="false", fairshare=0, burst_jobs=100, burst_window="1h", burst_penalty=0,
                           max_running=100, limit=50, period="none"))
    backlog, running = backlog_of(snap, c, Floors(c, snap.nodes))
    quotes = []
    real = policy.BudgetBook.quote
    policy.BudgetBook.quote = lambda self, *a, **kw: quotes.append(1) or real(self, *a, **kw)
    try:
        got = policy.plan(running, c, backlog=backlog)
    finally:
        policy.BudgetBook.quote = real
    assert same_but_unquoted(got, policy.plan_per_job(snap, c)) == 40
    assert len(quotes) <= 1          # the blocker's own: none for the budget's jobs


def test_it_leaves_to_the_class_walk_a_pass_where_a_turn_after_the_blocker_changes_it():
    b = ClusterBuilder()
    b.node("n0", gpus=2)
    b.running("n0", gpus=2)
    b.job(gpus=1)
    b.job(gpus=1, earmark="n0")
    snap, c = b.build(), cfg("[scheduler]\nbackfill_depth = 0\n")
    assert strict.applies(c) and not strict.applies(replace(c, backfill_depth=1))
    waiting = [j for j in snap.jobs if j.state == states.PENDING]
    p = policy._Pass(snap, c, [j for j in snap.jobs if j.state != states.PENDING], policy.Dependencies(snap))
    assert strict.run(p, waiting, c) is False and not p.pending and not p.runs      # an earmark: nothing judged
    same(policy.plan(snap, c), policy.plan_per_job(snap, c))


def _trace(rng: random.Random) -> list[TraceJob]:
    """A deep queue: bursts of alike jobs from a few users, more work than the cluster holds."""
    out, t = [], 0.0
    while len(out) < 80:
        t += rng.expovariate(1 / 120)
        user = rng.choice(["u0", "u1", "u2"])
        gpus = rng.choice([1, 1, 2, 4])
        for _ in range(rng.choice([1, 1, 3, 8])):
            run = rng.randint(60, 7200)
            out.append(TraceJob(name=f"j{len(out)}", submit=t, duration=float(run), time_limit=run * 2, gpus=gpus,
                                user=user, account=rng.choice(["", "eta"]), qos=rng.choice(["normal", "normal", "high"])))
    return out


def _whole(snap, cfg, **_):
    """The per-job pass over the whole queue, shaped as plan()'s Plan (pending as Pendings)."""
    p = policy.plan_per_job(snap, cfg)
    return replace(p, pending=Pendings(p.pending))


def _schedule(res):
    return {i: (j.state, tuple((a.node, a.gpus, a.dispatch_time, a.end_time, a.outcome) for a in j.attempts))
            for i, j in res.jobs.items()}


@pytest.mark.parametrize("seed", range(30))
def test_a_replay_of_passes_stopped_at_the_blocker_equals_one_of_whole_passes(monkeypatch, seed):
    rng = random.Random(seed)
    trace = _trace(rng)
    nodes = tuple(Node(f"n{i}", 16, 64 * G, 16, tuple(Gpu(f"GPU-{i}-{g}", g, "fake") for g in range(4)))
                  for i in range(2))
    base = config_mod.loads('[priority]\nburst_jobs = 3\nburst_window = "10m"\n[qos.normal]\npriority = 10\n[qos.high]\npriority = 50\n'
                            '[accounts.eta]\nusers = ["u0", "u1"]\nshare = 2\n')
    name = rng.choice(["fifo", "priority", "fairshare"])
    c = policy_config(base, name)
    got = simulate(trace, nodes, c, skip=False)
    monkeypatch.setattr(policy, "plan", _whole)
    want = simulate(trace, nodes, c, skip=False)
    assert _schedule(got) == _schedule(want)
