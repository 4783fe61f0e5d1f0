"""A leader frozen (SIGSTOP) right after its tick checked the lease, and resumed once a successor has
recovered and leads (issue 35, the chaos soak's scheduler_stop): the rest of its tick takes nothing.

Before, its intake LMOVEd the requests that came meanwhile into `taken` and read the node events
into the group's pending entries, unfenced; its commit then failed on the lease, and the successor
never looked there again until its own recovery: requests unanswered (the client gave up), a
finished job's result unread (its attempt later declared lost, and finished work re-run)."""
import contextlib

from labq.scheduler.daemon.loop import Scheduler
from labq.scheduler.errors import StalePlanError
from labq.scheduler.jobs import states
from labq.scheduler.store.agentside import AgentStore
from tests.harness import BODY, CFG, FROZEN, K, job, one_admitted, reply, submit, woke


def test_a_leader_resumed_after_its_successor_recovered_leaves_no_request_or_event_behind(conns):
    r, s1, now = one_admitted(conns)
    assert job(r, 1).state == states.RUNNING
    # s1 is frozen just past its tick's lease check; its lease lapses and s2 recovers and leads
    r.delete(K.leader)
    s2 = Scheduler(r, CFG, me="s2", clock=FROZEN)
    assert s2.tick(now + 10)
    # meanwhile a request and the job's end arrive
    submit(r, "alice", BODY, "b")
    agent = AgentStore(r, K)
    agent.post("started", 1, 1, "n1", {"pid": 123, "start_time": now + 1})
    agent.post("finished", 1, 1, "n1", {"outcome": "completed", "exit_code": 0, "start_time": now + 1,
                                        "end_time": now + 11})
    # s1 resumes where it stopped: the tick's intake, its lease already checked
    with contextlib.suppress(StalePlanError):
        s1.inboxes.intake(now + 11, pending=False)
    s2.tick(now + 12, woke(r))
    assert reply(r, "b")["job_id"] == 2
    j = job(r, 1)
    assert j.state == states.COMPLETED and [a.outcome for a in j.attempts] == ["completed"]
