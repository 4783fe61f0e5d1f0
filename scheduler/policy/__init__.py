"""plan(snapshot, config) -> Plan: the whole scheduling decision, as a pure function.

Passes, in order: expire jobs past their queue wait; order the rest (QoS, age, id); for each, check
account caps, find the best-fit node, then check every budget at that node's rate. Everything that
fits is admitted in this one pass. Each job left pending gets exactly one reason.

No Redis, no clock, no randomness: `snapshot.now` is the time, and iteration is in sorted order.
"""
from .. import ledger, states
from ..units import fmt_size
from ..config import Config
from ..model import Job, Snapshot
from ..plan import Expire, Pending, Place, Plan
from . import capacity
from .budget import BudgetBook, never_affordable
from .order import ordered
from .quota import Usage

__all__ = ["plan", "refusal"]


def plan(snap: Snapshot, cfg: Config) -> Plan:
    running = [j for j in snap.jobs if j.state in states.ON_NODE]
    pending = [j for j in snap.jobs if j.state == states.PENDING]
    expires, waiting = _expire(pending, snap.now)
    free = capacity.Placer(capacity.free_capacity(snap.nodes, running, snap.now))
    # A copy of the free capacity at the start of the pass tells `Priority` (higher jobs took the
    # room) apart from `Resources` (there was no room to begin with).
    initial = capacity.Placer(capacity.free_capacity(snap.nodes, running, snap.now))
    usage = Usage(running)
    book = BudgetBook(cfg, dict(snap.spent), running, snap.now)
    places, pend = [], []
    for job in ordered(waiting, cfg):
        verdict = _consider(job, free, initial, usage, book, cfg)
        if isinstance(verdict, Place):
            places.append(verdict)
        else:
            pend.append(Pending(job.id, *verdict))
    return Plan(tuple(places), tuple(expires), tuple(pend))


def _expire(pending, now: float):
    expires, waiting = [], []
    for j in sorted(pending, key=lambda j: j.id):
        if j.max_wait is not None and now - j.submit_time >= j.max_wait:
            expires.append(Expire(j.id, f"waited {now - j.submit_time:.0f}s, over --max-wait {j.max_wait}s"))
        else:
            waiting.append(j)
    return expires, waiting


def _consider(job: Job, free, initial, usage: Usage, book: BudgetBook, cfg: Config):
    """A Place for the job, or the (reason, detail) that keeps it pending."""
    if job.held:
        return states.HELD, "held (labq release ID to let it run)"
    if job.begin is not None and job.begin > book.now:
        return states.BEGIN_TIME, f"not before --begin, {job.begin - book.now:.0f}s from now"
    capped = usage.blocked(job, cfg)
    if capped:
        return capped
    spot = free.find(job)
    if spot is None:
        return _no_room(job, free, initial)
    model = next((g.model for g in spot.matching(job)), "")
    commit, rates = book.quote(job, model)
    broke = book.blocked(commit)
    if broke:
        return broke
    gpus = free.take(spot, job)
    usage.add(job)
    book.commit(commit)
    cost_rate = _currency_rate(job, model, cfg)
    return Place(job.id, spot.node.name, gpus, commit, rates, cost_rate)


def _no_room(job: Job, free, initial):
    if not free.free:
        return states.NODE_DOWN, "no node is up"
    if initial.fits_unchanged(job):
        return states.PRIORITY, "higher-priority jobs took the free resources in this pass"
    return states.RESOURCES, f"no up node has {_request(job)} free"


def _request(job: Job) -> str:
    gpu = f"{job.gpus}x{job.gpu_type or 'GPU'}, " if job.gpus else ""
    return f"{gpu}{job.cpus} CPUs, {fmt_size(job.mem)} and a slot"


def _currency_rate(job: Job, model: str, cfg: Config) -> int:
    return ledger.rate(job, "usd", model, cfg)


def refusal(job: Job, nodes, cfg: Config) -> str | None:
    """Why the job must be refused at submit: no node could ever hold it, or no budget ever afford it."""
    holders = [n for n in nodes if capacity.could_ever_hold(job, n)]
    if not holders:
        biggest = max(nodes, key=lambda n: (len(n.gpus), n.cpus, n.mem), default=None)
        have = (f"largest node {biggest.name} has {len(biggest.gpus)} GPUs, {biggest.cpus} CPUs, "
                f"{biggest.mem >> 30}G" if biggest else "no node is registered")
        return f"no node could ever hold {_request(job)}: {have}"
    cheapest = min((g.model for n in holders for g in n.gpus if not job.gpu_type or g.model == job.gpu_type),
                   key=lambda m: cfg.rates.gpu_rate(m), default="")
    return never_affordable(job, cheapest, cfg)
