"""The one plan applier: what a Plan does to the job records, re-checked against the state it is
applied to. The daemon (`planning.Planner._schedule`), the bookkeeper's stop policy and the simulator all
call `apply_plan`; each commits (or replays) what it returns.

Like Nomad's plan applier, it trusts nothing the planner said about the state: each decision is
checked against the records and the nodes it applies to, and one that no longer holds is left
out and reported (`Applied.rejected`) rather than applied. A placement needs its job still
pending and not held, its node up, and the room on that node (a slot, the CPUs, the memory and the
very GPUs it names, of the model asked for) free after the jobs already there and the placements
applied before it in the same plan. An expiry or a reason needs the job pending; a preemption or
a cancel needs it running (not already draining; a cancel, not already cancelling); a job changes at most
once per plan. In the daemon nothing is rejected unless the policy has a bug: the plan was made
from the same state. The check makes such a bug a warning instead of two jobs on one GPU.

A reason is written when it changed, except that a record saying Resources keeps it where the pass
says Priority because higher-priority jobs took the room free at its start (`_stays`): after the pass
both are true, and the flips as room frees and refills were most of the records a pass rewrote.

Pure: it computes the new records and the controls to send; it writes nothing and reads no clock
(`now` is the tick's).
"""
from __future__ import annotations

from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import compress, repeat
from operator import is_not

from ..jobs import states
from ..jobs.model import Job, Node
from ..jobs.plan import Cancel, Expire, Pending, Place, Plan, Preempt, Verdict, pending_runs
from ..policy.capacity import Free, node_is_up
from . import transitions as tr
from .change import Change

# One decision of a plan, as the applier checks it against the state.
Decision = Place | Expire | Preempt | Cancel | Pending


@dataclass(frozen=True, slots=True)
class Rejected:
    """A decision of the plan that the state it was applied to no longer allows, and why."""
    decision: Decision
    why: str


@dataclass(frozen=True, slots=True)
class Applied:
    """What applying a plan did: the new records and the controls to send, in the order the
    daemon writes them, and what it refused."""
    started: tuple[Job, ...] = ()      # admitted (tr.admit): each goes onto its node's dispatch list
    expired: tuple[Job, ...] = ()      # pending jobs ended without running (tr.end_pending)
    stopping: tuple[Job, ...] = ()     # preempting (tr.preempting) or cancel requested
    preempts: tuple[Preempt, ...] = ()     # the Preempts applied (the simulator times their ends)
    controls: tuple[tuple[int, str], ...] = ()   # (job id, "preempt:GRACE" | "cancel")
    pended: tuple[Job, ...] = ()       # pending jobs whose reason, detail or earmark changed
    rejected: tuple[Rejected, ...] = ()

    @property
    def changed(self) -> tuple[Job, ...]:
        """The records that change state: written with the dispatch and the controls, atomically."""
        return self.started + self.expired + self.stopping

    @property
    def change(self) -> Change:
        """What to write: the records that change state, with the dispatch and the controls, in one
        transaction. The new reasons (`pended`) are not in it: the daemon writes many in chunks."""
        return Change(jobs=list(self.changed), dispatch=list(self.started), controls=list(self.controls))


@dataclass
class _Work:
    pending: Mapping[int, Job]
    running: Mapping[int, Job]
    nodes: Iterable[Node]
    now: float
    rooms: dict[str, Free | None] = field(default_factory=dict)
    holders: dict[str, list[Job]] | None = None
    named: dict[str, Node] | None = None
    free: Mapping[str, Free] | None = None
    touched: set[int] = field(default_factory=set)
    rejected: list[Rejected] = field(default_factory=list)

    def reject(self, decision: Decision, why: str) -> None:
        self.rejected.append(Rejected(decision, why))

    def waiting(self, decision: Decision, job_id: int) -> Job | None:
        """The pending job a decision is about, or None (rejected) when it is not pending any more."""
        j = self.pending.get(job_id)
        if j is None or j.state != states.PENDING:
            self.reject(decision, f"job {job_id} is not pending" + (f" ({j.state})" if j is not None else ""))
            return None
        if job_id in self.touched:
            self.reject(decision, f"job {job_id} was already changed by this plan")
            return None
        return j

    def on_node(self, decision: Decision, job_id: int) -> Job | None:
        """The running job a stop is about, or None (rejected) when it is not running any more (or,
        for a cancel, is already being cancelled)."""
        j = self.running.get(job_id)
        if j is None or j.state != states.RUNNING or job_id in self.touched:
            self.reject(decision, f"job {job_id} is not running" + (f" ({j.state})" if j is not None else ""))
            return None
        if isinstance(decision, Cancel) and j.cancel_requested:
            self.reject(decision, f"job {job_id} is already being cancelled")
            return None
        return j


class Confirmed:
    """Which pending jobs' records the applier found to have their verdict, kept from pass to pass by
    a caller that applies plans to one changing table (the daemon: state.SchedulerState.confirmed) and
    tells it the ids whose records it replaced or removed since (`forget`). A job of a run whose
    verdict equals the one its record was confirmed with, the record unchanged since, gets no new
    record again: it is skipped without reading its record. Reading each record of every run was
    ~20 ms a pass at 60,000 held jobs (~350 ns a job, memory-bound: the records' cache lines); this
    reads the ids and one dict (tests/property/test_applier_confirmed.py: the same as without)."""

    def __init__(self) -> None:
        self.table: object = None                   # the records' table the ids are of
        self.ids: dict[int, Verdict] = {}           # id -> the verdict its record has, as one object
        self.verdicts: dict[Verdict, Verdict] = {}  # the last pass's verdicts: each equal one as that object
        self._now: dict[Verdict, Verdict] = {}      # this pass's

    def forget(self, ids: Iterable[int]) -> None:
        pop = self.ids.pop
        for i in ids:
            pop(i, None)

    def of(self, table: object, changed: Iterable[int]) -> "Confirmed":
        """This, for `table` (another table than the last: nothing confirmed), `changed` forgotten."""
        if table is not self.table:
            self.table = table
            self.ids.clear()
        self.forget(changed)
        return self

    def one(self, verdict: Verdict) -> Verdict:
        """The object standing for `verdict` (equal verdicts of two passes are one object)."""
        got = self._now.get(verdict)
        if got is None:
            got = self._now[verdict] = self.verdicts.get(verdict, verdict)
        return got

    def unconfirmed(self, ids: Sequence[int], verdict: Verdict) -> Sequence[int]:
        """`ids` but those confirmed with `verdict` (as `one` gave it), in order."""
        return list(compress(ids, map(is_not, map(self.ids.get, ids), repeat(verdict))))

    def passed(self) -> None:
        self.verdicts, self._now = self._now, {}


def apply_plan(plan: Plan, pending: Mapping[int, Job], running: Mapping[int, Job], nodes: Iterable[Node],
               now: float, reasons: bool = True, confirmed: Confirmed | None = None,
               free: Mapping[str, Free] | None = None) -> Applied:
    """Apply `plan` to the pending and running jobs (one mapping may hold both: the state decides)
    on `nodes` at `now`. `reasons`: whether a new reason alone makes a new record (the daemon shows
    it in `labq stat`); without it only an earmark change does (the simulator keeps reasons apart).
    `free`: the room free on each up node before the plan, as the caller keeps it (the replay: its
    policy.Standing's), instead of summing every running job's holdings on a plan's first placement.
    `confirmed` (with `reasons` only): what the caller's earlier passes found unchanged, told the
    ids whose records changed since; it learns this pass's."""
    if confirmed is not None and not reasons:
        raise ValueError("a Confirmed keeps the records that have their reasons: apply with reasons")
    w = _Work(pending, running, nodes, now, free=free)
    started = [j for j in (_place(w, p) for p in plan.places) if j is not None]
    expired = []
    for e in plan.expires:
        j = w.waiting(e, e.job_id)
        if j is not None:
            w.touched.add(j.id)
            expired.append(tr.end_pending(j, e.state, e.detail, now))
    stopping, preempts, controls = [], [], []
    for pr in plan.preempts:
        j = w.on_node(pr, pr.job_id)
        if j is not None:
            w.touched.add(j.id)
            stopping.append(tr.preempting(j, pr.for_job, pr.detail, now))
            preempts.append(pr)
            controls.append((pr.job_id, f"preempt:{pr.grace}"))
    for c in plan.cancels:
        j = w.on_node(c, c.job_id)
        if j is not None:
            w.touched.add(j.id)
            stopping.append(replace(j, cancel_requested=True, detail=c.detail))
            controls.append((c.job_id, "cancel"))
    pended = _pended(w, plan, reasons, confirmed)
    return Applied(tuple(started), tuple(expired), tuple(stopping), tuple(preempts), tuple(controls),
                   tuple(pended), tuple(w.rejected))


def _pended(w: _Work, plan: Plan, reasons: bool, confirmed: Confirmed | None) -> list[Job]:
    """The new records of the plan's pending verdicts (`_pend`), where one changes a record."""
    # By runs (a class's jobs that took one verdict, plan.Pendings): no Pending object per job, and
    # the common case (a pending job whose record already says it) in one comprehension per run.
    pended: list[Job] = []
    if confirmed is not None:
        confirmed.forget(w.touched)     # decided otherwise by this plan: checked, and rejected, as ever
    for ids, verdict in pending_runs(plan.pending):
        if confirmed is not None:
            verdict = confirmed.one(verdict)
            ids = confirmed.unconfirmed(ids, verdict)
            if not ids:
                continue
        if len(ids) == 1:
            refused = len(w.rejected)
            if (j := _pend(w, ids[0], verdict, reasons)) is not None:
                pended.append(j)
            elif confirmed is not None and len(w.rejected) == refused:
                confirmed.ids[ids[0]] = verdict
        else:
            todo = _changed(w, ids, verdict, reasons)
            pended += [j for i in todo if (j := _pend(w, i, verdict, reasons)) is not None]
            if confirmed is not None:
                # What _changed left out has the verdict; what it kept gets a new record (or is
                # rejected): that record, committed, is told changed and looked at next pass.
                kept = set(todo)
                confirmed.ids.update(dict.fromkeys(ids, verdict) if not kept else
                                     ((i, verdict) for i in ids if i not in kept))
    if confirmed is not None:
        confirmed.passed()
    return pended


def _place(w: _Work, p: Place) -> Job | None:
    j = w.waiting(p, p.job_id)
    if j is None:
        return None
    if j.held:
        w.reject(p, f"job {j.id} is held")
        return None
    # A gang (-N) is placed on every one of its nodes or on none: each part is checked first.
    parts = p.parts or ((p.node, p.gpus),)
    if len(parts) != j.nodes or len({n for n, _ in parts}) != len(parts):
        w.reject(p, f"job {j.id}: names {len(parts)} distinct node(s) of {[n for n, _ in parts]} for a job of "
                    f"{j.nodes}")
        return None
    rooms: list[tuple[Free, tuple[str, ...]]] = []
    for node, gpus in parts:
        room = _room(w, node)
        why = _lacks(room, j, gpus) if room is not None else "the node is not up"
        if why or room is None:
            w.reject(p, f"job {j.id} on {node}: {why}")
            return None
        rooms.append((room, gpus))
    for room, gpus in rooms:
        room.occupy(j, gpus)
    w.touched.add(j.id)
    return tr.admit(j, p, w.now)


def _lacks(room: Free, j: Job, gpus: tuple[str, ...]) -> str:
    """Why the job's part naming `gpus` does not fit `room`, or "" when it does: the policy's own rule
    (Free.fits: a slot, the CPUs, the memory, enough free GPUs of the model asked for), then the very
    GPUs the plan names, each free and of that model."""
    if not room.fits(j):
        if room.slots < 1:
            return "no free slot"
        if room.cpus < j.cpus or room.mem < j.mem:
            return f"needs {j.cpus} CPUs and {j.mem} MB, {room.cpus} and {room.mem} free"
    if len(gpus) != j.gpus or len(set(gpus)) != len(gpus):
        return f"names {len(gpus)} GPUs for a job of {j.gpus}"
    free = {g.uuid: g.model for g in room.gpus}
    busy = [u for u in gpus if u not in free]
    if busy:
        return f"GPU {busy[0]} is not free"
    wrong = [u for u in gpus if j.gpu_type and free[u] != j.gpu_type]
    if wrong:
        return f"GPU {wrong[0]} is a {free[wrong[0]]}, not a {j.gpu_type}"
    return ""


def _free(node: Node, holders: list[Job]) -> Free:
    """What is free on one node after the jobs on it (then after each placement applied: Free.occupy)."""
    held = {u for j in holders for u in j.gpu_uuids}    # a gang's: all its parts' (UUIDs are unique)
    return Free(node, node.cpus - sum(j.cpus for j in holders), node.mem - sum(j.mem for j in holders),
                node.slots - len(holders), [g for g in node.gpus if g.uuid not in held])


def _room(w: _Work, name: str) -> Free | None:
    """The room on node `name` (None: not up), worked out on its first placement in this plan."""
    if name not in w.rooms and w.free is not None:
        # A copy: placements occupy it. At 512 GPUs the sum over ~300 running jobs a placing plan was
        # an eighth of a replay through plan() (16 of 121 s profiled, t9 20k; plan() 66 s).
        spot = w.free.get(name)
        w.rooms[name] = spot.copy() if spot is not None else None
    elif name not in w.rooms:
        if w.holders is None:    # the jobs on each node: one pass, and only for a plan that places
            w.holders = {}
            for r in w.running.values():
                if r.state in states.ON_NODE:
                    for part, _ in r.on_nodes:     # a gang holds room on each of its nodes
                        w.holders.setdefault(part, []).append(r)
        if w.named is None:      # by name, once: a plan may place on each of a thousand nodes
            w.named = {n.name: n for n in w.nodes}
        node = w.named.get(name)
        up = node is not None and node_is_up(node, w.now)
        w.rooms[name] = _free(node, w.holders.get(name, [])) if up and node is not None else None
    return w.rooms[name]


# A Priority verdict's detail when the room free at the start of the pass was taken by higher-priority
# jobs (policy._Pass._no_room, gang.py), and what follows a detail when the job holds a reservation.
TOOK = "higher-priority jobs took the free resources in this pass"
AT = "; expected to start at "


def _stays(j: Job, verdict: Verdict) -> bool:
    """Whether a job's record keeps its Resources reason ("no up node has ... free") where the pass
    says Priority because higher-priority jobs took the room that was free at its start: after the
    pass both are true (what they took is not free), so the record says what it said, with the same
    expected start (reservation) and no earmark. Writing each flip as room frees and refills rewrote
    500-1,800 pending records a pass at 10,000 pending jobs, each filed again by the next pass."""
    reason, detail, earmark, gpus = verdict
    if reason != states.PRIORITY or j.reason != states.RESOURCES or earmark or j.earmark or gpus or j.earmark_gpus \
            or not detail.startswith(TOOK):
        return False
    at = j.detail.find(AT)
    return (j.detail[at:] if at >= 0 else "") == detail[len(TOOK):]


def _changed(w: _Work, ids: Iterable[int], verdict: Verdict, reasons: bool) -> list[int]:
    """The ids of a run that `_pend` must look at: all but the pending, untouched jobs whose record
    already has the verdict (the reason and detail too, with `reasons`, unless the record `_stays`)."""
    get, touched, pending = w.pending.get, w.touched, states.PENDING
    reason, detail, earmark, gpus = verdict
    if reasons:
        took = reason == states.PRIORITY and detail.startswith(TOOK)
        return [i for i in ids if (j := get(i)) is None or j.state != pending or i in touched
                or (j.reason != reason or j.detail != detail) and not (took and _stays(j, verdict))
                or j.earmark != earmark or j.earmark_gpus != gpus]
    return [i for i in ids if (j := get(i)) is None or j.state != pending or i in touched or j.earmark != earmark
            or j.earmark_gpus != gpus]


def _pend(w: _Work, job_id: int, verdict: Verdict, reasons: bool) -> Job | None:
    """The job's new record for its Pending (`verdict`: its fields after job_id), None if unchanged."""
    j = w.pending.get(job_id)
    if j is None or j.state != states.PENDING or job_id in w.touched:
        w.reject(Pending(job_id, *verdict), f"job {job_id} is not pending" + (f" ({j.state})" if j is not None else ""))
        return None
    if reasons:
        if (j.reason, j.detail, j.earmark, j.earmark_gpus) == verdict or _stays(j, verdict):
            return None
        return tr.pend(j, *verdict)
    if (j.earmark, j.earmark_gpus) == verdict[2:]:
        return None
    # The room a preemptor freed stays its own (plan() reads the earmark): kept in the record.
    return tr.pend(j, j.reason, j.detail, *verdict[2:])


def without(p: Plan, ids: Container[int]) -> Plan:
    """`p` without its verdicts and expiries on `ids`: a held rest's tasks that plan() saw and that
    are no records (state.held_tails)."""
    if not ids:
        return p
    return replace(p, pending=tuple(pd for pd in p.pending if pd.job_id not in ids),
                   expires=tuple(e for e in p.expires if e.job_id not in ids))


def without_flips(p: Plan, jobs: Mapping[int, Job]) -> Plan:
    """`p` without the Resources/Priority flips of jobs already waiting for room: what a pass that
    refills room freed within the tick leaves unwritten (planning.Planner._schedule)."""
    return replace(p, pending=tuple(pd for pd in p.pending if not _flip(jobs.get(pd.job_id), pd)))


def _flip(old: Job | None, pd: Pending) -> bool:
    return old is not None and {old.reason, pd.reason} <= {states.RESOURCES, states.PRIORITY} \
        and not (old.earmark or pd.earmark)


def changes(done: Applied, chunk: int) -> list[Change]:
    """What an applied pass writes, one transaction each: admissions with their dispatch, expiries and
    preemptions with the new reasons, or, where more than `chunk` jobs got a new reason, those after
    it in Changes of `chunk` (new reasons alone need no atomicity with anything: the first pass over
    a 100,000-task array never builds one 100 MB transaction)."""
    pended, change = list(done.pended), done.change
    out = []
    if change.jobs or len(pended) <= chunk:
        if len(pended) <= chunk:
            change.jobs += pended
        out.append(change)
    if len(pended) > chunk:
        out += [Change(jobs=pended[i:i + chunk]) for i in range(0, len(pended), chunk)]
    return out

