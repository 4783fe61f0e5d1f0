"""Job record transitions: pure, Job in, Job out."""
from labq.scheduler.daemon import transitions as tr
from labq.scheduler.jobs import states
from labq.scheduler.jobs.plan import Place
from tests.harness import SWEEP_TOML, ClusterBuilder, cfg

CFG = cfg(SWEEP_TOML)


def admitted(now=1000.0, **kw):
    job = ClusterBuilder().node("n", gpus=4).job(gpus=1, account="eta", **kw).build().jobs[0]
    return tr.admit(job, Place(job.id, "n", ("GPU-n-0",), (("eta-sweep", 4_000_000),), (("eta-sweep", 2_000_000),),
                               2_000_000), now)


def test_lost_work_counts_from_the_last_checkpoint():
    j = tr.started(admitted(), 1, {"start_time": 1001.0})
    new, charges = tr.finished(j, 1, {"outcome": "timeout", "end_time": 1601.0, "last_checkpoint": 1501.0},
                               2000.0, CFG)
    a = new.attempts[0]
    assert new.state == states.TIMEOUT and a.lost_work_s == 100.0 and a.last_checkpoint == 1501.0
    assert charges[0].amount == 2_000_000 * 600 // 3600   # billed from the process's start at 1001 to 1601


def test_a_completed_run_loses_nothing_and_no_checkpoint_means_all_is_lost():
    j = tr.started(admitted(), 1, {"start_time": 1001.0})
    done, _ = tr.finished(j, 1, {"outcome": "completed", "exit_code": 0, "end_time": 1100.0}, 2000.0, CFG)
    assert done.attempts[0].lost_work_s == 0.0
    cut, _ = tr.finished(j, 1, {"outcome": "cancelled", "end_time": 1101.0}, 2000.0, CFG)
    assert cut.attempts[0].lost_work_s == 100.0


def test_checkpoint_exit_requeues_with_the_same_id():
    j = tr.started(admitted(), 1, {"start_time": 1001.0})
    new, charges = tr.finished(j, 1, {"outcome": "checkpoint_exit", "exit_code": 85, "end_time": 1200.0}, 2000.0, CFG)
    assert new.state == states.PENDING and new.restart_count == 1 and new.id == j.id and new.commit == ()
    assert len(new.attempts) == 1 and charges
