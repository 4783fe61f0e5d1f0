"""The plan applier (scheduler/daemon/applier.py): a plan is re-checked against the state it is applied to;
what no longer holds is rejected and reported, the rest applied."""
from dataclasses import replace

from labq.scheduler import policy
from labq.scheduler.daemon import transitions as tr
from labq.scheduler.daemon.applier import apply_plan
from labq.scheduler.jobs import codes, states
from labq.scheduler.jobs.plan import Cancel, Expire, Pending, Pendings, Place, Plan, Preempt
from labq.scheduler.policy import capacity
from tests.harness import ClusterBuilder, G, cfg

NOW = 1_000_000.0


def state(snap):
    jobs = {j.id: j for j in snap.jobs}
    return jobs, snap.nodes


def place(jid, node="n", gpus=("GPU-n-0",)):
    return Place(jid, node, gpus, (), (), 0)


def test_a_fresh_plan_applies_whole_and_admits_as_the_transitions_do():
    snap = ClusterBuilder(NOW).node("n", gpus=2).job(gpus=1).job(gpus=1).job(gpus=1).build()
    p = policy.plan(snap, cfg())
    jobs, nodes = state(snap)
    done = apply_plan(p, jobs, jobs, nodes, NOW)
    assert done.rejected == ()
    assert [j.id for j in done.started] == [1, 2]
    assert done.started[0] == tr.admit(jobs[1], p.places[0], NOW)
    assert {u for j in done.started for u in j.gpu_uuids} == {"GPU-n-0", "GPU-n-1"}
    assert [j.id for j in done.pended] == [3] and done.pended[0].reason == p.pending[0].reason
    assert done.changed == done.started


def test_a_placement_on_a_gpu_taken_since_the_plan_is_rejected_and_the_rest_applied():
    snap = ClusterBuilder(NOW).node("n", gpus=2).running("n", gpus=1).job(gpus=1).job(gpus=1).build()
    jobs, nodes = state(snap)
    held = jobs[1].gpu_uuids[0]
    stale = Plan(places=(place(2, gpus=(held,)), place(3, gpus=("GPU-n-1",))))
    done = apply_plan(stale, jobs, jobs, nodes, NOW)
    assert [j.id for j in done.started] == [3]
    assert [(r.decision.job_id, r.why) for r in done.rejected] == [(2, f"job 2 on n: GPU {held} is not free")]


def test_two_placements_on_one_gpu_in_one_plan_keep_only_the_first():
    snap = ClusterBuilder(NOW).node("n", gpus=1).job(gpus=1).job(gpus=1).build()
    jobs, nodes = state(snap)
    done = apply_plan(Plan(places=(place(1), place(2))), jobs, jobs, nodes, NOW)
    assert [j.id for j in done.started] == [1]
    assert [r.decision.job_id for r in done.rejected] == [2]


def test_no_room_a_node_down_a_wrong_model_or_a_held_job_are_rejected():
    b = (ClusterBuilder(NOW).node("n", gpus=2, cpus=4, mem=8 * G).node("gone", gpus=1, lease=-1.0)
         .job(gpus=1, cpus=8).job(gpus=1).job(gpus=1, gpu_type="a100").job(gpus=1, held=True).job(gpus=2))
    jobs, nodes = state(b.build())
    p = Plan(places=(place(1), place(2, node="gone", gpus=("GPU-gone-0",)), place(3), place(4),
                     place(5, gpus=("GPU-n-0",))))
    done = apply_plan(p, jobs, jobs, nodes, NOW)
    assert done.started == ()
    assert [r.why for r in done.rejected] == [
        f"job 1 on n: needs 8 CPUs and 0 MB, 4 and {8 * G} free",
        "job 2 on gone: the node is not up",
        "job 3 on n: GPU GPU-n-0 is a fake, not a a100",
        "job 4 is held",
        "job 5 on n: names 1 GPUs for a job of 2",
    ]


def test_decisions_about_jobs_that_are_no_longer_pending_are_rejected():
    snap = ClusterBuilder(NOW).node("n", gpus=2).running("n", gpus=1).job(gpus=1).build()
    jobs, nodes = state(snap)
    jobs[2] = tr.end_pending(jobs[2], states.CANCELLED, "cancelled by alice", NOW - 1)
    p = Plan(places=(place(1, gpus=("GPU-n-1",)),), expires=(Expire(2, "waited too long"),),
             pending=(Pending(1, states.PRIORITY, ""), Pending(9, states.PRIORITY, "")))
    done = apply_plan(p, jobs, jobs, nodes, NOW)
    assert (done.started, done.expired, done.pended) == ((), (), ())
    assert [r.why for r in done.rejected] == ["job 1 is not pending (R)", "job 2 is not pending (CA)",
                                              "job 1 is not pending (R)", "job 9 is not pending"]


def test_one_job_changes_once_per_plan():
    snap = ClusterBuilder(NOW).node("n", gpus=1).job(gpus=1).build()
    jobs, nodes = state(snap)
    done = apply_plan(Plan(places=(place(1),), expires=(Expire(1, "late"),)), jobs, jobs, nodes, NOW)
    assert [j.state for j in done.started] == [states.RUNNING] and done.expired == ()
    assert [r.why for r in done.rejected] == ["job 1 was already changed by this plan"]


def test_stops_need_a_running_job_and_give_their_controls():
    snap = (ClusterBuilder(NOW).node("n", gpus=4).running("n", gpus=1).running("n", gpus=1)
            .running("n", gpus=1).running("n", gpus=1).build())
    jobs, nodes = state(snap)
    jobs[3] = tr.preempting(jobs[3], None, "earlier", NOW - 5)
    jobs[4] = replace(jobs[4], cancel_requested=True)
    p = Plan(preempts=(Preempt(1, 7, 30, "for job 7"), Preempt(3, 7, 30, "again")),
             cancels=(Cancel(2, "budget spent"), Cancel(4, "again")))
    done = apply_plan(p, jobs, jobs, nodes, NOW)
    assert [(j.id, j.state, j.cancel_requested) for j in done.stopping] == [(1, states.PREEMPTING, False),
                                                                            (2, states.RUNNING, True)]
    assert done.controls == ((1, "preempt:30"), (2, "cancel")) and done.preempts == p.preempts[:1]
    assert [r.why for r in done.rejected] == ["job 3 is not running (PR)", "job 4 is already being cancelled"]


def test_a_reason_makes_a_record_only_when_it_changed_and_without_reasons_only_an_earmark_does():
    snap = ClusterBuilder(NOW).node("n", gpus=1).job(gpus=1).job(gpus=1).job(gpus=1).build()
    jobs, nodes = state(snap)
    jobs[1] = tr.pend(jobs[1], states.RESOURCES, "no room")
    p = Plan(pending=(Pending(1, states.RESOURCES, "no room"), Pending(2, states.PRIORITY, "behind 1"),
                      Pending(3, states.PREEMPTING_FOR, "waits", "n", ("GPU-n-0",))))
    shown = apply_plan(p, jobs, jobs, nodes, NOW)
    assert [(j.id, j.reason) for j in shown.pended] == [(2, states.PRIORITY), (3, states.PREEMPTING_FOR)]
    kept = apply_plan(p, jobs, jobs, nodes, NOW, reasons=False)
    assert [(j.id, j.reason, j.earmark) for j in kept.pended] == [(3, states.NONE, "n")]


def test_a_resources_record_stays_where_the_pass_says_higher_priority_jobs_took_the_room():
    """Issue 41: a job waiting on Resources whose pass found room at its start, taken by higher-priority
    jobs, keeps its record (both are true after the pass), with the same expected start; any other
    change of reason or start is written, with reasons or without."""
    snap = ClusterBuilder(NOW).node("n", gpus=1).job(gpus=1).job(gpus=1).job(gpus=1).job(gpus=1).job(gpus=1).build()
    jobs, nodes = state(snap)
    took, at = "higher-priority jobs took the free resources in this pass", "; expected to start at 12:00 on n"
    jobs[1] = tr.pend(jobs[1], states.RESOURCES, "no up node has 1xGPU, 1 CPUs, 0 B and a slot free")
    jobs[2] = tr.pend(jobs[2], states.RESOURCES, "no up node has 1xGPU, 1 CPUs, 0 B and a slot free" + at)
    jobs[3] = tr.pend(jobs[3], states.RESOURCES, "no up node has 1xGPU, 1 CPUs, 0 B and a slot free")
    jobs[4] = tr.pend(jobs[4], states.PRIORITY, took)
    jobs[5] = tr.pend(jobs[5], states.RESOURCES, "no up node has 1xGPU, 1 CPUs, 0 B and a slot free")
    p = Plan(pending=(Pending(1, states.PRIORITY, took), Pending(2, states.PRIORITY, took + at),
                      Pending(3, states.PRIORITY, took + at), Pending(4, states.RESOURCES, "no up node has it free"),
                      Pending(5, states.PRIORITY, codes.BEHIND_BLOCKER)))
    done = apply_plan(p, jobs, jobs, nodes, NOW)
    assert [(j.id, j.reason, j.detail) for j in done.pended] == [
        (3, states.PRIORITY, took + at), (4, states.RESOURCES, "no up node has it free"),
        (5, states.PRIORITY, codes.BEHIND_BLOCKER)]
    # The same verdicts as one run each (plan.Pendings, the class walk's): the same records.
    runs = Plan(pending=Pendings([], [((1, 2), (states.PRIORITY, took + at, "", ())),
                                             ((3,), (states.PRIORITY, took, "", ()))]))
    assert [j.id for j in apply_plan(runs, jobs, jobs, nodes, NOW).pended] == [1]


def test_the_room_kept_by_the_caller_checks_a_plan_as_the_running_jobs_do():
    """`free` (the replay's Standing) stands for summing the running jobs: the same verdicts, and
    what it says is taken, or a node it leaves out, is refused though the records say otherwise."""
    b = (ClusterBuilder(NOW).node("n", gpus=2, cpus=4, mem=8 * G).node("gone", gpus=1, lease=-1.0)
         .running("n", gpus=1).job(gpus=1).job(gpus=1).job(gpus=1, cpus=8))
    jobs, nodes = state(b.build())
    held = jobs[1].gpu_uuids[0]
    p = Plan(places=(place(2, gpus=(held,)), place(3, gpus=("GPU-n-1",)), place(4, gpus=("GPU-n-0",)),
                     place(4, node="gone", gpus=("GPU-gone-0",))))
    summed = apply_plan(p, jobs, jobs, nodes, NOW)
    free = capacity.free_capacity(nodes, [j for j in jobs.values() if j.state == states.RUNNING], NOW)
    kept = apply_plan(p, jobs, jobs, nodes, NOW, free=free)
    assert (kept.started, [r.why for r in kept.rejected]) == (summed.started, [r.why for r in summed.rejected])
    assert [j.id for j in kept.started] == [3] and len(kept.rejected) == 3
    assert free["n"].gpus == [g for g in nodes[0].gpus if g.uuid != held], "the caller's room is not occupied"
    # The caller's room, not the records, decides: it says GPU-n-1 is taken and n alone is up.
    taken = {"n": replace(free["n"].copy(), gpus=[g for g in free["n"].gpus if g.uuid != "GPU-n-1"])}
    assert [r.why for r in apply_plan(Plan(places=(place(3, gpus=("GPU-n-1",)),)), jobs, jobs, nodes, NOW,
                                      free=taken).rejected] == ["job 3 on n: GPU GPU-n-1 is not free"]
    assert [r.why for r in apply_plan(Plan(places=(place(3, gpus=("GPU-n-1",)),)), jobs, jobs, nodes, NOW,
                                      free={}).rejected] == ["job 3 on n: the node is not up"]
