"""The pending queue kept in plan()'s order by its owner, changed job by job: what a backfill-off
pass (strict.py `run_kept`) walks instead of the whole queue, so that a pass costs the jobs it
changes and the jobs it judges, not the depth of the queue.

A job's priority (multifactor.py) differs from another's of the same QoS, fair-share account and
burst flag only by its age term, which never decreases with the wait; so, without the short-job
term, each `Group` of jobs alike in those (and in whether a gate may stop them before the blocker's
verdict: a hold, --begin, a retry backoff, dependencies, an array throttle) is in priority order
when kept in (submit time, id) order, and none of that depends on `now`. The pass merges the
groups' heads by multifactor.ordered's own key (classes._scorer).

The burst flag is the one input that changes without the job changing: a job is in its user's
burst tail (multifactor.burst_tail) when, in the user's pending jobs in (submit time, id) order, the
job `burst_jobs` places before it was submitted within `burst_window` of it. A submit or a start
at place p changes that pair only for the jobs at places p .. p + burst_jobs, so each change
re-checks those few, never the user's queue (`_retail`); a job whose flag changed moves group.

The owner (the simulator) calls `add` for each job that joins the queue and `remove` for each
that leaves or is replaced (a record is frozen: a change is a remove and an add). Pure: no clock.
tests/property/test_plan_backlog.py checks the groups and tails against a whole pass's.
"""
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterator, Sequence
from itertools import compress, repeat
from operator import attrgetter, ge, itemgetter, ne, sub
from typing import Any

from ..jobs.model import Job
from .floors import Floors
from .queue import Group, Key, file, unfile


def gated(j: Job) -> bool:
    """Whether a gate other than a cap may stop the job before its turn reaches the blocker's verdict,
    or a gang (gang.py judges it: behind the blocker too, once past the same gates)."""
    return bool(j.held or j.deps or j.begin is not None or j.eligible_time is not None or j.array_throttle
                or j.nodes > 1)


_key = attrgetter("submit_time", "id")
_TIME, _ID = itemgetter(0), itemgetter(1)
# What files a job here (its place, group, gates, marks, needs): a new record alike in these is swapped.
_FILED = attrgetter("submit_time", "id", "user", "qos", "account", "held", "deps", "begin", "eligible_time",
                    "array_throttle", "nodes", "max_wait", "deadline", "earmark", "gpus", "cpus")


class Backlog:
    """The pending jobs by (QoS, account, burst flag, gated), each group in (submit time, id) order;
    with them what a pass reads before its walk: the jobs that may expire (`marked`), those whose
    room is earmarked, the gangs and the jobs with dependencies (counted)."""

    def __init__(self, burst: tuple[int, float] | None, floors: Floors | None = None):
        self.burst = burst                          # (burst_jobs, burst_window), None: no penalty
        # Each group's least budget floors (budget.py), for a caller that keeps no budget reasons'
        # figures (the simulator): the walk then pends a group its budget admits none of, unquoted.
        self.floors = floors
        self.jobs: dict[int, Job] = {}
        self.groups: dict[Key, Group] = {}
        self.where: dict[int, Key] = {}             # id -> its group's key
        self.users: dict[str, list[tuple[float, int]]] = {}     # user -> (submit time, id) of its jobs, sorted
        self.bursting: set[int] = set()             # ids in their user's burst tail
        self.marked: dict[int, Job] = {}            # --max-wait, --deadline, dependencies: may expire
        self.earmarked: dict[int, Job] = {}
        self.gangs = 0
        self.deps = 0
        self.needs: Counter[tuple[int, int]] = Counter()    # (GPUs, CPUs) a job needs in all -> jobs that do
        self.changes = 0                            # adds and removes so far: what a Behind checks

    def __len__(self) -> int:
        return len(self.jobs)

    def add(self, j: Job) -> None:
        self.changes += 1
        self.jobs[j.id] = j
        if j.max_wait is not None or j.deadline is not None or j.deps:
            self.marked[j.id] = j
        if j.earmark:
            self.earmarked[j.id] = j
        self.gangs += j.nodes > 1
        self.deps += bool(j.deps)
        self.needs[(j.total_gpus, j.cpus * j.nodes)] += 1
        keys = self.users.setdefault(j.user, [])
        at = bisect_left(keys, _key(j))
        keys.insert(at, _key(j))
        if self.burst is not None and self._tail(keys, at):
            self.bursting.add(j.id)
        self._group(j)
        self._retail(keys, at + 1, at + 1 + self.burst[0] if self.burst else at)

    def remove(self, job_id: int) -> Job:
        self.changes += 1
        j = self.jobs.pop(job_id)
        self.marked.pop(job_id, None)
        self.earmarked.pop(job_id, None)
        self.gangs -= j.nodes > 1
        self.deps -= bool(j.deps)
        need = (j.total_gpus, j.cpus * j.nodes)
        self.needs[need] -= 1
        if not self.needs[need]:
            del self.needs[need]
        self._ungroup(j)
        if self.floors is not None:
            self.floors.forget(job_id)
        self.bursting.discard(job_id)
        keys = self.users[j.user]
        at = bisect_left(keys, _key(j))
        del keys[at]
        if not keys:
            del self.users[j.user]
            return j
        self._retail(keys, at, at + self.burst[0] if self.burst else at)
        return j

    def replace(self, j: Job) -> None:
        """The pending job's new record (an earmark given or given up)."""
        self.remove(j.id)
        self.add(j)

    def swap(self, j: Job) -> bool:
        """Take a known job's new record when nothing that files it changed (most changes between
        the daemon's passes are a new reason); False: not so (remove, then add). Its group keeps the
        old record, alike in every field that orders and files it: a walk reads `jobs[id]`."""
        old = self.jobs.get(j.id)
        if old is None or _FILED(old) != _FILED(j) or self.floors is not None:     # (floors read more)
            return False
        self.jobs[j.id] = j
        for kept in (self.marked, self.earmarked):
            if j.id in kept:
                kept[j.id] = j
        return True

    def _tail(self, keys: list[tuple[float, int]], k: int) -> bool:
        """multifactor.burst_tail's rule for the job at place k of its user's sorted keys."""
        a, window = self.burst or (0, 0.0)
        if a <= 0:
            return True
        return k >= a and not keys[k - a][0] < keys[k][0] - window

    def _retail(self, keys: list[tuple[float, int]], lo: int, hi: int) -> None:
        """Re-check the burst flag of the user's jobs at places lo..hi-1 (those whose pair moved)."""
        if self.burst is None:
            return
        a, window = self.burst
        hi = min(hi, len(keys))
        if lo >= hi:
            return
        # `_tail` for each place and the flags held, compared in C: a change re-checks burst_jobs
        # places (100 by default), and a call per place was most of what filing a deep queue's few
        # hundred changes a pass cost (100,000 pending: ~40 ms a pass).
        if a <= 0:
            flags = [True] * (hi - lo)
        else:
            first = max(lo, a)
            times = list(map(_TIME, keys[first - a:hi]))
            flags = [False] * (first - lo)
            flags += map(ge, times, map(sub, times[a:], repeat(window)))
        ids = list(map(_ID, keys[lo:hi]))
        for k in compress(range(hi - lo), list(map(ne, flags, map(self.bursting.__contains__, ids)))):
            j = self.jobs[ids[k]]
            self._ungroup(j)
            if flags[k]:
                self.bursting.add(j.id)
            else:
                self.bursting.discard(j.id)
            self._group(j)

    def _group(self, j: Job) -> None:
        key = (j.qos, j.account, j.id in self.bursting, gated(j))
        file(self.groups, self.where, j, key)
        if self.floors is not None:
            self.floors.add(key, j, bisect_left(self.groups[key].jobs, _key(j), key=_key))

    def _ungroup(self, j: Job) -> None:
        if self.floors is not None:
            key = self.where[j.id]
            self.floors.remove(key, j.id, bisect_left(self.groups[key].jobs, _key(j), key=_key))
        unfile(self.groups, self.where, j)


class Behind(Sequence[int]):
    """The ids of the jobs behind a backfill-off pass's blocker (strict.py `run_kept`): a slice of
    each group's ids from where the walk stopped, copied only when read. A caller that keeps no
    reasons (the simulator) never reads them, so such a pass costs the jobs up to the blocker, not
    the depth of the queue: a copy of every id at every pass made a 200,000-job replay 2.3x slower.
    Read after the backlog changed, the slices would name other jobs: that is refused."""
    __slots__ = ("_backlog", "_changes", "_parts", "_n", "_ids")

    def __init__(self, backlog: Backlog, parts: list[tuple[Group, int]]) -> None:
        self._backlog, self._changes, self._parts = backlog, backlog.changes, parts
        self._n = sum(len(g.ids) - k for g, k in parts)
        self._ids: list[int] | None = None

    def _read(self) -> list[int]:
        if self._ids is None:
            if self._backlog.changes != self._changes:
                raise RuntimeError("the jobs behind the blocker read after their backlog changed")
            ids: list[int] = []
            for g, k in self._parts:
                ids += g.ids[k:]
            self._ids = ids
        return self._ids

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[int]:
        return iter(self._read())

    def __getitem__(self, k: Any) -> Any:
        return self._read()[k]
