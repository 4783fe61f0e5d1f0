"""An array's tasks not yet made into records: one `Rest` for all of them (issue 39 item 1).

A 10,000-task array was 10,000 records, stat rows and index entries written at submit, and
10,000 jobs in the scheduler's table, for tasks that all stay alike until one of them is touched.
A Rest is the array's first task (the template: every field as `jobspec.expand` makes task 0),
its index arithmetic (`lo`, `step`) and the runs of positions still resting; task at position p
has id `array_id + p` and index `lo + p * step`, ids reserved at submit. A task leaves the rest
("diverges", is materialised) when something acts on it alone (`del/hold/release A_i`) or on the
whole (`release A`): it becomes an ordinary Job, and everything downstream of the table (plan(),
the applier, dispatch, acct) needs nothing new. A rest not held (its template pending) keeps a
WINDOW of its first tasks as records (`topped_up`, before each pass): enough that plan() decides
what it would over every task (tests/property/test_array_window.py); the rest carries the window's
reason. Pure: no Redis (store/rests.py keeps them).
"""
from bisect import bisect_right
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from .jobspec import HELD_DETAIL, _copies, expand
from .model import Job
from .refs import parse_task_ids
from .states import HELD, NONE as REASON_NONE, PENDING

TYPE_CHECKING = False
if TYPE_CHECKING:     # annotations only: the thin CLI loads this module, and no typing with it
    from .idruns import Runs

# Arrays from this many tasks are kept as a rest; smaller ones cost little as records, and every
# path they take is the ordinary one.
REST_MIN = 1000


@dataclass(frozen=True)
class Rest:
    template: Job                     # task 0 as submitted (id = array_id, array_index = lo, array_count)
    lo: int
    step: int
    runs: tuple[tuple[int, int], ...]   # positions still resting: sorted, disjoint, inclusive

    @property
    def array_id(self) -> int:
        return self.template.id

    @property
    def count(self) -> int:            # the array's tasks, resting or not
        return self.template.array_count or 0

    @property
    def left(self) -> int:
        return sum(b - a + 1 for a, b in self.runs)

    @property
    def user(self) -> str:
        return self.template.user

    def positions(self) -> Iterator[int]:
        for a, b in self.runs:
            yield from range(a, b + 1)

    def ids(self) -> Iterator[int]:
        first = self.array_id
        for a, b in self.runs:
            yield from range(first + a, first + b + 1)

    def holds(self, pos: int) -> bool:
        i = bisect_right(self.runs, (pos, float("inf"))) - 1
        return i >= 0 and self.runs[i][0] <= pos <= self.runs[i][1]

    def position_of_id(self, jid: int) -> int | None:
        pos = jid - self.array_id
        return pos if 0 <= pos < self.count and self.holds(pos) else None

    def position_of_index(self, index: int) -> int | None:
        pos, off = divmod(index - self.lo, self.step)
        return pos if not off and 0 <= pos < self.count and self.holds(pos) else None

    def task(self, pos: int) -> Job:
        return replace(self.template, id=self.array_id + pos, array_index=self.lo + pos * self.step)

    def tasks(self, positions: Iterable[int] | None = None) -> list[Job]:
        """The tasks at `positions` (default: every one still resting), as ordinary Jobs."""
        copy = _copies(self.template)
        first, lo, step = self.array_id, self.lo, self.step
        return [copy(first + p, lo + p * step) for p in (self.positions() if positions is None else positions)]

    def without(self, positions: Iterable[int]) -> "Rest | None":
        """This rest less `positions` (materialised); None when nothing is left."""
        gone = sorted(set(positions))
        runs: list[tuple[int, int]] = []
        g = 0
        for a, b in self.runs:
            while g < len(gone) and gone[g] < a:
                g += 1
            start = a
            while g < len(gone) and gone[g] <= b:
                if gone[g] > start:
                    runs.append((start, gone[g] - 1))
                start = gone[g] + 1
                g += 1
            if start <= b:
                runs.append((start, b))
        return replace(self, runs=tuple(runs)) if runs else None


def ended(rest: Rest, state: str, detail: str, now: float) -> Job:
    """Every task still in `rest`, ended together (`del A`) as ONE record: the first resting task's id
    and index, `array_runs` naming them all. O(runs), whatever the task count (issue 39 step 3)."""
    lo, step = rest.lo, rest.step
    runs = tuple((lo + a * step, lo + b * step, step) for a, b in rest.runs)
    return replace(rest.task(rest.runs[0][0]), state=state, reason=REASON_NONE, detail=detail, end_time=now,
                   array_runs=runs)


def whole(rests: Mapping[int, Rest], ids: Iterable[str], may: Callable[[str], bool]) -> dict[int, Rest]:
    """{array id: rest} of the rests `ids` name whole (the array's own id, `A`), that `may(user)` act on."""
    return {int(t): rests[int(t)] for t in ids
            if t.isascii() and t.isdigit() and len(t) < 17 and int(t) in rests and may(rests[int(t)].user)}


def undepended(rests: dict[int, Rest], jobs: Iterable[Job]) -> dict[int, Rest]:
    """Those of `rests` none of whose resting tasks a job of `jobs` depends on. A task a job depends on
    must end as a record of its own, which the dependency reads (`afterany` is satisfied by its CA);
    in one record standing for many it would read as 'no record', never satisfied."""
    if not rests:
        return rests
    wanted = {t for j in jobs for kind, ts in j.deps if kind != "singleton" for t in ts}
    return {a: r for a, r in rests.items() if not any(r.position_of_id(t) is not None for t in wanted)}


def of_array(tasks_template: Job, lo: int, step: int) -> Rest:
    """The rest of a new array whose task 0 is `tasks_template` (jobspec.expand's first task)."""
    return Rest(template=tasks_template, lo=lo, step=step, runs=((0, (tasks_template.array_count or 0) - 1),))


def wanted(indices: Sequence[int] | None) -> bool:
    """Is this new array kept as a rest? Big (REST_MIN), held or not; `indices` are always an evenly
    stepped range (jobspec.array_range)."""
    return indices is not None and len(indices) >= REST_MIN


def holding(rests: Mapping[int, Rest], jid: int) -> tuple[Rest, int] | None:
    """(the rest, position) that holds job id `jid`, or None. Rests are few: a scan is enough."""
    for rest in rests.values():
        pos = rest.position_of_id(jid)
        if pos is not None:
            return rest, pos
    return None


def named(rests: Mapping[int, Rest], text: str) -> tuple[Rest, list[int]] | None:
    """The rest and the positions of it that `text` (`42`, `42_3`, `42_[1-3]`) names, or None."""
    try:
        tasks = parse_task_ids(text)
    except Exception:
        return None
    if tasks:
        rest = rests.get(tasks[0])
        if rest is None:
            return None
        pos = [p for i in sorted(tasks[1]) if (p := rest.position_of_index(i)) is not None]
        return (rest, pos) if pos else None
    if not (text.isascii() and text.isdigit() and len(text) < 17):
        return None
    rest = rests.get(int(text))
    if rest is not None:
        return rest, list(rest.positions())
    got = holding(rests, int(text))
    return (got[0], [got[1]]) if got else None


def diverge(rests: Mapping[int, Rest], ids: Iterable[str], may: Callable[[str], bool]) -> tuple[dict[int, Rest | None], list[Job]]:
    """The tasks the request's ids name, taken out of their rests: ({array id: the rest left, or
    None when empty}, the tasks as ordinary Jobs). `may(user)`: whether the request may act on that
    user's jobs (a rest it may not touch stays whole; the handler then finds nothing to act on)."""
    left: dict[int, Rest | None] = {}
    out: list[Job] = []
    current = dict(rests)
    for text in ids:
        got = named(current, str(text))
        if got is None or not may(got[0].user):
            continue
        rest, pos = got
        out += rest.tasks(pos)
        left[rest.array_id] = after = rest.without(pos)
        if after is None:
            del current[rest.array_id]
        else:
            current[rest.array_id] = after
    return left, out


def tasks_of(rests: Mapping[int, Rest], ids: Collection[int]) -> dict[int, Job]:
    """{id: the task as a Job} of the ids that rest (a reader asked for ids with no record)."""
    out: dict[int, Job] = {}
    for rest in rests.values():
        pos = [p for p in (jid - rest.array_id for jid in ids) if 0 <= p < rest.count and rest.holds(p)]
        out.update((t.id, t) for t in rest.tasks(pos))
    return out


def made(template: Job, first: int, indices: list[int] | None,
         throttle: int | None) -> tuple[list[Job], dict[int, Rest | None]]:
    """A new submission: (its records, {}) as jobspec.expand makes them, or, for an array from
    REST_MIN tasks, ([], {array id: its rest}): ids first..first+n-1 are reserved all the same."""
    if indices is None or not wanted(indices):
        return expand(template, first, indices, throttle), {}
    task0 = replace(template, id=first, array_index=indices[0], array_id=first, array_count=len(indices),
                    array_throttle=throttle)
    return [], {first: of_array(task0, indices[0], indices[1] - indices[0])}


def states_of(rests: Mapping[int, Rest], ids: Iterable[int]) -> tuple[dict[int, str], dict[int, str]]:
    """({id: PD}, {id: display id}) of the ids that rest: the tasks a dependency names are pending
    while they rest, and never an ended state to keep."""
    st: dict[int, str] = {}
    shown: dict[int, str] = {}
    for jid in ids:
        got = holding(rests, jid)
        if got:
            rest, pos = got
            st[jid] = PENDING
            shown[jid] = f"{rest.array_id}_{rest.lo + pos * rest.step}"
    return st, shown


def flipped(r: Rest, held: bool) -> Rest:
    """`hold A` / `release A` of a rest: every resting task held or let go at once, as a rest (a
    released one keeps only its window as records, `topped_up`)."""
    t = r.template
    return replace(r, template=replace(t, held=held, reason=HELD if held else REASON_NONE,
                                       detail=HELD_DETAIL if held else ""))


def topped_up(rests: Mapping[int, Rest], jobs: Iterable[Job], width: int,
              held: int = 0) -> tuple[dict[int, Rest | None], list[Job]]:
    """({array id: the rest left}, the tasks made records) so that each rest not held has `width`
    pending tasks as records before its first resting position, and each held one `held` (a burst
    allowance: held tasks count in their user's burst tail), taken from the front (plan() then
    decides what it would over every task: tests/property/test_array_window.py); and carries the
    reason of the last of them, which the tasks behind share (stat, metrics). `jobs`: the table."""
    live = {a: r for a, r in rests.items() if held or not r.template.held}
    if not live:
        return {}, []
    have = dict.fromkeys(live, 0)
    carrier: dict[int, Job] = {}
    for j in jobs:
        a = j.array_id
        if a in have and j.state == PENDING and j.id - a < live[a].runs[0][0]:
            have[a] += 1
            if not j.held and (a not in carrier or j.id > carrier[a].id):
                carrier[a] = j
    left: dict[int, Rest | None] = {}
    out: list[Job] = []
    for a, r in live.items():
        c, t = carrier.get(a), r.template
        if c is not None and (c.reason, c.detail) != (t.reason, t.detail):
            r = replace(r, template=replace(t, reason=c.reason, detail=c.detail))
            left[a] = r
        need = (held if r.template.held else width) - have[a]
        if need > 0:
            pos = [p for _, p in zip(range(need), r.positions())]
            out += r.tasks(pos)
            left[a] = r.without(pos)
    return left, out


def told(runs: "Runs", r: Rest, said: str) -> None:
    """Into `runs` (idruns.Runs, a reply's), the tasks of `r` acted on whole (ended as one record,
    held, released): one run a run of step 1."""
    for lo, hi in r.runs:
        if r.step == 1:
            runs.extend([{"state": said, "array": r.array_id, "from": r.lo + lo, "to": r.lo + hi}])
        else:
            for p in range(lo, hi + 1):
                runs.add_id(r.array_id, r.lo + p * r.step, said)
