"""plan(snapshot, config) -> Plan: the whole scheduling decision, as a pure function.

Passes, in order: end the jobs that can no longer run (queue wait past --max-wait, a start that could not finish
before --deadline, a dependency that can never be satisfied with --kill-on-invalid-dep); order the rest by
multifactor priority (multifactor.py); then, for each job: hold/begin/dependency gates, caps and quotas (quota.py),
a best-fit node that delays no backfill reservation (capacity.py, backfill.py), protected capacity, and every
budget at that node's rate (budget.py). Everything that fits is admitted in this one pass. A job that is blocked
on capacity may preempt lower-QoS or borrowed work (preempt.py), else the top `backfill_depth` blocked jobs get
a reservation. Each job left pending gets exactly one reason.

No Redis, no clock, no randomness: `snapshot.now` is the time, and iteration is in sorted order.
"""
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import replace
from itertools import compress, repeat
from operator import attrgetter, eq

from .. import multifactor
from ..jobs import codes, states
from ..jobs.model import Job, Snapshot
from ..jobs.plan import Pending, Pendings, Place, Plan, Preempt, Start, Verdict, Why
from ..money import pricing
from ..settings.config import Config
from ..units import fmt_at
from . import capacity, classes, gang, preempt, settle, strict
from .backfill import Timelines
from .backlog import Backlog
from .budget import BudgetBook, Held as BudgetHeld
from .depend import Dependencies
from .expire import expire
from .queue import Queue
from .quota import Usage
from .refusal import request_text
from .seen import Seen
from .standing import Standing
from .tracks import Tracks

__all__ = ["plan", "plan_per_job", "Backlog", "expected_starts", "Standing"]


@settle.guarded
def plan(snap: Snapshot, cfg: Config, _begins: bool = False, queue: Queue | None = None,
         held: BudgetHeld | None = None, standing: Standing | None = None, backlog: Backlog | None = None,
         tracks: Tracks | None = None, settles: bool = True, seen: Seen | None = None, quiet: bool = False) -> Plan:
    """The plan, each class of alike jobs judged once (classes.py): the same admissions and reasons as
    `plan_per_job`, without looking at every blocked job one by one. `queue`: the caller's request-class index, kept
    from its last pass (queue.py); `held`: what the running jobs hold of some budgets, as the caller last summed it
    for the same running attempts (BudgetBook); `standing`: the free capacity and quota usage of the same running
    jobs (standing.py); the plan is the same without them. `backlog`: the pending jobs, kept in order by the caller
    (backlog.py), instead of those of `snap.jobs`: a backfill-off pass then costs what it judges. `tracks`: the
    running jobs' backfill timelines, kept by the caller from its last pass (tracks.py). `settles`: a pass may end
    early once settled (settle.py; off when it broke its invariant). `seen`: what changed since the caller's last
    snapshot (seen.py), which `queue` then files instead of reading every job; ignored unless it saw `snap`'s own
    jobs. `quiet`: the caller keeps no reasons; runs that change no record are not made (settle.passed_runs)."""
    # The running and the pending jobs, picked in C (a deep queue's pass reads each job once here),
    # or, with a Seen of this snapshot, as it found them by what changed.
    jobs = snap.jobs
    if seen is not None and seen.jobs is not jobs:
        seen = None
    said = list(map(attrgetter("state"), jobs)) if seen is None else []
    running = list(compress(jobs, map(states.ON_NODE.__contains__, said))) if seen is None else seen.running
    if backlog is not None:
        return _kept(snap, cfg, running, backlog, held, standing, queue, tracks, settles)
    deps = Dependencies(snap)
    p = _Pass(snap, cfg, running, deps, held, standing, tracks, settles)
    p.reserve_begins, p.quiet = _begins, quiet
    if queue is None:
        pending = list(compress(jobs, map(eq, said, repeat(states.PENDING))))
        expires, waiting = expire(pending, snap.now, deps)
        p.keep_earmarks(pending)
    else:
        # The kept Queue knows which jobs may expire or hold an earmark: the rest are not looked at.
        classes.file(queue, p, seen or list(compress(jobs, map(eq, said, repeat(states.PENDING)))), cfg)
        marked = list(queue.marked.values())
        expires, _ = expire(marked, snap.now, deps)
        p.keep_earmarks(marked)
        waiting = []        # the walk reads the queue
        if expires:
            queue.drop({e.job_id for e in expires}, classes.group_key)
    # Backfill off, no kept queue: the walk stops at the blocker (strict.py).
    if queue is not None or not strict.applies(cfg) or not strict.run(p, waiting, cfg):
        classes.run(p, waiting, cfg, queue)
    return Plan(tuple(p.places), tuple(expires), Pendings(p.pending, p.runs), tuple(p.preempts), tuple(p.starts),
                blocker=p.blocker.id if p.blocker else None)     # named once, not behind it


def _kept(snap: Snapshot, cfg: Config, running: list[Job], backlog: Backlog, held: BudgetHeld | None,
          standing: Standing | None, queue: Queue | None, tracks: Tracks | None, settles: bool) -> Plan:
    """plan() over a kept Backlog; a pass its walk cannot take (strict.run_kept) takes the list
    (through `queue`, the caller's kept Queue, if any)."""
    if backlog.deps:        # dependency targets may be pending: the index reads every active job
        snap = replace(snap, jobs=(*running, *backlog.jobs.values()))
    deps = Dependencies(snap)
    p = _Pass(snap, cfg, running, deps, held, standing, tracks, settles)
    expires, _ = expire(list(backlog.marked.values()), snap.now, deps)
    if expires or not strict.run_kept(p, backlog, cfg):
        gone = {e.job_id for e in expires}
        waiting = [j for j in backlog.jobs.values() if j.id not in gone]
        p.keep_earmarks(backlog.earmarked.values())
        if queue is not None:
            classes.file(queue, p, waiting, cfg)
            classes.run(p, waiting, cfg, queue)
        elif not strict.applies(cfg) or not strict.run(p, waiting, cfg):
            classes.run(p, waiting, cfg)
    return Plan(tuple(p.places), tuple(expires), Pendings(p.pending, p.runs), tuple(p.preempts), tuple(p.starts),
                blocker=p.blocker.id if p.blocker else None)     # named once, not behind it


def plan_per_job(snap: Snapshot, cfg: Config, _begins: bool = False) -> Plan:
    """Every pending job judged in priority order, one by one: the reference `plan` must equal."""
    running = [j for j in snap.jobs if j.state in states.ON_NODE]
    pending = [j for j in snap.jobs if j.state == states.PENDING]
    deps = Dependencies(snap)
    expires, waiting = expire(pending, snap.now, deps)
    order = multifactor.ordered(waiting, snap.now, dict(snap.usage), cfg)
    p = _Pass(snap, cfg, running, deps)
    p.reserve_begins = _begins
    p.keep_earmarks(pending)
    for job in order:
        p.consider(job)
    return Plan(tuple(p.places), tuple(expires), tuple(p.pending), tuple(p.preempts), tuple(p.starts))


def expected_starts(snap: Snapshot, cfg: Config, depth: int = 500) -> dict[int, float]:
    """When each pending job is expected to start (`labq stat --start`, `sub --test-only`): the plan
    run with a reservation for every blocked job, up to `depth` of them (conservative backfill over
    running jobs' time limits). Jobs that would start now get `snap.now`; unknown ones are absent."""
    p = plan(snap, replace(cfg, backfill_depth=max(depth, cfg.backfill_depth), preemption=False), _begins=True)
    out = {x.job_id: snap.now for x in p.places}
    out.update((s.job_id, s.at) for s in p.starts)
    return out


class _Pass:
    """The working state of one pass: free capacity, quota usage, budget commitments, reservations."""

    def __init__(self, snap: Snapshot, cfg: Config, running: list[Job], deps: Dependencies,
                 held: BudgetHeld | None = None, standing: Standing | None = None,
                 tracks: Tracks | None = None, settles: bool = True) -> None:
        self.snap, self.cfg, self.now, self.running, self.deps = snap, cfg, snap.now, running, deps
        self.tracks, self.settles, self.quiet = tracks, settles, False
        # The free capacity at the start of the pass, kept unchanged, tells `Priority` (higher jobs
        # took the room) apart from `Resources` (there was no room to begin with).
        if standing is None:
            self.free = capacity.Placer(capacity.free_capacity(snap.nodes, running, snap.now))
            self.initial = self.free.copy()
            self.usage = Usage(running, cfg, sum(len(f.gpus) for f in self.free.free.values()))
        else:
            self.free = standing.placer.copy()
            self.initial = standing.placer.view()
            self.usage = standing.usage.copy()
        # A borrower that may not be preempted again could not be reclaimed: it may hold only GPUs
        # no account is guaranteed (the up GPUs beyond the sum of guarantees), or a guarantee would
        # wait for its time limit. `stuck`: what such borrowers hold now.
        self.slack: int | None = None
        self.stuck = 0
        if self.usage.guarantees:
            up = sum(len(n.gpus) for n in snap.nodes if capacity.node_is_up(n, snap.now))
            self.slack = up - sum(a.guarantee for a in cfg.accounts)
            self.stuck = sum(j.total_gpus for j in running if j.borrowed and not preempt.may_be_preempted_again(j, cfg))
        self.book = BudgetBook(cfg, dict(snap.spent), running, snap.now, held)
        self.places: list[Place] = []
        self.pending: list[Pending] = []
        # (ids, verdict) of a class's jobs judged at once (classes.py)
        self.runs: list[tuple[Sequence[int], Verdict]] = []
        self.preempts: list[Preempt] = []
        self.starts: list[Start] = []
        self.placed: list[tuple[Job, str, tuple[str, ...]]] = []
        self.timelines: Timelines | None = None
        self.blocker: Job | None = None      # backfill off: the first job blocked on capacity
        self.doomed: set[int] = set()         # victims chosen in this pass
        self.draining: dict[int, list[Job]] = {}
        self.models: dict[str, str] = {}      # gpu_type -> a model that serves it (budget quotes)
        # job id -> [(spot, what is held there for it until its turn)]
        self.earmarked: dict[int, list[tuple[capacity.Free, capacity.Held]]] = {}
        self.reserve_begins = False           # expected_starts: a --begin job is reserved from its begin
        self.no_victims: list[tuple[int, bool, capacity.Shape]] = []  # (QoS priority, reclaim, request shape)
        self.no_room_text: dict[capacity.Shape, str] = {}     # that found none; shape -> "no up node has ... free"
        self._lowest_victim: tuple[int | None, ...] = ()      # (the lowest QoS priority of a possible victim,)
        for j in running:
            if j.state == states.PREEMPTING and j.preempted_for is not None:
                self.draining.setdefault(j.preempted_for, []).append(j)

    def version(self) -> tuple[int, ...]:
        """What a verdict may have changed in this pass's state (classes.py caches verdicts per
        version): admissions, preemptions, reservations, takes, holds and unholds of free capacity,
        the backfill-off blocker, requests found to have no victims."""
        return (len(self.places), len(self.preempts), len(self.starts), self.free.changes, id(self.blocker),
                len(self.no_victims))

    def keep_earmarks(self, pending: Iterable[Job]) -> None:
        """Before anyone is placed, set aside the room of each preemptor that waits for its victims
        (or whose victims have just stopped): the GPUs it preempted for are its own until it starts or
        gives up, whatever ranks above it now. Else a borrower ranked higher would take them back and
        the reclaim would start over, for ever."""
        for j in sorted((j for j in pending if j.earmark), key=lambda j: j.id):
            # A gang's earmark names each of its nodes (gang.py); a gang missing one keeps none.
            names = gang.earmarked_nodes(j.earmark)
            spots = [s for s in (self.free.free.get(n) for n in names) if s is not None]
            if spots and len(spots) == len(names):
                self.earmarked[j.id] = [(s, self.free.hold(s, j, set(j.earmark_gpus))) for s in spots]

    def consider(self, job: Job) -> None:
        verdict = self.judge(job)
        if isinstance(verdict, Place):
            self.places.append(verdict)
        else:
            self.pending.append(Pending(job.id, *verdict))

    def judge(self, job: Job) -> Place | Why:
        """The job's turn: the room earmarked for it goes back to the pool, then its verdict."""
        for kept in self.earmarked.pop(job.id, ()):
            self.free.unhold(*kept)
        return self._verdict(job)

    def _verdict(self, job: Job) -> Place | Why:
        """A Place for the job, or the (reason, detail) that keeps it pending."""
        now = self.now
        if job.held:
            if job.reason == states.CRASH_GUARD:
                return states.CRASH_GUARD, job.detail
            return states.HELD, "held (labq release ID to let it run)"
        if job.begin is not None and job.begin > now:
            if self.reserve_begins and self.cfg.backfill_depth > len(self.starts):
                self._reserve(job, job.begin)
            return states.BEGIN_TIME, f"not before --begin, {fmt_at(job.begin)}"
        if job.eligible_time is not None and job.eligible_time > now:
            return states.BEGIN_TIME, f"retry backoff: eligible again at {fmt_at(job.eligible_time)}"
        if job.deps:
            dep = self.deps.verdict(job)
            if dep:
                return dep
        capped = self.usage.blocked(job)
        if capped:
            return capped
        if job.nodes > 1:
            return gang.verdict(self, job)
        kept = self.free.free.get(job.earmark) if job.earmark else None
        if kept is not None and kept.fits(job):
            # Its own room, set aside since it preempted: no reservation or blocker was ever given it.
            return self._admit(job, kept, job.earmark_gpus)
        if self.blocker is not None:
            return states.PRIORITY, codes.BEHIND_BLOCKER
        accept = None
        if self.timelines is not None and self.timelines.reserved:
            accept = lambda f: self.timelines.fits_now(job, f.node.name)   # noqa: E731
        spot, roomy = self._elsewhere(job, accept)
        if spot is None:
            spot, roomy = self.free.find(job, accept)
        if spot is not None:
            return self._admit(job, spot)
        return self._blocked(job, roomy)

    def _elsewhere(self, job: Job, accept: Callable[[capacity.Free], bool] | None
                   ) -> tuple[capacity.Free | None, bool]:
        """A job whose last attempt was lost with its node (or never taken up there) goes to
        another node when one can hold it (capacity.avoided); (None, False) otherwise."""
        avoid = capacity.avoided(job)
        if not avoid:
            return None, False
        return self.free.best_fit(job, lambda f: f.node.name not in avoid and (accept is None or accept(f)))

    def _admit(self, job: Job, spot: capacity.Free | list[capacity.Free], prefer: Collection[str] = ()) -> Place | Why:
        """Place the job on `spot`, or a gang on every spot of the list, once the protected capacity,
        its budgets (for all its nodes) and the borrow slack allow it."""
        spots = spot if isinstance(spot, list) else [spot]
        protected = self.usage.protected_for(job)
        if protected:
            return protected
        model = next((g.model for g in spots[0].matching(job)), "")
        commit, rates = self.book.quote(job, model, spots[0].node)
        broke = self.book.blocked(commit)
        if broke:
            return broke
        borrowed = self.usage.borrows(job)
        if borrowed and self.slack is not None and not preempt.may_be_preempted_again(job, self.cfg):
            if self.stuck + job.total_gpus > self.slack:
                return states.ACCOUNT_GPU_LIMIT, (f"preempted {job.preempt_count} times (max_preemptions): it may no "
                                                  f"longer borrow GPUs other accounts are guaranteed, only run within "
                                                  f"account {job.account}'s guarantee")
            self.stuck += job.total_gpus
        parts = tuple((s.node.name, self.free.take(s, job, prefer=prefer)) for s in spots)
        self.usage.add(job)
        self.book.commit(commit)
        for name, gpus in parts:
            self.placed.append((job, name, gpus))
            if self.timelines is not None:
                self.timelines.place(job, name, gpus)
        return Place(job.id, parts[0][0], tuple(u for _, g in parts for u in g), commit, rates,
                     pricing.rate(job, "usd", model, self.cfg, spots[0].node), borrowed, parts if len(parts) > 1 else ())

    def _blocked(self, job: Job, roomy: bool) -> Why:
        """The job found no node (a gang: not enough nodes) it may start on now: wait for its victims,
        preempt (preempt.preempt_for, for a gang too), or reserve. A gang's waiting and wording are gang.py's."""
        wait_for, preempt_for, no_room = (gang.steps(self) if job.nodes > 1
                                          else (self._wait_for, self._preempt, self._no_room))
        victims = self.draining.get(job.id)
        waiting = wait_for(job, victims) if victims else None
        if waiting:
            return waiting
        if roomy:
            return states.RESERVATION, settle.DELAYS
        may_preempt = self.cfg.preemption and self._may_preempt(job)
        may_reserve = self.cfg.backfill_depth > len(self.starts)
        # A job its budgets would not admit waits on them, not on room: it neither preempts, nor
        # reserves, nor (backfill off) holds every job behind it, whether or not it also fits.
        if may_preempt or may_reserve or self.cfg.backfill_depth == 0:
            broke = self._budget_even_if_room(job)
            if broke:
                return broke
        deferred = None
        if may_preempt:
            got = preempt_for(job)
            if isinstance(got, tuple):
                return got
            deferred = got
        if self.cfg.backfill_depth == 0:
            self.blocker = self.blocker or job
        elif may_reserve:
            self._reserve(job)
        return deferred or no_room(job)

    def _wait_for(self, job: Job, victims: list[Job]) -> Why | None:
        """PreemptingFor while its victims drain, its room kept. A job that gave its earmark up (a cap
        held it in a pass) takes it again only if what is free and what the victims hold still covers
        it; else it looks for room like any blocked job."""
        node = job.earmark or victims[0].node
        spot = self.free.free.get(node)
        if spot is None:
            return None
        if job.earmark == node:
            kept = job.earmark_gpus
            self.free.hold(spot, job, set(kept))
        else:
            held = self.free.hold(spot, job)
            kept = preempt.earmark(job, held[0], victims, spot.node)
            if len(kept) < job.gpus:
                self.free.unhold(spot, held)
                return None
        return states.PREEMPTING_FOR, (f"waiting for {len(victims)} preempted job(s) on {node} to stop: "
                                       + ", ".join(v.display_id for v in victims)), node, kept

    def _budget_even_if_room(self, job: Job) -> Why | None:
        """Preempting or reserving for a job its budgets would not admit helps nobody."""
        if job.gpu_type not in self.models:
            self.models[job.gpu_type] = next((g.model for n in self.snap.nodes for g in n.gpus
                                              if not job.gpu_type or g.model == job.gpu_type), "")
        return self.book.blocked(self.book.quote(job, self.models[job.gpu_type])[0])

    def lowest_victim(self) -> int | None:
        """The lowest QoS priority of a running job that may be preempted (None: no such job). Only a
        pass that may preempt asks, once: a walk over every running job."""
        if not self._lowest_victim:
            prios = [q.priority for j in self.running
                     if j.state == states.RUNNING and (q := self.cfg.qos_named(j.qos)) and preempt.preemptible(j, self.cfg)]
            self._lowest_victim = (min(prios, default=None),)
        return self._lowest_victim[0]

    def _may_preempt(self, job: Job) -> bool:
        """A cheap test before the victim search: some running job could be a victim, and no request
        at least as large, of no higher QoS, already found none in this pass (victims only get fewer
        and free room only shrinks during a pass)."""
        lowest = self.lowest_victim()
        if lowest is None and not self.usage.guarantees:
            return False
        q = self.cfg.qos_named(job.qos)
        prio, reclaim = (q.priority if q else 0), self.usage.within_guarantee(job)
        if not reclaim and (lowest is None or prio <= lowest):
            return False
        shape = capacity.shape(job)
        return not any(r == reclaim and p >= prio and capacity.covers(f, shape) for p, r, f in self.no_victims)

    def _preempt(self, job: Job) -> Why | None:
        # A method, not a direct call, because classes.py counts a one-node job's calls into it.
        return preempt.preempt_for(self, job)

    def _reserve(self, job: Job, not_before: float | None = None) -> None:
        if job.nodes > 1:
            return gang.reserve(self, job, not_before)
        if self.timelines is None:
            self.timelines = Timelines([f.node for f in self.free.free.values()], self.running, self.placed,
                                       self.now, self.cfg, self.tracks)
        got = self.timelines.reserve(job, capacity.could_ever_hold, not_before)
        if got is not None:
            self.starts.append(Start(job.id, got[1], got[0]))

    def _no_room(self, job: Job) -> Why:
        if not self.free.free:
            return states.NODE_DOWN, "no node is up"
        start = self.starts[-1] if self.starts and self.starts[-1].job_id == job.id else None
        when = f"; expected to start at {fmt_at(start.at)} on {start.node}" if start else ""
        if self.initial.fits_unchanged(job):
            return states.PRIORITY, "higher-priority jobs took the free resources in this pass" + when
        # The same text for every job of a request shape: formatted once a pass (a fifth of the
        # per-job cost in a full cluster, where most jobs end here).
        req = capacity.shape(job)
        text = self.no_room_text.get(req)
        if text is None:
            text = self.no_room_text[req] = f"no up node has {request_text(job)} free"
        return states.RESOURCES, text + when
