"""The jobs one cancel/hold/release/requeue names (handlers._each_job): in memory, else among the
records the tick read for the round's requests (change.Read.records: `named` says which, read in one
bulk read per round; Unread asks for any more); each array's tasks indexed once per request, not
walked per id. Tasks of a big array kept as one rest (jobs/rest.py) are found too: those the
request takes out of their rest (`taken`, already Jobs), and those of a rest it leaves alone
(another user's, named for the refusal; or a hold or requeue, which change nothing of them):
`resting`, they stay in their rest."""
import json
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Protocol

from ..errors import LabqError
from ..jobs import rest
from ..jobs.jobspec import parse_dependency
from ..jobs.model import Job
from ..jobs.refs import wanted_of
from ..jobs.rest import Rest
from .change import Change, Read, Unread

ACTS_ON_IDS = ("cancel", "hold", "release", "requeue")
MAX_NAMED = 10_000      # handlers.MAX_IDS: a request naming more is refused, its records never read
_REF = re.compile(r'"(\d{1,16})(?:_[^"]*)?"')           # "42", "42_3", "42_[1-3]" as JSON strings


class Known(Protocol):
    """What a lookup reads of the scheduler (handlers.State is one)."""
    @property
    def jobs(self) -> dict[int, Job]: ...
    @property
    def rests(self) -> dict[int, Rest]: ...
    @property
    def read(self) -> Read: ...


def named(op: str, body: str, parse: Callable[[str], object] = json.loads) -> list[int]:
    """The job ids a request's body (its JSON text: the round reads before any request is decoded)
    may name an ended record of: a cancel's, hold's, release's or requeue's ids (an array's for its
    tasks: the head of each id text, read from the text, which is a list of ids), a submit's
    dependencies (its body parsed by `parse`, decode.submit_body in the tick, which the request's own
    decoding then finds parsed; its dependency text read as jobspec does). Never a decision: an id
    named wrongly is one more record read, one missed is read when its handler asks (Unread)."""
    if op in ACTS_ON_IDS:
        got = [int(i) for i in _REF.findall(body)]
        return got if len(got) <= MAX_NAMED else []
    if op == "submit" and '"dependency"' in body:
        try:
            parsed = parse(body)
            deps = parse_dependency(parsed.get("dependency")) if isinstance(parsed, dict) else ()
        except (LabqError, ValueError, RecursionError):     # refused when it is decoded: names nothing
            return []
        return sorted({int(t.partition("_")[0]) for _, ids in deps for t in ids})
    return []


def record_of(records: Mapping[int, Job | None], jid: int) -> Job | None:
    """Job `jid`'s record as the tick read it (None: none in Redis); Unread where it was not read."""
    if jid not in records:
        raise Unread([jid])
    return records[jid]


def records_of(records: Mapping[int, Job | None], ids: Iterable[int]) -> list[Job]:
    """The records of `ids` there are, as the tick read them; Unread for those it did not read."""
    ids = list(ids)
    missing = [i for i in ids if i not in records]
    if missing:
        raise Unread(missing)
    return [j for i in ids if (j := records[i]) is not None]


class Lookup:
    def __init__(self, s: Known, ids: Iterable[str], taken: Iterable[Job] = (),
                 left: Collection[int] | None = None) -> None:
        self.s = s
        self.taken = {j.id: j for j in taken}
        # Rests the request leaves untouched: their tasks are seen, never taken.
        self.rests = {a: r for a, r in s.rests.items() if a not in (left or {})}
        wanted = sorted({int(t) for t in ids if t.isascii() and t.isdigit() and len(t) < 17}
                        - s.jobs.keys() - self.taken.keys())
        self.found = {j.id: j for j in records_of(s.read.records, wanted)} if wanted else {}
        self.arrays: dict[int, list[Job]] | None = None
        self.resting: set[int] = set()     # ids of the tasks found still in their rest
        self.ended: dict[int, list[Job]] = {}     # an array's records in Redis only (read once a request)

    def record(self, jid: int) -> Job | None:
        got = self.s.jobs.get(jid) or self.taken.get(jid) or self.found.get(jid)
        if got is None and self.rests:
            got = rest.tasks_of(self.rests, [jid]).get(jid)
            if got is not None:
                self.resting.add(jid)
        return got

    def records(self, a: int) -> list[Job]:
        """Array `a`'s tasks that are records (in the table or taken), not those still in its rest."""
        if self.arrays is None:
            self.arrays = {}
            for j in sorted([*self.s.jobs.values(), *self.taken.values()], key=lambda j: j.id):
                if j.array_id is not None:
                    self.arrays.setdefault(j.array_id, []).append(j)
            self.index = {(j.array_id, j.array_index): j for js in self.arrays.values() for j in js}
        return self.arrays.get(a, [])

    def tasks(self, a: int) -> list[Job]:
        self.records(a)
        assert self.arrays is not None
        if a in self.rests:         # a rest it may not touch: its tasks, once, beside its records
            seen = self.rests.pop(a).tasks()
            self.resting.update(j.id for j in seen)
            self.arrays[a] = sorted(self.arrays.get(a, []) + seen, key=lambda j: j.id)
            self.index.update(((a, j.array_index), j) for j in seen)
        return self.arrays.get(a, [])

    def task(self, a: int, i: int) -> Job | None:
        """Task `i` of array `a`: a record in memory or resting, else one that ended (`del A_i` of it is
        "already ended", not "no such job"), alone or inside the one record `del A` made (A_[i-j])."""
        self.tasks(a)
        got = self.index.get((a, i))
        if got is None:
            got = next((t for j in self._ended_of(a) for t in wanted_of(j, {i})), None)
        return got

    def _ended_of(self, a: int) -> list[Job]:
        """Array `a`'s records that are in Redis only (ended), asked once per request and only where a
        named task is found nowhere in memory (Unread: the tick reads them): the array's ids are a + 0..count-1, and a record that
        stands for many ended tasks holds the first one's id (jobs/rest.ended)."""
        if a not in self.ended:
            head = self.s.jobs.get(a) or self.taken.get(a) or self.found.get(a) \
                or rest.tasks_of(self.s.rests, [a]).get(a) or record_of(self.s.read.records, a)
            ids = [] if head is None or head.array_id != a else \
                [x for x in range(a, a + (head.array_count or 1)) if x not in self.s.jobs and x not in self.taken]
            self.ended[a] = [j for j in records_of(self.s.read.records, ids) if j.array_id == a] if ids else []
        return self.ended[a]


def rests_named(s: Known, ids: list[str], may: Callable[[str], bool], diverge: Callable[[Rest], bool],
                whole: Callable[[Rest], Job | Rest] | None, change: Change,
                act: Callable[[Job], tuple[Job | None, str]]) -> tuple[dict[int, tuple[Rest, str]], list[Job]]:
    """What a request does to the rests (jobs/rest.py), into `change`: ({array id: (a rest named
    whole, what its tasks became)}, the tasks taken out of theirs as Jobs). A rest `diverge`
    picks gives up the tasks named as records (requeue: none). With `whole`, a rest named whole
    (`A`) that no job depends on becomes whole(rest), O(1) in its task count: ONE ended record
    (cancel) or the rest changed (hold, release); its tasks made records before act as ever."""
    named = rest.whole({a: r for a, r in s.rests.items() if diverge(r)}, ids, may) if whole else {}
    ends = rest.undepended(named, s.jobs.values())
    resting = {a: r for a, r in s.rests.items() if a not in ends and diverge(r)}
    left, taken = rest.diverge(resting, ids, may) if resting else ({}, [])
    change.rests.update(left)
    told: dict[int, tuple[Rest, str]] = {}
    for a, r in ends.items():
        got = whole(r) if whole else None
        if isinstance(got, Job):
            change.rests[a] = None
            change.jobs.append(got)
            told[a] = (r, got.state)
        elif got is not None:
            change.rests[a] = got
            told[a] = (r, "held" if got.template.held else "released")
    # A rest named whole that the request leaves as it is (`release A` of a pending one, `requeue
    # A`): its tasks are alike, so one verdict says what each would get, never N Jobs built.
    alike = {a: r for a, r in s.rests.items() if a not in ends and not diverge(r)}
    for a, r in rest.whole(alike, ids, may).items():
        new, said = act(r.template)
        if new is not None:
            told[a] = (r, said)
    return told, taken
