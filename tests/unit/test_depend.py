"""Dependencies and deadlines, pure: parsing -d, resolving ids, depend.py's verdicts, plan-level effects."""
import os
import subprocess
import sys
from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

from labq.scheduler import policy
from labq.scheduler.errors import UsageError
from labq.scheduler.jobs import states
from labq.scheduler.jobs.jobspec import describe_deps, job_from_submit, parse_dependency, resolve_deps
from labq.scheduler.policy.depend import Dependencies, satisfied, targets
from tests.harness import ROOT, SWEEP_TOML, ClusterBuilder, cfg, summarize

SWEEP = cfg(SWEEP_TOML)


# -- parsing and resolving -------------------------------------------------------------------------
@pytest.mark.parametrize("text,parsed", [
    ("afterok:12", (("afterok", ("12",)),)),
    ("afterok:12:13,afternotok:14_2", (("afterok", ("12", "13")), ("afternotok", ("14_2",)))),
    ("afterany:7,singleton", (("afterany", ("7",)), ("singleton", ()))),
    ("", ()),
])
def test_parse_dependency(text, parsed):
    assert parse_dependency(text) == parsed


@pytest.mark.parametrize("text,needle", [
    ("afterok", "afterok:ID"),
    ("afterok:", "afterok:ID"),
    ("afterok:x", "ids like 42"),
    ("afterok:1::2", "ids like 42"),
    ("after:12", "unknown type 'after'"),
    ("aftercorr:12", "unknown type"),
    ("afterok:12?afterany:13", "'?'"),
    ("singleton:5", "singleton takes no job ids"),
    ("afterok:12,", "unknown type ''"),
    ("afterok:12+5", "ids like 42"),
])
def test_bad_dependency_is_a_usage_error_naming_the_field(text, needle):
    with pytest.raises(UsageError) as e:
        parse_dependency(text)
    assert e.value.exit_code == 2 and str(e.value).startswith("dependency:") and needle in str(e.value)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="afterokny:_,?0123456789singleton", max_size=30))
def test_any_dependency_text_parses_or_is_one_usage_line(text):
    try:
        parsed = parse_dependency(text)
    except UsageError as e:
        assert "\n" not in str(e)
        return
    assert all(kind in ("afterok", "afternotok", "afterany", "singleton") for kind, _ in parsed)


def test_resolve_expands_arrays_and_refuses_unknown_ids():
    known = {"5": [5], "40": [40, 41, 42], "40_2": [41]}
    lookup = lambda t: known.get(t, [])   # noqa: E731
    assert resolve_deps(parse_dependency("afterok:5:40,afternotok:40_2"), lookup) == (
        ("afterok", (5, 40, 41, 42)), ("afternotok", (41,)))
    with pytest.raises(UsageError, match="no such job 99"):
        resolve_deps(parse_dependency("afterok:5:99"), lookup)
    assert describe_deps((("afterok", (5, 40)), ("singleton", ()))) == "afterok:5:40,singleton"


BODY = {"argv": ["true"], "workdir": "/tmp", "account": "eta"}


@pytest.mark.parametrize("extra,needle", [
    ({"dependency": "afterok:3"}, "no such job 3"),
    ({"dependency": 12}, "dependency: expected text"),
    ({"deadline": "tomorrow"}, "deadline: expected an epoch"),
    ({"deadline": 1500.0, "time_limit": 3600}, "could not finish by it"),
    ({"deadline": 9000.0, "time_limit": 3600, "begin": 6000.0}, "could not finish by it"),
    ({"retry_on": [3]}, "give --retries N too"),
    ({"retries": 2, "retry_on": [0]}, "exit codes 1–255"),
    ({"retries": 2, "retry_on": [85], "checkpoint_exit_code": 85}, "checkpoint exit code"),
    ({"retries": -1}, "retries: expected an integer ≥ 0"),
    ({"retries": 1000}, "at most 100"),
    ({"requeue": "no"}, "requeue: expected true or false"),
    ({"kill_on_invalid_dep": 1}, "kill_on_invalid_dep: expected true or false"),
    ({"preemptible": "yes"}, "preemptible: expected true, false or null"),
    ({"mem_limit": 1 << 20, "mem": 1 << 30}, "below the --mem reservation"),
])
def test_submit_fields_are_validated(extra, needle):
    with pytest.raises(UsageError, match=needle):
        job_from_submit({**BODY, **extra}, "alice", SWEEP, 1000.0, lambda t: [])


def test_submit_fields_are_stored():
    j = job_from_submit({**BODY, "dependency": "afterok:7,singleton", "kill_on_invalid_dep": True,
                         "deadline": 90_000.0, "retries": 2, "retry_on": [75, 3, 3], "requeue": False,
                         "requeue_on_timeout": True, "preemptible": False, "mem_limit": 2 << 30, "mem": 1 << 30},
                        "alice", SWEEP, 1000.0, lambda t: [7] if t == "7" else [])
    assert (j.deps, j.kill_on_invalid_dep, j.deadline) == ((("afterok", (7,)), ("singleton", ())), True, 90_000.0)
    assert (j.retries, j.retry_on, j.requeue, j.requeue_on_timeout) == (2, (3, 75), False, True)
    assert (j.preemptible, j.mem_limit) == (False, 2 << 30)


def _labq(*args):
    env = dict(os.environ, LABQ_REDIS_URL="unix:///nonexistent/labq.sock", PYTHONPATH=ROOT)
    env.pop("LABQ_CONFIG", None)
    return subprocess.run([sys.executable, "-m", "labq.cli.main", *args], input="", capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=60)


@pytest.mark.parametrize("args,needle", [
    (["-d", "afterok"], "dependency"),
    (["-d", "afterwards:3"], "unknown type"),
    (["-d", "afterok:3?afterok:4"], "'?'"),
    (["--deadline", "whenever"], "--deadline"),
    (["--retries", "2", "--retry-on", "x"], "--retry-on"),
    (["--retries", "2", "--retry-on", "300"], "--retry-on"),
    (["--retries", "-2"], "--retries"),
    (["--mem-limit", "lots"], "--mem-limit"),
])
def test_bad_flags_exit_2_before_anything_is_sent(args, needle):
    """Redis is unreachable here (exit 4 if it got that far): bad input fails first, with one line."""
    p = _labq("sub", *args, "--", "true")
    assert p.returncode == 2, p.stderr
    assert needle in p.stderr and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_directives_carry_dependencies_and_retries():
    from labq.cli.subcore import build_body, directives
    from labq.cli.submit import sub
    dirs = directives("#!/bin/sh\n#LABQ -d afterok:4 --retries 2 --retry-on 3,75 --no-requeue --deadline now+2h\n")
    ctx = sub.make_context("sub", dirs + ["--", "true"])
    body = build_body({**ctx.params, "chdir": "/tmp"}, ["true"], None)
    assert (body["dependency"], body["retries"], body["retry_on"], body["requeue"]) == ("afterok:4", 2, [3, 75], False)
    assert body["deadline"] > body.get("begin", 0)


# -- verdicts ------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind,state,expected", [
    ("afterok", states.COMPLETED, True), ("afterok", states.FAILED, False), ("afterok", states.CANCELLED, False),
    ("afterok", states.TIMEOUT, False), ("afterok", states.RUNNING, None), ("afterok", states.PENDING, None),
    ("afternotok", states.COMPLETED, False), ("afternotok", states.FAILED, True), ("afternotok", states.OOM, True),
    ("afternotok", states.NODE_FAIL, True), ("afternotok", states.PREEMPTING, None),
    ("afterany", states.COMPLETED, True), ("afterany", states.CANCELLED, True), ("afterany", states.RUNNING, None),
])
def test_satisfied(kind, state, expected):
    assert satisfied(kind, state) is expected


def _snap(b: ClusterBuilder, ended=()):
    return replace(b.build(), ended=tuple(ended))


@pytest.mark.parametrize("deps,ended,reason,needle", [
    ((("afterok", (1,)),), (), states.DEPENDENCY, "afterok:1 (R)"),
    ((("afterok", (50,)),), ((50, states.COMPLETED),), None, ""),
    ((("afterok", (50,)),), ((50, states.FAILED),), states.DEPENDENCY_NEVER, "afterok:50 (F)"),
    ((("afternotok", (50,)),), ((50, states.COMPLETED),), states.DEPENDENCY_NEVER, "afternotok:50 (CD)"),
    ((("afternotok", (50,)),), ((50, states.OOM),), None, ""),
    ((("afterany", (50, 1)),), ((50, states.FAILED),), states.DEPENDENCY, "afterany:1 (R)"),
    ((("afterok", (1,)), ("afterok", (50,))), ((50, states.FAILED),), states.DEPENDENCY_NEVER, "afterok:50"),
    ((("afterok", (77,)),), (), states.DEPENDENCY_NEVER, "afterok:77 (no record)"),
])
def test_verdicts_from_active_and_ended_states(deps, ended, reason, needle):
    b = ClusterBuilder().node("n", gpus=4).running("n", gpus=1).job(gpus=1, deps=deps)
    snap = _snap(b, ended)
    got = Dependencies(snap).verdict(snap.jobs[1])
    if reason is None:
        assert got is None
    else:
        assert got[0] == reason and needle in got[1]


def test_targets_are_what_the_daemon_must_look_up():
    b = ClusterBuilder().job(deps=(("afterok", (5, 6)),)).job(deps=(("afterany", (6, 7)), ("singleton", ())))
    assert targets(b.build().jobs) == {5, 6, 7}


# -- plan-level ----------------------------------------------------------------------------------
def test_a_pending_dependent_encumbers_no_budget_and_gets_no_reservation():
    """B (afterok on the running A) would commit $60 of the $108 available; C needs $60. Were B to
    reach the budget gate first, C would wait on the budget; it does not, so C starts."""
    b = (ClusterBuilder().node("n", gpus=8).running("n", gpus=1, account="eta")
         .job(gpus=2, time_limit=15 * 3600, account="eta", deps=(("afterok", (1,)),))
         .job(gpus=1, time_limit=30 * 3600, account="eta", submit_offset=50))
    p = policy.plan(_snap(b), SWEEP)
    s = summarize(p)
    assert s["pending"] == {2: states.DEPENDENCY} and list(s["places"]) == [3]
    assert all(st.job_id != 2 for st in p.starts)
    # The control: without the dependency B starts first and C is held back by the budget.
    free = replace(b.build(), jobs=tuple(replace(j, deps=()) for j in b.build().jobs))
    s = summarize(policy.plan(free, SWEEP))
    assert list(s["places"]) == [2] and s["pending"][3] in (states.BUDGET_RESERVED, states.BUDGET_EXHAUSTED)


def test_afterok_chain_starts_once_its_target_completed():
    b = ClusterBuilder().node("n", gpus=4).job(gpus=1, jid=10, deps=(("afterok", (9,)),))
    assert summarize(policy.plan(_snap(b, [(9, states.RUNNING)]), cfg()))["pending"] == {10: states.DEPENDENCY}
    assert list(summarize(policy.plan(_snap(b, [(9, states.COMPLETED)]), cfg()))["places"]) == [10]


def test_kill_on_invalid_dep_cancels_and_without_it_the_job_pends():
    b = ClusterBuilder().node("n", gpus=4)
    b.job(gpus=1, deps=(("afterok", (9,)),), kill_on_invalid_dep=True).job(gpus=1, deps=(("afterok", (9,)),))
    p = policy.plan(_snap(b, [(9, states.FAILED)]), cfg())
    assert [(e.job_id, e.state) for e in p.expires] == [(1, states.CANCELLED)]
    assert "afterok:9 (F)" in p.expires[0].detail
    assert summarize(p)["pending"] == {2: states.DEPENDENCY_NEVER}


def test_singleton_runs_one_job_of_a_name_at_a_time_in_submit_order():
    one = (("singleton", ()),)
    b = ClusterBuilder().node("n", gpus=4)
    b.job(gpus=1, name="sweep", deps=one).job(gpus=1, name="sweep", deps=one).job(gpus=1, name="other", deps=one)
    b.job(gpus=1, name="sweep", deps=one, user="bob")
    s = summarize(policy.plan(_snap(b), cfg()))
    assert sorted(s["places"]) == [1, 3, 4] and s["pending"] == {2: states.DEPENDENCY}
    b = ClusterBuilder().node("n", gpus=4).running("n", gpus=1, name="sweep").job(gpus=1, name="sweep", deps=one)
    p = policy.plan(_snap(b), cfg())
    assert summarize(p)["pending"] == {2: states.DEPENDENCY} and "job 1 ('sweep') is running" in p.pending[0].detail


def test_deadline_ends_DL_once_a_start_could_not_finish_by_it():
    b = ClusterBuilder()   # no node: the job cannot start anyway
    now = b.now
    b.job(time_limit=3600, deadline=now + 3600).job(time_limit=3600, deadline=now + 3599)
    p = policy.plan(b.build(), cfg())
    assert [(e.job_id, e.state) for e in p.expires] == [(2, states.DEADLINE)]
    assert summarize(p)["pending"] == {1: states.NODE_DOWN}


def test_reasons_name_array_tasks_as_users_know_them():
    """`afterok:126_7`, never the internal task id 133 (active task, and ended task via Snapshot.shown)."""
    from dataclasses import replace
    b = ClusterBuilder().node("n", gpus=4).running("n", gpus=1).job(gpus=1, deps=(("afterok", (1, 50)),))
    snap = _snap(b, ((50, states.FAILED),))
    task = replace(snap.jobs[0], array_id=126, array_index=7)
    snap = replace(snap, jobs=(task, snap.jobs[1]), shown=((50, "126_9"),))
    got = Dependencies(snap).verdict(snap.jobs[1])
    assert got == (states.DEPENDENCY_NEVER, "can never start: afterok:126_9 (F)")
    snap = replace(snap, ended=((50, states.COMPLETED),))
    assert Dependencies(snap).verdict(snap.jobs[1]) == (states.DEPENDENCY, "waiting for afterok:126_7 (R)")
