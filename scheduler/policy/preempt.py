"""Preemption: which running jobs a blocked job may stop, and the smallest set that frees enough.

A job may preempt running jobs of a strictly lower QoS that are preemptible (the job's own
--preemptible, else its QoS), have been preempted fewer than `max_preemptions` times and have run
`min_runtime`. A job asking for GPUs within its account's guarantee may also reclaim borrowed GPUs of
other accounts, whatever their QoS and run time (but not past their `max_preemptions`): the guarantee
must be honoured within grace + a tick. The room a preemptor frees is earmarked for it (policy's
`keep_earmarks`) until it starts or gives up.

The victim set lives on one node; the smallest set wins, then the least work lost since the last
checkpoint, then the most recently started; needless victims are never included. A gang (`-N`) needs
`job.nodes` nodes: those needing the fewest victims (a node with room needs none), the whole gang's
room or nothing. `preempt_for` is the one routine both take.
"""
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import combinations
from math import comb
from typing import TYPE_CHECKING

from ..jobs import states
from ..jobs.model import Gpu, Job, Node
from ..jobs.plan import Preempt, Why
from ..settings.config import Config
from . import capacity
from .capacity import Free

if TYPE_CHECKING:       # the pass is policy/__init__'s, which imports this module
    from . import _Pass

_MAX_COMBINATIONS = 4000    # beyond this, greedy-then-prune instead of an exhaustive smallest set


@dataclass(frozen=True, slots=True)
class Choice:
    nodes: tuple[str, ...]
    victims: tuple[Job, ...]   # each once: a gang victim frees room on all its nodes


def preemptible(victim: Job, cfg: Config) -> bool:
    q = cfg.qos_named(victim.qos)
    able = victim.preemptible if victim.preemptible is not None else bool(q and q.preemptible)
    return able and may_be_preempted_again(victim, cfg)


def may_be_preempted_again(victim: Job, cfg: Config) -> bool:
    """`max_preemptions` of the victim's QoS bounds every path, QoS preemption and reclaim alike:
    a job is never requeued more often than that, whoever wants its GPUs."""
    q = cfg.qos_named(victim.qos)
    return victim.preempt_count < (q.max_preemptions if q else 0)


def lost_work(victim: Job, now: float) -> float:
    a = victim.current
    began = (a.start_time or a.dispatch_time or now) if a else now
    return max(0.0, now - max(began, (a.last_checkpoint if a else None) or began))


def earmark(job: Job, held: Iterable[Gpu], victims: Iterable[Job], node: Node | None) -> tuple[str, ...]:
    """The GPUs kept for a preemptor: the free ones held for it on the node, then its victims' (of
    the model it asks for), as many as it needs. Others' extra GPUs are free for anyone."""
    models = {g.uuid: g.model for g in node.gpus} if node is not None else {}
    theirs = [u for v in victims for u in v.gpu_uuids if u in models and (not job.gpu_type or models[u] == job.gpu_type)]
    return tuple([g.uuid for g in held] + theirs)[:job.gpus]


def candidates(job: Job, running: Iterable[Job], now: float, cfg: Config, reclaim: bool,
               borrower: bool = False) -> tuple[list[Job], list[tuple[Job, float]]]:
    """(eligible, deferred): running jobs the job may preempt now, and those it may once they have run
    min_runtime (with the time that takes). A `borrower` (the job would run beyond its account's
    guarantee) never preempts another account's work within that account's guarantee: the lender
    would reclaim the GPUs at once, and it is owed them."""
    mine = cfg.qos_named(job.qos)
    prio = mine.priority if mine else 0
    ok: list[Job] = []
    later: list[tuple[Job, float]] = []
    for v in running:
        if v.state != states.RUNNING:
            continue
        if reclaim and v.borrowed and v.account != job.account and may_be_preempted_again(v, cfg):
            ok.append(v)
            continue
        q = cfg.qos_named(v.qos)
        if (q.priority if q else 0) >= prio or not preemptible(v, cfg):
            continue
        if borrower and not v.borrowed and v.account != job.account:
            continue
        ran = now - ((v.current.start_time or v.current.dispatch_time or now) if v.current else now)
        if ran >= (q.min_runtime if q else 0):
            ok.append(v)
        else:
            later.append((v, (q.min_runtime if q else 0) - ran))
    return ok, later


def preempt_for(p: "_Pass", job: Job) -> Why | None:
    """(reason, detail, earmark, earmark GPUs) once victims on enough nodes are chosen; the
    PreemptionDeferred verdict; or None. `p`: the policy's `_Pass`. A gang's earmark names each of
    its nodes, comma-separated, and the room is held on every one of them."""
    reclaim = p.usage.within_guarantee(job)
    pool = [v for v in p.running if v.id not in p.doomed]
    ok, later = candidates(job, pool, p.now, p.cfg, reclaim, p.usage.borrows(job))
    nodes = {n: f for n, f in p.free.free.items() if capacity.could_ever_hold(job, f.node)}
    choice = choose(job, nodes, ok, p.now) if ok else None
    if choice is None and not later and job.nodes == 1:
        # Lets larger one-node requests skip the search (`_Pass._may_preempt`). A gang that found
        # too few nodes says nothing of a one-node request of its shape, so it is not remembered.
        q = p.cfg.qos_named(job.qos)
        p.no_victims.append((q.priority if q else 0, reclaim, capacity.shape(job)))
    if choice is None:
        if later and choose(job, nodes, ok + [v for v, _ in later], p.now):
            wait = min(w for _, w in later)
            return (states.PREEMPTION_DEFERRED,
                    f"lower-QoS jobs it could preempt reach min_runtime in {wait:.0f}s at the earliest")
        return None
    why = "reclaiming its account's guarantee" if reclaim else f"QoS {job.qos}"
    for v in choice.victims:
        q = p.cfg.qos_named(v.qos)
        p.doomed.add(v.id)
        p.preempts.append(Preempt(v.id, job.id, q.grace if q else 0,
                                  f"preempted for job {job.display_id} ({why}); "
                                  f"{lost_work(v, p.now):.0f}s since its last checkpoint"))
    p.draining[job.id] = list(choice.victims)
    kept: list[str] = []
    for name in choice.nodes:
        spot = p.free.free[name]
        kept += earmark(job, p.free.hold(spot, job)[0], choice.victims, spot.node)
    mark = ",".join(choice.nodes)
    return states.PREEMPTING_FOR, (f"preempting {len(choice.victims)} job(s) on {mark}: "
                                   + ", ".join(v.display_id for v in choice.victims)), mark, tuple(kept)


def choose(job: Job, free_by_node: dict[str, Free], pool: Iterable[Job], now: float) -> Choice | None:
    """The `job.nodes` nodes that need the fewest victims (then the least work lost, then the name),
    or None when fewer nodes than that could be freed. `free_by_node` maps a node name to its Free
    (capacity.Free) for nodes that could hold the job; `pool` are the candidate victims. A node with
    room needs none (a one-node job only preempts when no node has room); a set with no victim at
    all is not a preemption (None)."""
    by_node: dict[str, list[Job]] = {}
    for v in pool:
        for node, _ in v.on_nodes:        # a gang victim frees room on each of its nodes
            if node in free_by_node:
                by_node.setdefault(node, []).append(v)
    options: list[tuple[int, float, str, tuple[Job, ...]]] = []
    for name in sorted(free_by_node):
        f = free_by_node[name]
        if f.fits(job):
            options.append((0, 0.0, name, ()))
        elif by_node.get(name):
            got = _on_node(job, f, by_node[name], now)
            if got:
                options.append((len(got), sum(lost_work(v, now) for v in got), name, tuple(got)))
    if len(options) < job.nodes:
        return None
    options.sort(key=lambda o: o[:3])
    picked = options[:job.nodes]
    if job.nodes == 1:
        victims = picked[0][3]            # one node's set, in preference order (the detail's order)
    else:
        # Victims gathered over several nodes, each once, listed by id (the gang's detail's order).
        merged = {v.id: v for o in picked for v in o[3]}
        victims = tuple(merged[i] for i in sorted(merged))
    if not victims:
        return None
    return Choice(tuple(sorted(o[2] for o in picked)), victims)


def _on_node(job: Job, free: Free, pool: list[Job], now: float) -> tuple[Job, ...] | None:
    # Preference: least work lost, then the most recently started, then the id.
    pool = sorted(pool, key=lambda v: (lost_work(v, now), -((v.current.dispatch_time or 0) if v.current else 0), v.id))
    if not _covers(job, free, pool):
        return None
    n = len(pool)
    for k in range(1, n + 1):
        if comb(n, k) > _MAX_COMBINATIONS:
            return _prune(job, free, _greedy(job, free, pool))
        # combinations() yields in the preference order, so the first covering set is the best of size k
        for combo in combinations(pool, k):
            if _covers(job, free, combo):
                return combo
    return None


def _greedy(job: Job, free: Free, pool: Iterable[Job]) -> list[Job]:
    chosen: list[Job] = []
    for v in pool:
        chosen.append(v)
        if _covers(job, free, chosen):
            break
    return chosen


def _prune(job: Job, free: Free, chosen: Iterable[Job]) -> tuple[Job, ...]:
    chosen = list(chosen)
    for v in reversed(list(chosen)):
        rest = [c for c in chosen if c is not v]
        if _covers(job, free, rest):
            chosen = rest
    return tuple(chosen)


def _covers(job: Job, free: Free, victims: Sequence[Job]) -> bool:
    """Whether the node's free resources plus what the victims hold would fit the job."""
    cpus = free.cpus + sum(v.cpus for v in victims)
    mem = free.mem + sum(v.mem for v in victims)
    slots = free.slots + len(victims)
    gpus = len(free.matching(job))
    if job.gpus:
        models = {g.uuid: g.model for g in free.node.gpus}
        gpus += sum(1 for v in victims for u in v.gpu_uuids if u in models and (not job.gpu_type or models[u] == job.gpu_type))
    return slots >= 1 and cpus >= job.cpus and mem >= job.mem and gpus >= job.gpus
