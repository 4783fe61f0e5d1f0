"""A request class's waiting jobs, kept in their order within the class (policy/queue.py's Queue and
backlog.py's Backlog file jobs in them)."""
from bisect import bisect_left
from collections.abc import Iterable
from itertools import chain, compress, repeat
from operator import attrgetter, ge, ne, sub
from typing import TYPE_CHECKING, Any

from ..jobs.model import Job

if TYPE_CHECKING:       # a Group holds its block; blocks.py imports queue.py's names
    from .blocks import Block

# A group's key: (class key, burst flag) in queue.py, (QoS, account, burst flag, gated) in backlog.py.
Key = tuple[Any, ...]
# A job's place in its group, (submit time, id); in C, as bisect's key.
_order = attrgetter("submit_time", "id")


class Group:
    """One class's waiting jobs (and their ids) in (submit time, id) order; `plain`: what settle.dead
    reads of a class without gates, found at its first use (0: not yet; None: it has gates); `within`:
    the block of passed classes it is in (blocks.py), `block`: the one it starts."""
    __slots__ = ("key", "jobs", "ids", "plain", "within", "block", "cut")

    def __init__(self, key: Key, jobs: list[Job]) -> None:
        self.key, self.jobs, self.ids = key, jobs, [j.id for j in jobs]
        self.cut = -1       # the Queue's pass count when a pass last cut its block at it (settle._block_at)
        self.plain: Key | int | None = 0
        self.within: Block | None = None
        self.block: Block | None = None

    def anew(self) -> None:
        """As a new Group of the same jobs (Queue._refront): in no block, never cut (`plain` reads the key alone)."""
        self.cut, self.within, self.block = -1, None, None

    def add(self, j: Job) -> None:
        at = place(self.jobs, _order(j))
        self.jobs.insert(at, j)
        self.ids.insert(at, j.id)

    def swap(self, j: Job) -> None:
        """The job's new record in its old one's place (the same (submit time, id))."""
        self.jobs[bisect_left(self.jobs, _order(j), key=_order)] = j

    def drop(self, j: Job) -> None:
        at = bisect_left(self.jobs, _order(j), key=_order)
        del self.jobs[at], self.ids[at]


def place(jobs: list[Job], at: tuple[float, int]) -> int:
    """Where (submit time, id) `at` goes in `jobs`: a new submit's, the end, known without a bisect (~1 us)."""
    return len(jobs) if not jobs or _order(jobs[-1]) < at else bisect_left(jobs, at, key=_order)


def file(groups: dict[Key, Group], where: dict[int, Key], j: Job, k: Key) -> None:
    """Put `j` in group `k` (made when it is the first), remembering where (Queue, backlog.Backlog):
    as the group's own key, so that a class's jobs share one (~260 B a job otherwise: 26 MB of the
    scheduler at 100,000 single pending jobs, issue 39)."""
    g = groups.get(k)
    if g is None:
        groups[k] = Group(k, [j])
    else:
        k = g.key
        g.add(j)
    where[j.id] = k


def unfile(groups: dict[Key, Group], where: dict[int, Key], j: Job) -> None:
    """Take `j` out of its group; a group left empty goes."""
    k = where.pop(j.id)
    g = groups[k]
    g.drop(j)
    if not g.jobs:
        del groups[k]


def retail(users: dict[str, list[Job]], times: dict[str, list[float]], uids: dict[str, list[int]],
           tails: dict[str, set[int]], bursting: set[int], where: dict[int, Key],
           spots: list[tuple[str, tuple[float, int]]], allowance: int, window: float) -> list[Job]:
    """Re-check multifactor.burst_tail's rule where users' lists changed: a job's flag reads only the
    job `allowance` places before it, so a change at place p moves it for places p..p+allowance
    alone (the ranges of one user merged, each compared in one sweep as burst_tail does).
    Returns the known jobs whose flag changed (`where`: the known jobs' groups). The Queue's (queue.py)
    users' waiting jobs in (submit time, id) order, their submit times and ids place by place, their burst
    tails and the ids in any tail, kept here as they change."""
    at: dict[str, list[int]] = {}
    for user, key in spots:
        mine = users.get(user)
        if mine:
            at.setdefault(user, []).append(bisect_left(mine, key, key=_order))
    out: list[Job] = []
    for user, places in at.items():
        mine, times_of, ids_of = users[user], times[user], uids[user]
        tail = tails.setdefault(user, set())
        places.sort()
        ranges: list[list[int]] = []
        for p in places:
            if ranges and p <= ranges[-1][1]:
                ranges[-1][1] = max(ranges[-1][1], p + allowance + 1)
            else:
                ranges.append([p, p + allowance + 1])
        for lo, hi in ranges:
            hi = min(hi, len(mine))
            if allowance <= 0:
                now: Iterable[bool] = repeat(True)
            else:
                # not (a < t - window), i.e. a >= t - window, for each job's time t and the time
                # a of the job `allowance` places before it; none before the first such place.
                # The times are a list of their own: a slice, not an attribute read per job.
                first = max(lo, allowance)
                span = times_of[first - allowance:hi]
                now = chain(repeat(False, first - lo), map(ge, span, map(sub, span[allowance:], repeat(window))))
            # Only the jobs whose flag moved are looked at one by one (the comparison is in C:
            # a pass's few hundred changes cover most of a deep queue's places).
            was = map(bursting.__contains__, ids_of[lo:hi])
            for k in compress(range(lo, hi), map(ne, now, was)):
                jid = ids_of[k]
                if jid in bursting:
                    bursting.discard(jid)
                    tail.discard(jid)
                else:
                    bursting.add(jid)
                    tail.add(jid)
                if jid in where:
                    out.append(mine[k])
    return out
