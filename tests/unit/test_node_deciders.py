"""The nodes' side of a tick decided without Redis (issue 40 item 1): the daemon (events.py) reads the
heartbeats, health marks and claims and takes back the dispatch entries it is told to; what each
read means is decided here, pure, over the state and what was read (attempt.part_verdict,
dispatch.unhealthy / healthy_again / withdrawn), and the state learns it only from the Change
(state.apply: Change.health, Change.ended)."""
import dataclasses

from labq.scheduler.daemon import attempt, dispatch
from labq.scheduler.daemon.change import Change
from labq.scheduler.daemon.crashguard import CrashGuard
from labq.scheduler.daemon.state import SchedulerState
from labq.scheduler.jobs import states
from labq.scheduler.jobs.estimate import Estimator
from tests.harness import ClusterBuilder, cfg

NOW = 1_000_000.0
QUIET = (None, None, None)


def _gang(down: str = ""):
    b = ClusterBuilder(NOW).node("a", gpus=1).node("b", gpus=1, state="down" if down else "up")
    snap = b.running_gang(("a", "b"), gpus=1).build()
    return snap.jobs[0], {n.name: n for n in snap.nodes}


def _unstarted(job):
    return dataclasses.replace(job, attempts=job.attempts[:-1] + (dataclasses.replace(job.current, start_time=None),))


def test_a_part_never_claimed_on_a_node_gone_past_the_margin_is_to_be_withdrawn_then_claimed_is_left():
    job, up = _gang(down="b")
    gone = {"b": NOW - cfg().fence_margin}
    v = attempt.part_verdict(job, [(NOW, None, None), QUIET], up, gone, NOW, cfg())
    assert v == attempt.Withdraw("b", 1, "1.1")
    # the runner won the claim meanwhile: that part is starting, nothing else is lost
    assert attempt.part_verdict(job, [(NOW, None, None), QUIET], up, gone, NOW, cfg(), tried={1}) is None
    # within the fence margin nothing is taken back yet
    assert attempt.part_verdict(job, [(NOW, None, None), QUIET], up, {"b": NOW}, NOW, cfg()) is None


def test_a_silent_part_on_a_live_node_is_lost_past_lease_and_margin():
    job, up = _gang()
    quiet = cfg().node_lease + cfg().fence_margin
    assert attempt.part_verdict(job, [(NOW, None, None), (NOW - quiet, None, None)], up, {}, NOW, cfg()) is None
    got = attempt.part_verdict(job, [(NOW, None, None), (NOW - quiet - 1, None, None)], up, {}, NOW, cfg())
    assert isinstance(got, tuple)
    record, charges = got
    assert record.current.usage["nodes"]["b"]["outcome"] == "node_failure" and list(charges) == []


def test_an_unhealthy_mark_and_its_alert_come_once():
    nodes = ClusterBuilder(NOW).node("n1").build().nodes
    marks, alerts = dispatch.unhealthy(nodes, "n1", NOW, "no runner took job 1 attempt 1 within 60s")
    assert marks == [("n1", "no runner took job 1 attempt 1 within 60s")]
    assert [a["kind"] for a in alerts] == ["node_unhealthy"]
    assert dispatch.unhealthy(nodes, "n1", NOW, "again", marked={"n1"}) == ([], [])    # the same change
    marked = (dataclasses.replace(nodes[0], state="unhealthy", reason="earlier"),)
    assert dispatch.unhealthy(marked, "n1", NOW, "again") == ([], [])                   # the first mark stays
    assert dispatch.unhealthy(nodes, "", NOW, "no node") == ([], [])


def test_a_node_is_healthy_again_once_a_runner_wrote_its_state_after_the_mark():
    assert dispatch.healthy_again(["a", "b", "c"], {"a": NOW, "b": NOW, "c": NOW}, {"a": NOW + 1, "b": NOW},
                                  NOW) == ["a"]


def test_a_start_timeout_withdrawal_requeues_the_job_and_marks_its_node():
    snap = ClusterBuilder(NOW).node("n1").running("n1").build()
    job = _unstarted(snap.jobs[0])
    change = dispatch.withdrawn(dispatch.Unclaimed(job, "timeout"), NOW, snap.nodes, cfg())
    [j] = change.jobs
    assert j.state == states.PENDING and j.attempts[0].outcome == "withdrawn"
    assert [n for n, _ in change.health] == ["n1"] and [a["kind"] for a in change.alerts] == ["node_unhealthy"]
    cancelled = dispatch.withdrawn(dispatch.Unclaimed(job, "cancel"), NOW, snap.nodes, cfg())
    assert cancelled.health == [] and cancelled.alerts == []


def test_the_state_learns_health_and_ends_from_the_change_alone():
    snap = ClusterBuilder(NOW).node("n1").node("n2", state="down").build()
    st = SchedulerState(cfg=cfg(), estimator=Estimator.from_config(cfg()), guard=CrashGuard(0, 0))
    st.nodes, st.news = snap.nodes, False
    st.apply(Change(health=[("n1", "frozen"), ("n2", "frozen")]), False, st.usage)
    assert [(n.state, n.reason) for n in st.nodes] == [("unhealthy", "frozen"), ("down", "frozen")]
    assert not st.news and not st.freed
    st.apply(Change(health=[("n1", None)]), False, st.usage)
    assert [(n.state, n.reason) for n in st.nodes][0] == ("up", "") and st.news
    ended = ClusterBuilder(NOW).node("n1").running("n1").build().jobs[0]
    st.apply(Change(ended=ended), False, st.usage)
    assert st.freed


def test_the_state_learns_a_drain_and_a_resume_from_the_change():
    """Change.nodes into state.nodes as store/noderows.py would read them back (was a re-read of every node)."""
    snap = ClusterBuilder(NOW).node("n1").node("n2", state="down").node("n3").build()
    st = SchedulerState(cfg=cfg(), estimator=Estimator.from_config(cfg()), guard=CrashGuard(0, 0))
    st.nodes = snap.nodes[:2] + (dataclasses.replace(snap.nodes[2], state="unhealthy", reason="frozen"),)
    st.apply(Change(nodes=[("n1", "drain"), ("n2", "drain"), ("n3", "drain")]), False, st.usage)
    assert [n.state for n in st.nodes] == ["drain", "down", "drain"]
    st.apply(Change(nodes=[("n1", None), ("n3", None)]), False, st.usage)
    assert [n.state for n in st.nodes] == ["up", "down", "unhealthy"]


def test_the_crash_guard_counts_an_end_when_its_change_is_committed_not_when_it_is_decided():
    """attempt.guarded asks CrashGuard.count (nothing counted); state.apply records the end: an event
    decided but never committed (its commit refused, redelivered later) is counted once, not twice."""
    guard = CrashGuard(2, 600)
    snap = ClusterBuilder(NOW).node("n1").running("n1").running("n1").build()
    ends = [dataclasses.replace(j, attempts=(dataclasses.replace(j.current, end_time=NOW, outcome="exit"),))
            for j in snap.jobs]
    for _ in range(3):      # decided again and again: counts nothing
        assert attempt.guarded(Change(jobs=[ends[0]], ended=ends[0]), {}, guard, NOW).alerts == []
    st = SchedulerState(cfg=cfg(), estimator=Estimator.from_config(cfg()), guard=guard)
    st.apply(Change(jobs=[ends[0]], ended=ends[0]), False, st.usage)
    tripped = attempt.guarded(Change(jobs=[ends[1]], ended=ends[1]), {}, guard, NOW)
    assert [a["kind"] for a in tripped.alerts] == ["crash_cascade"]
