"""The Reservation verdict of a frozen pass (settle.py) for the classes it passes unreached (issue 41). Once
the pass can no longer reserve, preempt or get room back, a job that has room now on some node but would
delay the reservation wherever it starts gets Reservation (_Pass._blocked with room), and that depends on
the job only through its request shape and its span: per shape, a bound (`bound`: the latest now + span
a node with room can start now, Timelines.room_until), past which every class of it is passed with
Reservation unjudged, one by one or as blocks (blocks.py: each shape's shortest span). On a busy 64-GPU
replay most classes of a pass are such, and each was judged every pass.

A later admission of the pass only lowers a bound or takes a shape's last room; a class passed with
Reservation keeps it for its jobs whose turn comes before such an admission and takes "no room" after it
(`lose`, `cut`: a binary search per class at the pass's end). tests/property/test_plan_blocks.py holds it
to the per-job pass and to whole passes."""
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import fields
from typing import TYPE_CHECKING, Any, cast

from ..jobs import states
from ..jobs.model import Job
from ..jobs.plan import Pending, Verdict

if TYPE_CHECKING:       # the walk is classes.py's, which imports settle.py, which imports this module
    from .blocks import Block
    from .classes import _Walk
    from .queue import Group

_DEFAULTS: tuple[Any, ...] = tuple(f.default for f in fields(Pending))
# A job that has room now but would delay the reservation (_Pass._blocked): its verdict, one for all.
DELAYS = "starting now would delay a higher-priority job's reserved start"
RESERVED = cast(Verdict, (states.RESERVATION, DELAYS) + _DEFAULTS[3:])
_FOREVER = float("inf")


def bound(w: "_Walk", job: Job, shape: tuple[int, str, int, int]) -> float | None:
    """Of the job's request shape in the frozen pass of `w`: None where no node has room for it now (the
    Placer then remembers the failure); else the latest now + span at which a job of it starts now on
    some node that has room (Timelines.room_until; inf: a node without a reservation takes any). A job
    past it has room, may neither preempt nor reserve, and delays the reservation wherever it would start:
    Reservation (_Pass._blocked with room). Room and timelines change only by an admission in a frozen pass,
    which only lowers the bound or takes the room (settle.recall)."""
    p, d = w.p, w.dead
    free = p.free
    if d.changes != free.changes:
        d.bounds, d.changes = {}, free.changes
    bound = d.bounds.get(shape)
    if bound is not None:
        return bound
    tl = p.timelines
    for k, bucket in free.buckets.items():       # the nodes best_fit finds room on, in any order
        if k < job.gpus:
            continue
        for _, name in bucket[bisect_left(bucket, (job.cpus, "")):]:
            if free.free[name].fits(job):
                if tl is None or name not in tl.reserved:
                    d.bounds[shape] = _FOREVER
                    return _FOREVER
                until = tl.room_until(job, name)
                if bound is None or until > bound:
                    bound = until
    if bound is None:
        free.find(job)
    else:
        d.bounds[shape] = bound
    return bound


def reparked(w: "_Walk", i: int, g: "Group") -> Any:
    """The park of class `g` (reached as i), passed with Reservation, that `recall` parks: its jobs before
    an admission that took its shape's last room keep Reservation, the rest take "no room" (`cut`); one
    whose shape kept room goes back into the merge at the next change, whatever it is (an admission may
    take that room: the walk's `full` parks). None: every job of it came before that admission."""
    got = cut(w, g) if w.dead.lost else None
    if got is None:
        w.full.add(i)
        return w.parks.get(id(RESERVED)) or w.park_of(RESERVED)
    k, other = got
    if k:
        w.p.runs.append((g.ids[:k], RESERVED))
        w.at[i] = k
    return None if k == len(g.ids) else w.parks.get(id(other)) or w.park_of(other)


def lose(w: "_Walk", placed: Job) -> None:
    """After the admission of `placed`: each shape passed with Reservation that has no room left from
    now on (a frozen pass gets none back) gets "no room" for the jobs whose turn comes after it."""
    d, free = w.dead, w.p.free
    for shape, job in d.reserved.items():
        if shape not in d.lost and free.find(job)[0] is None:
            why = w.p._no_room(job)
            d.lost[shape] = (w.score(placed), cast(Verdict, tuple(why) + _DEFAULTS[1 + len(why):]))


def cut(w: "_Walk", g: "Group") -> tuple[int, Verdict] | None:
    """Of a class passed with Reservation whose shape an admission left without room (`lose`): how
    many of its jobs come before that admission (its jobs are in priority order), and the verdict of
    the rest; None where its shape kept room."""
    j = g.jobs[0]
    got = w.dead.lost.get((j.gpus, j.gpu_type, j.cpus, j.mem))
    if got is None:
        return None
    limit, verdict = got
    return bisect_left(g.jobs, limit, key=w.score), verdict


def split(w: "_Walk", b: "Block", shape: tuple[int, str, int, int], ids: tuple[int, ...]
          ) -> list[tuple[Sequence[int], Verdict]]:
    """The runs of block `b`'s classes of `shape` (their ids `ids`), taken with Reservation, whose shape an
    admission later left without room (`lose`): Reservation before it, "no room" after. Without short
    jobs first a block's classes are in the priority order of their first jobs (fronts.py), so those
    after it start at a binary search over the block, and the classes before it, most often few, are
    read one by one (`cut`); with it, every class of the shape is."""
    limit, other = w.dead.lost[shape]
    before: list[int] = []
    after: Sequence[int]
    if w.reached.bound is not None:
        rest: list[int] = []
        for g in b.shapes[shape]:
            k = cast(tuple[int, Verdict], cut(w, g))[0]
            before += g.ids[:k]
            rest += g.ids[k:]
        after = rest
    else:
        groups = b.groups
        lo = bisect_left(groups, limit, key=lambda g: w.score(g.jobs[0]))
        for g in groups[:lo]:       # each comes before it by its first job: a class of one wholly
            if cast(tuple[Any, Any], g.plain)[1] == shape:
                before += g.ids if len(g.ids) == 1 else g.ids[:cast(tuple[int, Verdict], cut(w, g))[0]]
        if before:
            took = set(before)
            after = [i for i in ids if i not in took]
        else:
            after = ids
    return [(run, v) for run, v in ((before, RESERVED), (after, other)) if run]
