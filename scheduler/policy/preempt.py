"""Preemption: which running jobs a blocked job may stop, and the smallest set that frees enough.

A job may preempt running jobs of a strictly lower QoS that are preemptible (the job's own
--preemptible, else its QoS), have been preempted fewer than `max_preemptions` times and have run
`min_runtime`. A job asking for GPUs within its account's guarantee may also reclaim borrowed GPUs of
other accounts, whatever their QoS and run time (but not past their `max_preemptions`): the guarantee
must be honoured within grace + a tick. The room a preemptor frees is earmarked for it (policy's
`keep_earmarks`) until it starts or gives up.

The victim set lives on one node; the smallest set wins, then the least work lost since the last
checkpoint, then the most recently started; needless victims are never included.
"""
from dataclasses import dataclass
from itertools import combinations
from math import comb

from ..jobs import states
from ..jobs.model import Job
from ..settings.config import Config

_MAX_COMBINATIONS = 4000    # beyond this, greedy-then-prune instead of an exhaustive smallest set


@dataclass(frozen=True, slots=True)
class Choice:
    node: str
    victims: tuple[Job, ...]
    lost: float               # seconds of work lost, summed


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


def earmark(job: Job, held, victims, node) -> tuple[str, ...]:
    """The GPUs kept for a preemptor: the free ones held for it on the node, then its victims' (of
    the model it asks for), as many as it needs. Others' extra GPUs are free for anyone."""
    models = {g.uuid: g.model for g in node.gpus} if node is not None else {}
    theirs = [u for v in victims for u in v.gpu_uuids if u in models and (not job.gpu_type or models[u] == job.gpu_type)]
    return tuple([g.uuid for g in held] + theirs)[:job.gpus]


def candidates(job: Job, running, now: float, cfg: Config, reclaim: bool, borrower: bool = False):
    """(eligible, deferred): running jobs the job may preempt now, and those it may once they have run
    min_runtime (with the time that takes). A `borrower` (the job would run beyond its account's
    guarantee) never preempts another account's work within that account's guarantee: the lender
    would reclaim the GPUs at once, and it is owed them."""
    mine = cfg.qos_named(job.qos)
    prio = mine.priority if mine else 0
    ok, later = [], []
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


def choose(job: Job, free_by_node: dict, pool, now: float) -> Choice | None:
    """The best victim set over all nodes, or None. `free_by_node` maps a node name to its Free
    (capacity.Free) for nodes that could hold the job; `pool` are the candidate victims."""
    by_node: dict[str, list[Job]] = {}
    for v in pool:
        for node, _ in v.on_nodes:        # a gang victim frees room on each of its nodes
            if node in free_by_node:
                by_node.setdefault(node, []).append(v)
    best = None
    for name in sorted(by_node):
        got = _on_node(job, free_by_node[name], by_node[name], now)
        if got is not None:
            c = Choice(name, got, sum(lost_work(v, now) for v in got))
            if best is None or (len(c.victims), c.lost) < (len(best.victims), best.lost):
                best = c
    return best


def _on_node(job: Job, free, pool: list[Job], now: float):
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


def _greedy(job, free, pool):
    chosen = []
    for v in pool:
        chosen.append(v)
        if _covers(job, free, chosen):
            break
    return chosen


def _prune(job, free, chosen):
    chosen = list(chosen)
    for v in reversed(list(chosen)):
        rest = [c for c in chosen if c is not v]
        if _covers(job, free, rest):
            chosen = rest
    return tuple(chosen)


def _covers(job: Job, free, victims) -> bool:
    """Whether the node's free resources plus what the victims hold would fit the job."""
    cpus = free.cpus + sum(v.cpus for v in victims)
    mem = free.mem + sum(v.mem for v in victims)
    slots = free.slots + len(victims)
    gpus = len(free.matching(job))
    if job.gpus:
        models = {g.uuid: g.model for g in free.node.gpus}
        gpus += sum(1 for v in victims for u in v.gpu_uuids if u in models and (not job.gpu_type or models[u] == job.gpu_type))
    return slots >= 1 and cpus >= job.cpus and mem >= job.mem and gpus >= job.gpus
