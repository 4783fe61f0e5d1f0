"""Gang placement: a multi-node job (`-N`) starts on all of its nodes in one pass, or on none.

A gang asks for its shape (`gpus`, `cpus`, `mem`, a slot) on each of `nodes` distinct nodes. It goes
through the same gates as a one-node job (holds, dependencies, caps and quotas on its total, the
protected capacity, every budget for all its nodes: `_Pass._admit` with a list of spots), and then:

- **place**: the `nodes` best-fit nodes that have its shape free and whose backfill reservations
  stay whole; fewer than that and nothing is taken;
- **reserve**: the earliest time at which `nodes` nodes can all hold it for its time limit, written
  on each of them, so a smaller job starts now only where it delays none of the gang's nodes;
- **preempt**: preempt.preempt_for, the routine one-node jobs take: the nodes that need the fewest
  victims (a node with room needs none), the whole gang's room or nothing; the room is held on every
  chosen node (the earmark names them all, comma-separated) until the gang starts or gives up.

Pure, like every pass: `p` is the policy's `_Pass`.
"""
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING

from ..jobs import codes, states
from ..jobs.model import Job, Node
from ..jobs.plan import Place, Start, Why
from ..units import fmt_at, fmt_size
from . import capacity, preempt
from .backfill import Alloc, Timelines, _limit
from .capacity import Free

if TYPE_CHECKING:       # the pass is policy/__init__'s, which imports this module
    from . import _Pass

# What `_Pass._blocked` does for a gang (`steps`): wait for victims, preempt, say why there is no room.
Steps = tuple[Callable[[Job, list[Job]], Why | None], Callable[[Job], Why | None], Callable[[Job], Why]]


def earmarked_nodes(earmark: str) -> list[str]:
    return earmark.split(",") if earmark else []


def verdict(p: "_Pass", job: Job) -> Place | Why:
    """A Place for the gang, or the (reason, detail[, earmark, earmark GPUs]) that keeps it pending:
    the rest of `_Pass._verdict` once holds, dependencies and caps let it through."""
    kept = _kept(p, job)
    if kept:
        return p._admit(job, kept, job.earmark_gpus)
    if p.blocker is not None:
        return states.PRIORITY, codes.BEHIND_BLOCKER
    accept = None
    if p.timelines is not None and p.timelines.reserved:
        tl = p.timelines
        accept = lambda f: tl.fits_now(job, f.node.name)   # noqa: E731
    chosen, roomy = find(p.free.free, job, accept, capacity.avoided(job))
    if chosen:
        return p._admit(job, chosen)
    return p._blocked(job, roomy)


def find(free: dict[str, Free], job: Job, accept: Callable[[Free], bool] | None = None,
         avoid: Collection[str] = ()) -> tuple[list[Free] | None, bool]:
    """(the `job.nodes` best-fit spots that `accept` the job, or None; whether enough nodes had the
    room at all). Best fit as for one node: fewest GPUs, then CPUs, left; ties by name; the nodes of
    an attempt lost with its node (`avoid`, capacity.avoided) only where the others are too few."""
    def tight(f: Free) -> tuple[int, int, str]:
        return len(f.gpus), f.cpus, f.node.name

    fits = sorted((f for f in free.values() if f.fits(job)), key=lambda f: (f.node.name in avoid, tight(f)))
    roomy = len(fits) >= job.nodes
    ok = [f for f in fits if accept is None or accept(f)]
    return (sorted(ok[:job.nodes], key=tight) if len(ok) >= job.nodes else None), roomy


def _kept(p: "_Pass", job: Job) -> list[Free] | None:
    """The spots of the gang's earmark, when every one of them now has its shape free."""
    names = earmarked_nodes(job.earmark)
    spots = [s for s in (p.free.free.get(n) for n in names) if s is not None and s.fits(job)]
    if len(spots) == len(names) == job.nodes:
        return spots
    return None


def steps(p: "_Pass") -> Steps:
    """What `_Pass._blocked` does for a gang: wait for its victims on every earmarked node, choose
    victims across nodes (preempt.preempt_for, as for one node: a tuple verdict, or None), and say
    why there is no room."""
    return (lambda job, victims: _wait_for(p, job, victims), lambda job: preempt.preempt_for(p, job),
            lambda job: _no_room(p, job))


def _wait_for(p: "_Pass", job: Job, victims: list[Job]) -> Why | None:
    """PreemptingFor while its victims drain, the room on every earmarked node held again. A gang
    that gave its earmark up looks for room like any blocked job (its victims still free room)."""
    names = earmarked_nodes(job.earmark)
    spots = [s for s in (p.free.free.get(n) for n in names) if s is not None]
    if not spots or len(spots) != len(names):
        return None
    for s in spots:
        p.free.hold(s, job, set(job.earmark_gpus))
    return states.PREEMPTING_FOR, (f"waiting for {len(victims)} preempted job(s) on {job.earmark} to stop: "
                                   + ", ".join(v.display_id for v in victims)), job.earmark, job.earmark_gpus


def reserve(p: "_Pass", job: Job, not_before: float | None = None) -> None:
    """Backfill's reservation for a gang: the earliest time `job.nodes` nodes can all hold it."""
    if p.timelines is None:
        p.timelines = Timelines([f.node for f in p.free.free.values()], p.running, p.placed, p.now, p.cfg, p.tracks)
    got = reserve_on(p.timelines, job, capacity.could_ever_hold, not_before)
    if got is not None:
        p.starts.append(Start(job.id, got[1], ",".join(got[0])))


def reserve_on(tl: Timelines, job: Job, could_hold: Callable[[Job, Node], bool],
               not_before: float | None = None) -> tuple[tuple[str, ...], float] | None:
    """((nodes), time) of the earliest window [t, t + time limit) in which `job.nodes` nodes can all
    hold the job, written on each as a reservation; None when no set of nodes ever could. Free room
    on a node grows only when an allocation ends, so `t` is now or some allocation's end."""
    after = not_before or tl.now
    names = [n for n in sorted(tl.allocs) if could_hold(job, tl.nodes[n])]
    if len(names) < job.nodes:
        return None
    ends = {a.end for n in names for a in tl.allocs[n] if after < a.end < float("inf")}
    for t in [after] + sorted(ends):
        ok = [n for n in names if tl._fits(job, n, t, t + _limit(job))]
        if len(ok) >= job.nodes:
            chosen = tuple(ok[:job.nodes])
            for n in chosen:
                tl.add(n, Alloc(t, t + _limit(job), tl._pick_models(job, n, t), job.cpus, job.mem, job.id,
                                reserved=True))
                tl.reserved.add(n)
            return chosen, t
    return None


def _no_room(p: "_Pass", job: Job) -> Why:
    if not p.free.free:
        return states.NODE_DOWN, "no node is up"
    start = p.starts[-1] if p.starts and p.starts[-1].job_id == job.id else None
    when = f"; expected to start at {fmt_at(start.at)} on {start.node}" if start else ""
    if sum(1 for f in p.initial.free.values() if f.fits(job)) >= job.nodes:
        return states.PRIORITY, "higher-priority jobs took the free resources in this pass" + when
    gpu = f"{job.gpus}x{job.gpu_type or 'GPU'}, " if job.gpus else ""
    have = sum(1 for f in p.free.free.values() if f.fits(job))
    return states.RESOURCES, (f"{have} of the {job.nodes} nodes it needs have {gpu}{job.cpus} CPUs, "
                              f"{fmt_size(job.mem)} and a slot free" + when)
