"""The scheduler's state (scheduler/daemon/state.py) on its own: records in, the job table, the tally,
fair-share usage and what plan() sees out; no Redis and no daemon (the daemon's side, committing
through store/commit.py, is tests/contract/test_group_commit.py)."""
from dataclasses import replace

import pytest

from labq.scheduler.daemon import crashguard, transitions as tr
from labq.scheduler.daemon.change import Change, Unread
from labq.scheduler.daemon.state import SchedulerState
from labq.scheduler.jobs import states
from labq.scheduler.jobs.estimate import Estimator
from labq.scheduler.jobs.jobspec import expand
from tests.harness import ClusterBuilder, cfg

NOW = 1_000_000.0


def _state(b: ClusterBuilder) -> SchedulerState:
    c = cfg()
    st = SchedulerState(cfg=c, estimator=Estimator.from_config(c), guard=crashguard.CrashGuard.from_config(c))
    snap = b.build()
    st.loaded({j.id: j for j in snap.jobs}, seq=max((j.id for j in snap.jobs), default=0), rests={})
    st.nodes = snap.nodes
    return st


def test_an_ended_attempt_leaves_the_table_and_the_tally_and_adds_its_usage():
    st = _state(ClusterBuilder(NOW).node("n1", gpus=1).running("n1", gpus=1, account="eta").job(user="bob"))
    assert st.tally.on_node.keys() == {1} and st.tally.pending == 1
    done, _ = tr.finished(st.jobs[1], 1, {"outcome": "completed", "exit_code": 0, "end_time": NOW}, NOW, st.cfg)
    usage = st.usage_after([done], NOW)
    st.apply(Change(jobs=[done]), False, usage)
    assert st.jobs.keys() == {2} and st.tally.on_node == {} and st.tally.active_by_account["eta"] == 0
    assert st.usage["eta"][0] > 0 and st.usage["eta"][1] == NOW
    # The same end again (a redelivered event's record) counts nothing more.
    assert st.usage_after([done], NOW + 5) == st.usage


def test_a_new_arrays_tasks_are_taken_as_a_whole_and_counted_once():
    st = _state(ClusterBuilder(NOW).node("n1", gpus=1))
    template = ClusterBuilder(NOW).job(user="carol").jobs[0]
    tasks = expand(template, 1, list(range(5)))
    assert st.fresh_tasks(tasks, staged={}) and not st.fresh_tasks(tasks, staged={3: tasks[2]})
    st.apply(Change(jobs=tasks), True, st.usage)
    assert sorted(st.jobs) == [1, 2, 3, 4, 5] and st.tally.pending_by_user["carol"] == 5
    assert not st.fresh_tasks(tasks, staged={})      # known now: a second staging is record by record


def test_a_snapshot_sees_a_newer_checkpoint_file_and_the_ended_jobs_depended_on():
    b = ClusterBuilder(NOW).node("n1", gpus=1).running("n1", gpus=1).job(deps=(("afterok", (7,)),))
    st = _state(b)
    assert st.ended_wanted() == ([7], {})
    st.ended_found([7], [replace(b.jobs[0], id=7, state=states.COMPLETED)])
    assert st.ended_wanted() == ([], {}) and st.ended == {7: states.COMPLETED}
    st.file_checkpoints = {1: NOW - 10}
    snap = st.snapshot(NOW, {"b": 5}, tuple(sorted(st.ended.items())))
    assert {j.id: j for j in snap.jobs}[1].current.last_checkpoint == NOW - 10
    assert st.jobs[1].current.last_checkpoint is None      # the table keeps the record as committed
    assert snap.spent == (("b", 5),) and snap.ended == ((7, states.COMPLETED),)
    # No pending job depends on 7 any more: it is forgotten.
    st.apply(Change(jobs=[replace(st.jobs[2], state=states.CANCELLED)]), False, st.usage)
    assert st.ended_wanted() == ([], {}) and st.ended == {}


def test_a_handler_sees_the_ended_jobs_as_the_shell_would_and_changes_nothing():
    """ended_view (a handler's: `stat --start`, `sub --test-only`) reads the ended states kept, else the
    tick's read (Unread(ended=...) where it has none), and leaves the state as it was; what it says is
    what the shell's ended_wanted + ended_found would keep (issue 40 item 1)."""
    b = ClusterBuilder(NOW).node("n1", gpus=1).running("n1", gpus=1).job(deps=(("afterok", (7, 9)),))
    st = _state(b)
    probe = replace(st.jobs[2], id=50, deps=(("afternotok", (8,)),))
    with pytest.raises(Unread) as asked:
        st.ended_view(probe, {})
    assert asked.value.ended == [7, 8, 9] and not asked.value.ids and st.ended == {} and st.ended_shown == {}
    seven = replace(b.jobs[0], id=7, state=states.COMPLETED)
    eight = replace(b.jobs[0], id=8, state=states.FAILED, array_id=8, array_index=0)
    read = {7: seven, 8: eight, 9: None}
    view = st.ended_view(probe, read)
    assert view == (((7, states.COMPLETED), (8, states.FAILED), (9, "")), ((8, "8_0"),))
    assert st.ended == {} and st.ended_shown == {}              # nothing kept: the shell keeps (ended_wanted)
    missing, resting = st.ended_wanted(probe)
    st.ended_found(missing, [seven, eight])
    assert view == (tuple(sorted({**st.ended, **resting}.items())), tuple(sorted(st.ended_shown.items())))
    assert st.ended_view(probe, {}) == view                    # kept now: nothing more to read
