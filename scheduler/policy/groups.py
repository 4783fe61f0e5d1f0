"""A request class's waiting jobs, kept in their order within the class (policy/queue.py's Queue and
backlog.py's Backlog file jobs in them)."""
from bisect import bisect_left
from operator import attrgetter
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
