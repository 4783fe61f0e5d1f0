"""policy/queue.py: a job filed after every other of its class and its user (a new submit: the latest
submit time and id) is put at the end without a bisect by a key made at each step, the cost of a
pass over a second of the drain's held submits (issue 39); one that belongs further in is put there."""
from dataclasses import replace
from operator import attrgetter

from labq.scheduler.jobs import states
from labq.scheduler.jobs.model import Job
from labq.scheduler.policy import queue as queue_mod
from labq.scheduler.policy.classes import group_key
from labq.scheduler.policy.queue import Queue

_ORDER = attrgetter("submit_time", "id")


def held(jid: int, at: float, user: str = "alice") -> Job:
    return Job(id=jid, user=user, account="parked", argv=("true",), time_limit=600, submit_time=at,
               state=states.PENDING, held=True, reason=states.HELD)


def keyed_bisects(monkeypatch) -> list:
    calls = []
    real = queue_mod.bisect_left

    def counted(a, x, *rest, **kw):
        if "key" in kw:
            calls.append(x)
        return real(a, x, *rest, **kw)
    monkeypatch.setattr(queue_mod, "bisect_left", counted)
    return calls


def in_order(q: Queue) -> bool:
    lists = [g.jobs for g in q.groups.values()] + list(q.users.values())
    return all(xs == sorted(xs, key=_ORDER) for xs in lists) and \
        all(g.ids == [j.id for j in g.jobs] for g in q.groups.values())


def test_new_submits_are_filed_at_the_end_without_a_search(monkeypatch):
    q = Queue()
    waiting = [held(i, 1000.0 + i // 10, "alice" if i % 3 else "bob") for i in range(1, 401)]
    q.sync(waiting, (), None, group_key)        # filed anew (all new)
    calls = keyed_bisects(monkeypatch)
    # A second of submits: a few alike jobs a batch, one submit time each (fewer than a quarter: one by one).
    waiting += [held(i, 1100.0 + i // 10, "alice" if i % 3 else "bob") for i in range(401, 481)]
    q.sync(waiting, (), None, group_key)
    assert calls == []
    assert in_order(q) and sum(len(g.jobs) for g in q.groups.values()) == 480


def test_a_job_that_belongs_further_in_is_put_in_its_place(monkeypatch):
    q = Queue()
    waiting = [held(i, 1000.0 + i) for i in range(1, 101)]
    q.sync(waiting, (), None, group_key)
    calls = keyed_bisects(monkeypatch)
    # Job 50 released (another class), then held again (back amid its class), and a job with an old
    # submit time and a high id (an earlier submit numbered late).
    released = [replace(j, held=False, reason=states.NONE) if j.id == 50 else j for j in waiting]
    q.sync(released, (), None, group_key)
    q.sync(waiting + [held(1000, 1010.5)], (), None, group_key)
    assert calls         # searched: not at the end
    assert in_order(q)
    mine = q.users["alice"]
    assert [j.id for j in mine[9:12]] == [10, 1000, 11] and mine[50].id == 50
