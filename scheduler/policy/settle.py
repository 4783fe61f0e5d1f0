"""The end of a pass that can change nothing more (classes._Walk): once no reservation is left to
make, no class judged on its own is left, and no request left may start now or try to preempt, the
state of the pass is final, and every class left takes one verdict for all its jobs, in any order.
On a full cluster that is most of the classes of a pass.

The verdict of such a class is read as `_Pass._verdict` would reach it in that state: a gate
(hold, begin, retry backoff, dependency) is judged as the walk judges it; else a cap
(`Usage.blocked`), else the "no room" verdict of its request shape (`_Pass._no_room`: no node has
room, it may not preempt, it gets no reservation). tests/property/test_plan_classes.py checks the
plans against the per-job pass.

Should a gate's verdict change the state of a settled pass after all (its invariant broken: a bug),
the pass is not trusted: `Unsettled` is raised, plan() logs it and plans the snapshot again with a
whole pass (`guarded`), rather than fail the scheduler's tick or hand out a plan nobody checked."""
import functools
import logging
from collections.abc import Callable
from dataclasses import fields
from typing import TYPE_CHECKING, Any, TypeVar, cast

from ..jobs.model import Job
from ..jobs.plan import Pending, Verdict

if TYPE_CHECKING:       # the walk is classes.py's, which imports this module
    from .classes import _Walk

_DEFAULTS: tuple[Any, ...] = tuple(f.default for f in fields(Pending))
_log = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., Any])
# The walk asks whether the pass has settled after this many turns without a change of state, then
# after four times as many, and so on: an ask that finds it unsettled costs a look per class left.
SETTLE_CHECK = 64


class Unsettled(Exception):
    """A pass taken for settled changed its state: its shortcut verdicts may be wrong."""


def guarded(plan: F) -> F:
    """`plan` (which takes `settles=`), planned again with `settles=False` (a whole pass, no
    settled shortcut) when a settled pass broke its invariant; the break is logged."""
    @functools.wraps(plan)
    def planned(*a: Any, **kw: Any) -> Any:
        try:
            return plan(*a, **kw)
        except Unsettled as e:
            _log.warning("plan(): %s; planned again as a whole pass", e)
            return plan(*a, **{**kw, "settles": False})
    return cast(F, planned)


def done(w: "_Walk", version: tuple[int, ...]) -> bool:
    """Before each turn of the walk `w`: whether the pass has settled (then every class left has
    taken its verdict: `finish`), asked once `w.check` turns have gone by without a change."""
    if w.since < w.check:
        w.since += 1
        return False
    if settled(w):
        finish(w, version)
        return True
    w.check *= 4
    w.since += 1
    return False


def settled(w: "_Walk") -> bool:
    """Whether no verdict left in the merge of the walk `w` can change the pass state."""
    p, cfg = w.p, w.p.cfg
    if not p.settles or cfg.backfill_depth == 0 or len(p.starts) < cfg.backfill_depth:
        return False
    preempting = cfg.preemption and (p.lowest_victim() is not None or bool(p.usage.guarantees))
    asked: set[tuple[Any, ...]] = set()
    for _, key, jobs, _, k in w.reached.rest():
        if key[0] == "own":
            return False
        # What a fit reads of a job: its shape; a preemption try, its QoS and account too.
        ask = (key[5], key[6], key[7], key[8], key[0], key[1]) if preempting else key[5:9]
        if ask in asked:
            continue
        asked.add(ask)
        job = jobs[k]
        if p.free.find(job)[0] is not None or preempting and p._may_preempt(job):
            return False
    return True


def finish(w: "_Walk", version: tuple[int, ...]) -> None:
    """Every class left in the merge of `w` takes the verdict of its next job for the rest of its
    jobs (`settled` said the state no longer changes)."""
    p, at = w.p, w.at
    now, blocked, runs = p.now, p.usage.blocked, p.runs
    rooms: dict[tuple[int, str, int, int], Verdict] = {}      # request shape -> its "no room" verdict
    for i, key, jobs, ids, k in list(w.reached.rest()):
        job = jobs[k]
        if i >= 0:
            at[i] = len(jobs)
        if (job.held or job.deps or job.begin is not None and job.begin > now
                or job.eligible_time is not None and job.eligible_time > now):
            if w._judge(job, key, version, k + 1 < len(jobs)) != version:
                raise Unsettled(f"a settled pass changed its state at job {job.id}")
            if k + 1 < len(jobs):
                runs.append((ids[k + 1:], w.cache[key][3]))
            continue
        capped = blocked(job)
        if capped is not None:
            verdict = cast(Verdict, tuple(capped) + _DEFAULTS[1 + len(capped):])
        else:
            shape = (job.gpus, job.gpu_type, job.cpus, job.mem)
            got = rooms.get(shape)
            if got is None:
                why = p._no_room(job)
                got = rooms[shape] = cast(Verdict, tuple(why) + _DEFAULTS[1 + len(why):])
            verdict = got
        runs.append((ids[k:], verdict))
    w.reached.clear()


def dead(w: "_Walk", job: Job) -> Verdict | None:
    """The verdict of a job of a class the walk `w` reaches now, where it is known unjudged: "no
    room" for good, as its turn (later, room only shrinks) would find it. So where the pass can no
    longer reserve, preempt or get room back (no earmark or draining preemptor left: `_frozen`), the
    job (not judged on its own: the caller's) meets no gate or cap and its shape fits no node
    (Placer.failed). None: not known."""
    p, now = w.p, w.p.now
    if not (w.frozen or _frozen(w)) or (job.held or job.deps or job.begin is not None and job.begin > now
                                        or job.eligible_time is not None and job.eligible_time > now
                                        or p.usage.blocked(job) is not None):
        return None
    if w.dead_at != p.free.grown:
        w.dead, w.dead_at = {}, p.free.grown
    shape = (g, model, c, m) = (job.gpus, job.gpu_type, job.cpus, job.mem)
    verdict = w.dead.get(shape)
    if verdict is None:
        if not any(g >= fg and c >= fc and m >= fm and (not fmodel or fmodel == model)
                   for fg, fmodel, fc, fm in p.free.failed):
            return None
        why = p._no_room(job)
        verdict = w.dead[shape] = cast(Verdict, tuple(why) + _DEFAULTS[1 + len(why):])
    return verdict


def _frozen(w: "_Walk") -> bool:
    """Whether the pass of `w` can no longer reserve, preempt or get room back (then for good)."""
    p, cfg = w.p, w.p.cfg
    w.frozen = (0 < cfg.backfill_depth <= len(p.starts) and not p.earmarked and not p.draining
                and not (cfg.preemption and (p.lowest_victim() is not None or p.usage.guarantees)))
    return w.frozen
