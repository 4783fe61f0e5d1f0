"""What an attempt is charged (issue 35): its process's run, from the start to the end the node
measured, never above (time limit + kill_wait) × rate, nothing when no process started. Pure:
ledger.run_span and transitions.finished / node_failed, no Redis."""
import pytest

from labq.scheduler import units
from labq.scheduler.daemon import transitions as tr
from labq.scheduler.jobs.model import Job
from labq.scheduler.jobs.plan import Place
from labq.scheduler.money import balance, ledger
from labq.scheduler.units import MICRO
from tests.harness import cfg

# $120 per GPU-hour: 1/30 of a dollar a second; (180 s limit + 30 s kill_wait) = $7.
RATE = 120 * MICRO
SAFE = cfg("[rates]\ngpu_hour = 120.0\n[[budgets]]\nname = 'b'\nlimit = 10.0\n")
FORECAST = cfg("[scheduler]\nbudget_mode = 'forecast'\n[rates]\ngpu_hour = 120.0\n[[budgets]]\nname = 'b'\n"
               "limit = 10.0\n")
T0 = 1_000_000.0


def admitted(c, time_limit=180, commit=7 * MICRO) -> Job:
    job = Job(id=7, user="alice", account="default", argv=("true",), gpus=1, time_limit=time_limit, budget="b")
    return tr.admit(job, Place(7, "n", ("GPU-0",), (("b", commit),), (("b", RATE),), RATE), T0)


def test_the_span_is_the_process_run_bounded_by_our_clock_and_the_ceiling():
    assert ledger.run_span(T0 + 2, T0 + 62, T0, T0 + 70, 210) == (T0 + 2, T0 + 62)
    assert ledger.run_span(None, T0 + 62, T0, T0 + 70, 210) is None            # no process: nothing
    assert ledger.run_span(T0 - 5, T0 + 60, T0, T0 + 70, 210) == (T0, T0 + 60)  # a node clock behind ours
    assert ledger.run_span(T0 + 2, T0 + 90, T0, T0 + 70, 210) == (T0 + 2, T0 + 70)  # one ahead of ours
    assert ledger.run_span(T0 + 1, T0 + 213.7, T0, T0 + 300, 210) == (T0 + 1, T0 + 211)
    assert ledger.run_span(T0 + 1, T0 + 5000, T0, T0 + 9000, None) == (T0 + 1, T0 + 5000)  # no time limit
    assert ledger.ceiling_seconds(admitted(SAFE), SAFE) == 210
    assert ledger.ceiling_seconds(admitted(SAFE, time_limit=0), SAFE) is None


@pytest.mark.parametrize("c", [SAFE, FORECAST], ids=["safe", "forecast"])
def test_start_latency_is_not_billed(c):
    # Dispatched at T0, the process started 0.04 s later and ran 60 s: $2.00, not $2.0013.
    j = tr.started(admitted(c), 1, {"pid": 9, "start_time": T0 + 0.04})
    new, charges = tr.finished(j, 1, {"outcome": "completed", "exit_code": 0, "end_time": T0 + 60.04}, T0 + 61, c)
    assert [(ch.key, ch.amount) for ch in charges] == [("7.1", 2 * MICRO)]
    assert new.attempts[0].cost == 2 * MICRO and new.attempts[0].charges == (("b", 2 * MICRO),)
    assert new.attempts[0].end_time == T0 + 60.04                     # the record keeps the real end


def test_the_start_in_the_finished_event_counts_when_started_was_lost():
    new, charges = tr.finished(admitted(SAFE), 1, {"outcome": "completed", "exit_code": 0, "start_time": T0 + 3,
                                                   "end_time": T0 + 63}, T0 + 64, SAFE)
    assert charges[0].amount == 2 * MICRO and new.attempts[0].start_time == T0 + 3


@pytest.mark.parametrize("c", [SAFE, FORECAST], ids=["safe", "forecast"])
def test_an_attempt_is_never_billed_past_its_limit_plus_kill_wait(c):
    # `-t 3 --signal USR1@120`: the process ran 212.7 s against a 210 s commitment (late reap).
    j = tr.started(admitted(c, commit=7 * MICRO if c is SAFE else 2 * MICRO), 1, {"start_time": T0 + 1})
    new, charges = tr.finished(j, 1, {"outcome": "timeout", "exit_code": -9, "end_time": T0 + 213.7}, T0 + 300, c)
    assert sum(ch.amount for ch in charges) == 7 * MICRO == units.accrue(RATE, 210)
    assert new.attempts[0].cost == 7 * MICRO
    assert new.attempts[0].end_time == T0 + 213.7


def test_an_attempt_that_never_started_costs_nothing():
    # 10 s allocated, the runner could not start the process: no charge, no cost, no ledger entry.
    new, charges = tr.finished(admitted(SAFE), 1, {"outcome": "node_failure", "start_time": None,
                                                   "end_time": T0 + 10}, T0 + 11, SAFE)
    assert charges == () and new.attempts[0].cost == 0 and new.attempts[0].charges == ()
    lost, charges = tr.node_failed(admitted(SAFE), T0 + 10, T0 + 60, SAFE)
    assert charges == () and lost.attempts[0].cost == 0


def test_a_late_end_after_an_outage_is_billed_as_the_process_ran():
    # Redis was away for 40 s as the job ended: the event arrives late, the charge is the run's.
    j = tr.started(admitted(SAFE), 1, {"start_time": T0 + 1})
    new, charges = tr.finished(j, 1, {"outcome": "completed", "exit_code": 0, "end_time": T0 + 31}, T0 + 71, SAFE)
    assert charges[0].amount == MICRO and new.attempts[0].end_time == T0 + 31


def test_what_a_running_attempt_has_accrued_counts_from_its_process_start():
    j = admitted(SAFE)
    assert balance.accrued(j, "b", T0 + 30) == MICRO                 # start not known yet: since dispatch
    j = tr.started(j, 1, {"start_time": T0 + 3})
    assert balance.accrued(j, "b", T0 + 33) == MICRO                 # 30 s of its process
    assert balance.outstanding(j, "b", T0 + 33) == 6 * MICRO
    assert balance.in_span(j, "b", T0 + 33, (T0, T0 + 120)) == (MICRO, 2_900_000)   # held: to T0 + 120 from its start
