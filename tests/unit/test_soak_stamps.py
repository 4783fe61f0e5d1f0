"""bench/soak.py's issue-35 checks over the jobs' own stamps (pure: synthetic stamps in, verdicts out)."""

from labq.scheduler.jobs import states
from labq.scheduler.jobs.model import Job
from tests.harness import bench_module


def _soak():
    return bench_module("soak", "soak_for_stamps")


SOAK = _soak()
BASE = {"lost": [], "double_runs": [], "preempted_unasked": [], "above_commitment": [], "drained": True,
        "charges_equal_attempts": True, "within_limits": True, "max_preemptions_per_job": 0, "max_preemptions": 3,
        "ledger_verify": {"rc": 0}}


def write(tmp_path, name, lines):
    p = tmp_path / name
    p.write_text("".join(f"{line}\n" for line in lines))
    return str(p)


def job(jid, state=states.COMPLETED):
    return Job(id=jid, user="u", account="a", state=state)


def test_clean_stamps_pass_and_each_violation_is_named(tmp_path):
    clean = write(tmp_path, "1", ["start 0 100.0 11", "alive 0 101.0 11", "start 1 103.0 12", "alive 1 104.0 12",
                                  "end 1 105.0 12"])
    overlap = write(tmp_path, "2", ["start 0 100.0 21", "alive 0 104.0 21", "start 1 103.0 22", "end 1 106.0 22"])
    late = write(tmp_path, "3", ["start 0 201.0 31", "end 0 203.0 31"])          # the agent died at 200, back at 205
    rerun = write(tmp_path, "4", ["start 0 100.0 41", "end 0 101.0 41", "start 1 110.0 42", "end 1 111.0 42"])
    unrecorded = write(tmp_path, "5", ["start 0 100.0 51", "end 0 101.0 51"])
    # the agent stopped at 296, its lease lapsed at 300, SIGCONT at 310: a start at 306 is one too many
    frozen = write(tmp_path, "6", ["start 0 306.0 61", "end 0 307.0 61"])
    lives = {i: SOAK._lives(p) for i, p in zip(range(1, 7), (clean, overlap, late, rerun, unrecorded, frozen))}
    jobs = {i: job(i) for i in range(1, 5)} | {5: job(5, states.PENDING), 6: job(6)}
    got = SOAK.stamp_checks(lives, jobs, [(200.0, 205.0)], [(300.0, 310.0)])
    assert got == {"overlaps": [2], "started_after_agent_died": [3], "started_while_agent_frozen": [6],
                   "rerun_after_end": [4], "finished_not_completed": [5]}
    assert SOAK.failures({**BASE, **got}) == list(got)
    assert SOAK.failures({**BASE, **SOAK.stamp_checks({1: lives[1]}, jobs, [(200.0, 205.0)], [(300.0, 310.0)])}) == []
    # a start within the slack of the lease's lapse (the runner read a lease still held) is not one
    edge = {7: SOAK._lives(write(tmp_path, "7", ["start 0 300.2 71", "end 0 301.0 71"]))}
    assert SOAK.stamp_checks(edge, {7: job(7)}, [], [(300.0, 310.0)])["started_while_agent_frozen"] == []


def test_old_stamps_without_a_pid_still_parse(tmp_path):
    p = write(tmp_path, "1", ["start 0 100.0", "end 0 101.0"])
    assert SOAK._stamps(p) == [("start", 0, 100.0), ("end", 0, 101.0)]
    assert SOAK._lives(p) == {(0, 0): (100.0, 101.0, True)}


def gang(jid, *attempts, state=states.COMPLETED):
    """A 2-node job whose attempts are (start, end, node of rank 0, node of rank 1)."""
    from labq.scheduler.jobs.model import Attempt
    return Job(id=jid, user="u", account="a", state=state, nodes=2, gpus=1,
               attempts=tuple(Attempt(attempt=k + 1, node=n0, gpus=(), start_time=lo, end_time=hi,
                                      parts=((n0, ()), (n1, ())))
                              for k, (lo, hi, n0, n1) in enumerate(attempts)))


def test_a_gangs_parts_are_one_attempt_and_must_die_together(tmp_path):
    # attempt 0: rank 1 (on g3) dies at 101.0, rank 0 (on g2) stamps on to 101.5: within the bound;
    # attempt 1: both parts run and end
    together = write(tmp_path, "1", ["start 0 100.0 11 0 g2", "start 0 100.1 12 1 g3", "alive 0 101.0 12 1 g3",
                                     "alive 0 101.5 11 0 g2", "start 1 103.0 13 0 g2", "start 1 103.1 14 1 g3",
                                     "end 1 105.0 13 0 g2", "end 1 105.2 14 1 g3"])
    # rank 0 went on 3 s after rank 1 died; its stamps also outlive the attempt's billed end
    outlived = write(tmp_path, "2", ["start 0 100.0 21 0 g2", "start 0 100.1 22 1 g3", "alive 0 101.0 22 1 g3",
                                     "alive 0 104.0 21 0 g2"])
    lives = {1: SOAK._lives(together), 2: SOAK._lives(outlived)}
    places = {1: SOAK.where(together), 2: SOAK.where(outlived)}
    jobs = {1: gang(1, (99.9, 101.6, "g2", "g3"), (102.9, 105.3, "g2", "g3")),
            2: gang(2, (99.9, 101.2, "g2", "g3"), state=states.PENDING)}
    # the parts of one attempt overlap each other: not two attempts at once
    assert SOAK.stamp_checks(lives, jobs, [], [], places)["overlaps"] == []
    got = SOAK.gang_checks(lives, places, jobs)
    assert got["gang_parts_outlived"] == [[2, 0, 3.0]] and got["gangs_run"] == 3 and got["gang_attempts_broken"] == 2
    assert SOAK.billed_checks(lives, places, jobs) == {"ran_unbilled": [[2, 0, "g2"]], "billed_past_run": []}
    assert "gang_parts_outlived" in SOAK.failures({**BASE, **got})


def test_a_gang_part_that_died_while_redis_was_away_is_the_one_exception(tmp_path):
    """Its stop travels through Redis: the other part runs until its agent fences it (the node lease after
    Redis went away) or until Redis is back, whichever is first, then at most GANG_BOUND. Past that it is
    outlived like any other (the lead's 30-min soak, job 801: 1.78 s, Redis loading its AOF)."""
    excused = write(tmp_path, "3", ["start 0 100.0 31 0 g2", "start 0 100.1 32 1 g3", "alive 0 101.0 32 1 g3",
                                    "alive 0 103.5 31 0 g2"])
    too_long = write(tmp_path, "4", ["start 0 100.0 41 0 g2", "start 0 100.1 42 1 g3", "alive 0 101.0 42 1 g3",
                                     "alive 0 106.5 41 0 g2"])
    lives = {3: SOAK._lives(excused), 4: SOAK._lives(too_long)}
    places = {3: SOAK.where(excused), 4: SOAK.where(too_long)}
    jobs = {3: gang(3, (99.9, 103.6, "g2", "g3")), 4: gang(4, (99.9, 106.6, "g2", "g3"))}
    # Redis away from 100.9 to 110: the fence (lease 4 s) comes first, at 104.9
    got = SOAK.gang_checks(lives, places, jobs, [(100.9, 110.0)], 4.0)
    assert got["gang_parts_outlived_in_outage"] == [[3, 0, 2.5, 5.15], [4, 0, 5.5, 5.15]]
    assert got["gang_parts_outlived"] == [[4, 0, 5.5]]
    # no outage then: both are outlived
    assert [x[0] for x in SOAK.gang_checks(lives, places, jobs)["gang_parts_outlived"]] == [3, 4]


def test_a_gang_part_whose_runner_the_soak_stopped_may_outlive_its_peer_until_thawed(tmp_path):
    """The soak's own SIGSTOP of a part's runner holds the stop order back (the seed-72 soak, job 127:
    2.73 s with its runner stopped 3.1 s): that part must be gone GANG_BOUND after the SIGCONT. A freeze
    of another runner, or one over before the peer died, excuses nothing."""
    thawed = write(tmp_path, "5", ["start 0 100.0 51 0 g2", "start 0 100.1 52 1 g3", "alive 0 101.0 52 1 g3",
                                   "alive 0 103.7 51 0 g2"])
    too_long = write(tmp_path, "6", ["start 0 100.0 61 0 g2", "start 0 100.1 62 1 g3", "alive 0 101.0 62 1 g3",
                                     "alive 0 106.0 61 0 g2"])
    lives = {5: SOAK._lives(thawed), 6: SOAK._lives(too_long)}
    places = {5: SOAK.where(thawed), 6: SOAK.where(too_long)}
    jobs = {5: gang(5, (99.9, 103.8, "g2", "g3")), 6: gang(6, (99.9, 106.1, "g2", "g3"))}
    frozen = [(frozenset({51, 61}), 100.5, 103.6)]          # both survivors' runners stopped 100.5–103.6
    got = SOAK.gang_checks(lives, places, jobs, frozen=frozen)
    assert got["gang_parts_outlived_runner_frozen"] == [[5, 0, 2.7, 3.85]]
    assert got["gang_parts_outlived"] == [[6, 0, 5.0]]
    # the dead part's runner, not the survivor's, was stopped: no excuse
    assert [x[0] for x in SOAK.gang_checks(lives, places, jobs, frozen=[(frozenset({52, 62}), 100.5, 103.6)])
            ["gang_parts_outlived"]] == [5, 6]
    # a freeze that ended before the peer died: no excuse
    assert [x[0] for x in SOAK.gang_checks(lives, places, jobs, frozen=[(frozenset({51, 61}), 90.0, 95.0)])
            ["gang_parts_outlived"]] == [5, 6]


def test_an_agents_death_concerns_its_own_node_only(tmp_path):
    p = write(tmp_path, "1", ["start 0 201.0 31 0 g2", "end 0 203.0 31 0 g2"])
    lives, places, jobs = {1: SOAK._lives(p)}, {1: SOAK.where(p)}, {1: job(1)}
    assert SOAK.stamp_checks(lives, jobs, [("g3", 200.0, 205.0)], [], places)["started_after_agent_died"] == []
    assert SOAK.stamp_checks(lives, jobs, [("g2", 200.0, 205.0)], [], places)["started_after_agent_died"] == [1]


def test_an_attempt_billed_past_its_processes_last_stamp_is_named(tmp_path):
    from labq.scheduler.jobs.model import Attempt
    p = write(tmp_path, "1", ["start 0 100.0 11", "alive 0 101.0 11", "alive 0 102.0 11"])
    # billed to 108: the process's last stamp was 102 (dead by 103 at the latest)
    j = Job(id=1, user="u", account="a", state=states.COMPLETED,
            attempts=(Attempt(attempt=1, node="n", gpus=(), start_time=99.95, end_time=108.0),
                      Attempt(attempt=2, node="n", gpus=(), start_time=200.0, end_time=230.0)))
    got = SOAK.billed_checks({1: SOAK._lives(p)}, {1: SOAK.where(p)}, {1: j})
    assert got == {"ran_unbilled": [], "billed_past_run": [[1, 1, 0.05, 5.0], [1, 2, "no stamp", 30.0]]}
    assert "billed_past_run" in SOAK.failures({**BASE, **got})


def test_a_gang_attempt_with_one_part_done_and_one_killed_is_not_finished_work(tmp_path):
    # attempt 0: rank 0 ended, rank 1 was killed; attempt 1 ran both parts to their end
    p = write(tmp_path, "1", ["start 0 100.0 11 0 g2", "start 0 100.0 12 1 g3", "end 0 108.0 11 0 g2",
                              "alive 0 108.5 12 1 g3", "start 1 120.0 13 0 g2", "start 1 120.0 14 1 g3",
                              "end 1 128.0 13 0 g2", "end 1 128.1 14 1 g3"])
    got = SOAK.stamp_checks({1: SOAK._lives(p)}, {1: gang(1)}, [], [], {1: SOAK.where(p)})
    assert got["rerun_after_end"] == [] and got["finished_not_completed"] == []
    # both parts of attempt 0 ended, and it ran again: finished work re-run
    q = write(tmp_path, "2", ["start 0 100.0 21 0 g2", "start 0 100.0 22 1 g3", "end 0 108.0 21 0 g2",
                              "end 0 108.1 22 1 g3", "start 1 120.0 23 0 g2", "start 1 120.0 24 1 g3"])
    assert SOAK.stamp_checks({2: SOAK._lives(q)}, {2: gang(2)}, [], [], {2: SOAK.where(q)})["rerun_after_end"] == [2]
