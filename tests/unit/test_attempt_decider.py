"""The node-event decider (scheduler/daemon/attempt.py) on its own: a job table and an event in, one
Change out, no Redis and no daemon (the daemon's side is tests/contract/test_daemon.py and
test_gang_daemon.py)."""
from labq.scheduler.daemon import attempt
from labq.scheduler.daemon.decode import Event
from labq.scheduler.jobs import states
from tests.harness import ClusterBuilder, cfg

NOW = 1_000_000.0


def _table(b: ClusterBuilder) -> dict:
    return {j.id: j for j in b.build().jobs}


def test_a_finished_event_from_its_node_ends_the_attempt_with_its_charges():
    jobs = _table(ClusterBuilder(NOW).node("n1", gpus=1).running("n1", gpus=1, rates=(("default", 1),)))
    ev = Event("finished", 1, 1, "n1", {"outcome": "completed", "exit_code": 0, "end_time": NOW - 1})
    change = attempt.decide(jobs, "1-0", ev, "n1", NOW, cfg())
    assert [j.state for j in change.jobs] == [states.COMPLETED]
    assert change.ended is change.jobs[0] and change.controls == [] and change.alerts == []


def test_an_event_from_another_node_changes_nothing():
    jobs = _table(ClusterBuilder(NOW).node("n1", gpus=1).node("n2").running("n1", gpus=1))
    ev = Event("finished", 1, 1, "n2", {"outcome": "completed", "exit_code": 0})
    change = attempt.decide(jobs, "1-0", ev, "n2", NOW, cfg())
    assert change.jobs == [] and change.ended is None


def test_a_gang_part_that_completes_first_waits_for_the_others():
    jobs = _table(ClusterBuilder(NOW).node("a", gpus=1).node("b", gpus=1).running_gang(("a", "b"), gpus=1))
    ev = Event("finished", 1, 1, "b", {"outcome": "completed", "exit_code": 0, "usage": {"cpu_s": 3}})
    change = attempt.decide(jobs, "1-0", ev, "b", NOW, cfg())
    assert [j.state for j in change.jobs] == [states.RUNNING] and change.ended is None
    assert change.jobs[0].current.usage["nodes"] == {"b": {"cpu_s": 3}}


def test_a_gang_part_that_fails_stops_the_other_parts_and_the_attempt_ends_with_the_last():
    """Shared fate without overcommit: the failure stops the others at once, but the attempt (and its
    GPUs) ends only with the last part, as the failed part's end (its exit status), billed to the last end."""
    jobs = _table(ClusterBuilder(NOW).node("a", gpus=1).node("b", gpus=1).running_gang(("a", "b"), gpus=1))
    first = attempt.decide(jobs, "1-0", Event("finished", 1, 1, "b", {"outcome": "exit", "exit_code": 3,
                                                                     "end_time": NOW - 5}), "b", NOW, cfg())
    assert first.ended is None and [j.state for j in first.jobs] == [states.RUNNING]
    assert first.controls == [(1, attempt.gang_stop(1))]
    last = attempt.decide({1: first.jobs[0]}, "1-1", Event("finished", 1, 1, "a", {"outcome": "cancelled",
                          "exit_code": -9, "end_time": NOW - 1}), "a", NOW, cfg())
    assert last.ended is not None and last.ended.state == states.FAILED and last.ended.exit_code == 3
    assert last.ended.attempts[0].outcome == "exit" and last.ended.attempts[0].end_time == NOW - 1
    assert last.controls == []


def test_a_gang_part_that_never_started_bills_nothing_past_its_peers_end():
    """A part cancelled or fenced before its process started (its runner posts ran = false) ends
    later than the part that ran: the attempt is billed to the end of the part that ran (the soak,
    seed 71: jobs 202, 208 and 525 billed 2.2-12.9 s past their last stamp)."""
    b = ClusterBuilder(NOW).node("a", gpus=1).node("b", gpus=1).running_gang(("a", "b"), gpus=1,
                                                                            rates=(("default", 1),))
    jobs = _table(b)
    first = attempt.decide(jobs, "1-0", Event("finished", 1, 1, "a", {"outcome": "node_failure", "ran": True,
                           "end_time": NOW - 20}), "a", NOW, cfg())
    last = attempt.decide({1: first.jobs[0]}, "1-1", Event("finished", 1, 1, "b", {
        "outcome": "node_failure", "ran": False, "end_time": NOW - 5, "message": "not started"}), "b", NOW, cfg())
    assert last.ended is not None and last.ended.attempts[0].end_time == NOW - 20
    assert last.ended.attempts[0].usage.get("ends") is None, "kept only while the attempt runs"


def test_a_lost_part_waits_for_the_others_then_ends_the_attempt_node_failure():
    jobs = _table(ClusterBuilder(NOW).node("a", gpus=1).node("b", gpus=1).running_gang(("a", "b"), gpus=1))
    held, charges = attempt.part_lost(jobs[1], "b", NOW - 30, NOW, cfg())
    assert held.state == states.RUNNING and held.current.end_time is None and charges == ()
    last = attempt.decide({1: held}, "1-0", Event("finished", 1, 1, "a", {"outcome": "cancelled", "exit_code": -9,
                          "end_time": NOW + 1}), "a", NOW + 2, cfg())
    assert last.ended is not None and last.ended.state == states.PENDING and last.ended.restart_count == 1
    assert last.ended.attempts[0].outcome == "node_failure" and last.ended.attempts[0].end_time == NOW + 1


def test_a_preempted_gangs_attempt_ends_only_when_its_last_part_has_ended():
    """Each part keeps its grace: ended at the first part's end, the job was requeued and started again
    while its other part still ran (the chaos soak's job 191, two attempts alive at once)."""
    import dataclasses
    jobs = _table(ClusterBuilder(NOW).node("a", gpus=1).node("b", gpus=1).running_gang(("a", "b"), gpus=1))
    jobs = {i: dataclasses.replace(j, state=states.PREEMPTING) for i, j in jobs.items()}
    first = attempt.decide(jobs, "1-0", Event("finished", 1, 1, "b", {"outcome": "preempted", "exit_code": 143}),
                           "b", NOW, cfg())
    assert first.ended is None and first.controls == [] and [j.state for j in first.jobs] == [states.PREEMPTING]
    last = attempt.decide({1: first.jobs[0]}, "1-1", Event("finished", 1, 1, "a", {"outcome": "completed",
                          "exit_code": 0}), "a", NOW + 2, cfg())
    assert last.ended is not None and last.ended.state == states.PENDING
    assert last.ended.attempts[0].outcome == "preempted"


def test_a_cancelled_gangs_attempt_ends_only_when_its_last_part_has_ended():
    """`labq del` of a running gang: each part keeps its kill grace, so the attempt holds its GPUs until
    the last part has ended and is billed to that end. Ended at the first part's end, its GPUs were
    free (placed again) while the other part still ran its grace: an overcommit."""
    import dataclasses
    jobs = _table(ClusterBuilder(NOW).node("a", gpus=1).node("b", gpus=1).running_gang(("a", "b"), gpus=1))
    jobs = {i: dataclasses.replace(j, cancel_requested=True) for i, j in jobs.items()}
    first = attempt.decide(jobs, "1-0", Event("finished", 1, 1, "b", {"outcome": "cancelled", "exit_code": -15,
                           "end_time": NOW}), "b", NOW, cfg())
    assert first.ended is None and first.controls == [] and first.charges == []
    assert [j.state for j in first.jobs] == [states.RUNNING] and first.jobs[0].current.end_time is None
    last = attempt.decide({1: first.jobs[0]}, "1-1", Event("finished", 1, 1, "a", {"outcome": "cancelled",
                          "exit_code": -9, "end_time": NOW + 2}), "a", NOW + 2, cfg())
    assert last.ended is not None and last.ended.state == states.CANCELLED and last.controls == []
    assert last.ended.attempts[0].end_time == NOW + 2 and last.ended.attempts[0].outcome == "cancelled"
    assert set(last.ended.attempts[0].usage["nodes"]) == {"a", "b"}


def test_a_redelivered_finished_event_changes_nothing():
    jobs = _table(ClusterBuilder(NOW).node("n1").running("n1"))
    ev = Event("finished", 1, 1, "n1", {"outcome": "exit", "exit_code": 1})
    ended = attempt.decide(jobs, "1-0", ev, "n1", NOW, cfg()).ended
    again = attempt.decide({1: ended}, "1-0", ev, "n1", NOW, cfg())
    assert again.jobs == [] and again.ended is None


# -- attempts lost with their node or their runner (attempt.lost) ---------------------------------
def _lost(b: ClusterBuilder, beats, down_since=None, gangs=None, now=NOW):
    snap = b.build()
    on_node = [j for j in snap.jobs if j.state in states.ON_NODE]
    return attempt.lost(on_node, beats, gangs or {}, {n.name: n for n in snap.nodes}, down_since or {}, now, cfg())


def test_an_attempt_on_a_node_down_past_the_fence_margin_is_lost_and_charged_to_its_last_heartbeat():
    b = ClusterBuilder(NOW).node("n1", gpus=1, state="down").running("n1", gpus=1)
    later = NOW + 20      # the node last beat at NOW
    fenced = _lost(b, [(None, None, None)], {"n1": later - cfg().fence_margin + 1}, now=later)
    assert fenced.jobs == []          # its runners may still be killing it: not yet
    change = _lost(b, [(None, None, None)], {"n1": later - cfg().fence_margin}, now=later)
    [j] = change.jobs
    assert j.state == states.PENDING and j.attempts[0].outcome == "node_failure" and j.attempts[0].end_time == NOW
    assert change.controls == []


def test_a_silent_runner_on_a_live_node_is_lost_only_past_lease_and_margin():
    b = ClusterBuilder(NOW).node("n1").running("n1")
    quiet = cfg().node_lease + cfg().fence_margin
    assert _lost(b, [(NOW - quiet, None, None)]).jobs == []
    [j] = _lost(b, [(NOW - quiet - 1, None, None)]).jobs
    assert j.attempts[0].outcome == "node_failure" and j.attempts[0].end_time == NOW - quiet - 1
    assert _lost(b, [(None, None, NOW - quiet - 1)]).jobs != []      # claimed, never beat: silent from its claim
    assert _lost(b, [(None, None, None)]).jobs == []                 # never claimed: the unclaimed rule's


def test_a_gang_is_decided_by_the_shells_verdict_and_its_other_parts_are_stopped():
    b = ClusterBuilder(NOW).node("a", gpus=1).node("b", gpus=1).running_gang(("a", "b"), gpus=1)
    assert _lost(b, [(NOW, None, None)], gangs={1: None}).jobs == []
    # a part no runner took, while another part runs: that one is stopped and holds its GPUs until it ends
    held = _lost(b, [(NOW, None, None)], gangs={1: "b"})
    assert [j.state for j in held.jobs] == [states.RUNNING] and held.charges == []
    assert held.jobs[0].current.usage["nodes"]["b"]["outcome"] == "node_failure"
    assert held.controls == [(1, attempt.gang_stop(1))]
    # ... and when no part has started: withdrawn whole at once, uncounted, uncharged
    import dataclasses
    unstarted = ClusterBuilder(NOW).node("a", gpus=1).node("b", gpus=1).running_gang(("a", "b"), gpus=1)
    on_node = [j for j in unstarted.build().jobs if j.state in states.ON_NODE]
    on_node = [dataclasses.replace(j, attempts=j.attempts[:-1] + (dataclasses.replace(j.current, start_time=None),))
               for j in on_node]
    withdrawn = attempt.lost(on_node, [(None, None, None)], {1: "b"}, {}, {}, NOW, cfg())
    assert [j.state for j in withdrawn.jobs] == [states.PENDING] and withdrawn.charges == []
    assert withdrawn.jobs[0].restart_count == 0 and withdrawn.controls == [(1, attempt.gang_stop(1))]
    snap = b.build()
    failed = _lost(b, [(NOW, None, None)], gangs={1: (snap.jobs[0], ["charge"])})
    assert failed.jobs == [snap.jobs[0]] and failed.charges == ["charge"] and failed.controls == [(1, "stop:1")]
