"""jobs/rest.py: a held array's tasks kept as one Rest are the tasks jobspec.expand would have made,
and taking some out leaves exactly the others (pure; no Redis)."""
from dataclasses import replace

from hypothesis import given, settings, strategies as st

from labq.scheduler.jobs import rest, states
from labq.scheduler.jobs.jobspec import expand
from labq.scheduler.jobs.model import Job

T = Job(id=0, user="alice", account="eta", argv=("python", "t.py"), held=True, reason=states.HELD)


def _rest(lo=1, hi=2000, step=1, first=100):
    indices = list(range(lo, hi + 1, step))
    jobs, made = rest.made(T, first, indices, None)
    assert jobs == [] and list(made) == [first]
    return made[first], expand(T, first, indices, None)


def test_its_tasks_are_the_tasks_expand_makes():
    r, tasks = _rest(lo=3, hi=6000, step=3)
    assert r.tasks() == list(tasks) and r.left == len(tasks) == r.count
    assert r.task(7) == tasks[7] and r.position_of_index(24) == 7 and r.position_of_index(25) is None


def test_a_small_array_stays_records_and_a_big_one_rests_held_or_not():
    """A big pending array rests too (issue 39 item 1: one record until its tasks start); before,
    only a held one did."""
    jobs, made = rest.made(T, 1, list(range(1, 11)), None)
    assert len(jobs) == 10 and made == {}
    jobs, made = rest.made(replace(T, held=False), 1, list(range(1, rest.REST_MIN + 1)), None)
    assert jobs == [] and made[1].left == rest.REST_MIN and not made[1].template.held


def _pending(first=100, n=2000):
    t = replace(T, held=False, reason=states.NONE, detail="")
    return rest.made(t, first, list(range(1, n + 1)), None)[1][first]


def test_a_pending_rest_keeps_a_window_of_its_first_tasks_as_records():
    r = _pending()
    left, made = rest.topped_up({100: r}, [], 5)
    assert [t.display_id for t in made] == [f"100_{i}" for i in range(1, 6)] and left[100].runs == ((5, 1999),)
    table = {t.id: t for t in made}
    assert rest.topped_up({100: left[100]}, table.values(), 5) == ({}, [])
    # two start (no longer pending), one is held on its own: two more made, the held one still counts
    table[100], table[101] = replace(made[0], state=states.RUNNING), replace(made[1], state=states.RUNNING)
    table[102] = replace(made[2], held=True)
    left2, more = rest.topped_up({100: left[100]}, table.values(), 5)
    assert [t.id for t in more] == [105, 106] and left2[100].runs == ((7, 1999),)
    # a task made a record out of order (del/hold A_i) does not stand for the ones before it
    beyond = r.task(1500)
    _, got = rest.topped_up({100: r.without([1500])}, [beyond], 3)
    assert [t.id for t in got] == [100, 101, 102]


def test_a_held_rest_keeps_no_window_and_a_pending_one_carries_its_windows_reason():
    held = rest.flipped(_pending(), True)
    assert held.template.held and held.template.reason == states.HELD
    assert rest.topped_up({100: held}, [], 5) == ({}, [])
    left, made = rest.topped_up({100: rest.flipped(held, False)}, [], 3)
    table = [replace(t, reason=states.RESOURCES, detail="no room") for t in made]
    got, more = rest.topped_up(left, table, 3)
    assert more == [] and (got[100].template.reason, got[100].template.detail) == (states.RESOURCES, "no room")
    assert got[100].runs == left[100].runs


def test_a_window_that_takes_every_task_leaves_no_rest():
    r = _pending(n=rest.REST_MIN)
    left, made = rest.topped_up({100: r}, [], rest.REST_MIN + 5)
    assert left == {100: None} and len(made) == rest.REST_MIN


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 1999), max_size=40), st.lists(st.integers(0, 1999), max_size=40))
def test_taking_tasks_out_leaves_the_others(first, then):
    r, _ = _rest()
    left = r.without(first)
    after = left.without(then) if left else None
    gone = set(first) | set(then)
    assert (list(after.positions()) if after else []) == [p for p in range(2000) if p not in gone]
    if after:
        assert all(a <= b for a, b in after.runs) and all(b + 1 < c for (_, b), (c, _) in zip(after.runs, after.runs[1:]))


def test_diverge_takes_what_the_ids_name_and_only_what_the_user_may_touch():
    r, tasks = _rest(first=100)
    rests = {100: r}
    left, taken = rest.diverge(rests, ["100_5", "100_[7-8]", "101"], lambda u: u == "alice")
    assert [t.display_id for t in taken] == ["100_5", "100_7", "100_8", "100_2"]
    assert left[100].left == 1996 and not left[100].holds(4) and left[100].holds(5)
    assert rest.diverge(rests, ["100"], lambda u: u == "bob") == ({}, [])
    left, taken = rest.diverge(rests, ["100"], lambda u: True)
    assert left == {100: None} and taken == list(tasks)


def test_a_resting_task_is_pending_to_a_dependency():
    r, _ = _rest(first=100)
    got, shown = rest.states_of({100: r.without([3])}, [100, 103, 2099, 2100])
    assert got == {100: states.PENDING, 2099: states.PENDING} and shown == {100: "100_1", 2099: "100_2000"}
