"""The jobs one cancel/hold/release/requeue names (handlers._each_job): in memory, else read from
Redis in one bulk read for all its plain ids; each array's tasks indexed once per request, not
walked per id. Tasks of a held array kept as one rest (jobs/rest.py) are found too: those the
request takes out of their rest (`taken`, already Jobs), and those of a rest it leaves alone
(another user's, named for the refusal; or a hold or requeue, which change nothing of them):
`resting`, they stay in their rest."""
from collections.abc import Collection, Iterable, Sequence
from typing import Protocol

from ..jobs import rest
from ..jobs.model import Job
from ..jobs.rest import Rest


class Records(Protocol):
    """Job records in Redis, for the ended jobs a request names (store/state.SchedulerStore)."""
    def job(self, jid: int) -> Job | None: ...
    def jobs(self, ids: Sequence[int]) -> list[Job]: ...


class Known(Protocol):
    """What a lookup reads of the scheduler (handlers.State is one)."""
    @property
    def jobs(self) -> dict[int, Job]: ...
    @property
    def rests(self) -> dict[int, Rest]: ...
    @property
    def store(self) -> Records: ...


class Lookup:
    def __init__(self, s: Known, ids: Iterable[str], taken: Iterable[Job] = (),
                 left: Collection[int] | None = None) -> None:
        self.s = s
        self.taken = {j.id: j for j in taken}
        # Rests the request leaves untouched: their tasks are seen, never taken.
        self.rests = {a: r for a, r in s.rests.items() if a not in (left or {})}
        wanted = sorted({int(t) for t in ids if t.isascii() and t.isdigit() and len(t) < 17}
                        - s.jobs.keys() - self.taken.keys())
        self.read = {j.id: j for j in s.store.jobs(wanted)} if wanted else {}
        self.arrays: dict[int, list[Job]] | None = None
        self.resting: set[int] = set()     # ids of the tasks found still in their rest

    def record(self, jid: int) -> Job | None:
        got = self.s.jobs.get(jid) or self.taken.get(jid) or self.read.get(jid)
        if got is None and self.rests:
            got = rest.tasks_of(self.rests, [jid]).get(jid)
            if got is not None:
                self.resting.add(jid)
        return got

    def tasks(self, a: int) -> list[Job]:
        if self.arrays is None:
            self.arrays = {}
            for j in sorted([*self.s.jobs.values(), *self.taken.values()], key=lambda j: j.id):
                if j.array_id is not None:
                    self.arrays.setdefault(j.array_id, []).append(j)
            self.index = {(j.array_id, j.array_index): j for js in self.arrays.values() for j in js}
        if a in self.rests:         # a rest it may not touch: its tasks, once, beside its records
            seen = self.rests.pop(a).tasks()
            self.resting.update(j.id for j in seen)
            self.arrays[a] = sorted(self.arrays.get(a, []) + seen, key=lambda j: j.id)
            self.index.update(((a, j.array_index), j) for j in seen)
        return self.arrays.get(a, [])

    def task(self, a: int, i: int) -> Job | None:
        self.tasks(a)
        return self.index.get((a, i))
