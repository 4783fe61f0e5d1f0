"""The scheduler's state: one object, what every decider reads and every committed Change updates.

`Scheduler` (loop.py) is a shell around it: it reads (the store), asks a decider for a Change,
and commits it (store/commit.py writes it, `SchedulerState.apply` takes it into memory). Nothing
here reads a clock or Redis: a test builds a state by hand and applies Changes to it.
"""
from collections import Counter
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from operator import attrgetter
from typing import Any, Generic, TypeVar, cast

from ..jobs import rest, states
from ..jobs.estimate import Estimator
from ..jobs.jobspec import Tasks
from ..jobs.model import Job, Node, Snapshot
from ..jobs.rest import Rest
from ..money import fairshare
from ..policy.depend import targets as dependency_targets
from ..policy.kept import Kept
from ..policy.seen import Told
from ..settings.config import Config
from . import transitions as tr
from .applier import Confirmed
from .change import Change, Read, Unread
from .crashguard import CrashGuard
from .index import Index

_ID = attrgetter("id")


class Tally:
    """Counts the submit handler checks, kept as jobs change instead of counted per submit
    (a scan of the whole queue per submit was 20 ms at 100,000 pending)."""

    def __init__(self, jobs: Iterable[Job] = ()) -> None:
        self.pending = 0
        self.pending_by_user: Counter[str] = Counter()
        self.active_by_user: Counter[str] = Counter()
        self.active_by_account: Counter[str] = Counter()
        self.on_node: dict[int, Job] = {}          # id -> job, the jobs holding a node (on_limit = "refuse" counts them)
        for j in jobs:
            self.add(j, +1)

    def add(self, job: Job, sign: int) -> None:
        self.active_by_user[job.user] += sign
        self.active_by_account[job.account] += sign
        if job.state == states.PENDING:
            self.pending += sign
            self.pending_by_user[job.user] += sign
        elif job.state in states.ON_NODE:
            if sign > 0:
                self.on_node[job.id] = job
            else:
                self.on_node.pop(job.id, None)

    def add_alike(self, job: Job, n: int) -> None:
        """`n` new jobs alike to `job` in user, account and state (an array's tasks) entered the table."""
        if job.state in states.ON_NODE:
            raise ValueError("add_alike counts jobs that hold no node")
        self.active_by_user[job.user] += n
        self.active_by_account[job.account] += n
        if job.state == states.PENDING:
            self.pending += n
            self.pending_by_user[job.user] += n

    def replace(self, old: Job | None, new: Job | None) -> None:
        """`old` (or None) left the active table, `new` (or None, when it ended) entered it."""
        if old is not None:
            self.add(old, -1)
        if new is not None:
            self.add(new, +1)


def learned_from(ended: Iterable[Job], cfg: Config) -> Estimator:
    """An estimator that has seen `ended` (the recent ended jobs, oldest end first): their last
    attempts, where they ended on the job's own terms."""
    est = Estimator.from_config(cfg)
    for job in sorted(ended, key=lambda j: (j.end_time or 0, j.id)):
        est.observe_ended(job)
    return est


T = TypeVar("T")


class OfState(Generic[T]):
    """A field of the SchedulerState, read and written through the object that holds the state as
    `state` (the shell's `cfg`, `jobs`...: what handlers.State, the metrics and the tests read)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, holder: Any, owner: type | None = None) -> T:
        return cast(T, getattr(holder.state, self.name))

    def __set__(self, holder: Any, value: T) -> None:
        setattr(holder.state, self.name, value)


@dataclass
class SchedulerState:
    cfg: Config                      # effective: the file's, with the bookkeeper's budgets (Scheduler._use_budgets)
    estimator: Estimator             # run times learned from ended jobs: stamped on each submit, fed at each end
    guard: CrashGuard
    jobs: dict[int, Job] = field(default_factory=dict)      # the active jobs, by id
    rests: dict[int, Rest] = field(default_factory=dict)    # array id -> a big array's tasks not yet records
    tally: Tally = field(default_factory=Tally)             # pending/active counts per user and account
    nodes: tuple[Node, ...] = ()
    usage: dict[str, tuple[float, float]] = field(default_factory=dict)   # fair share: account -> (value, as of)
    seq: int = 0                     # the last job id handed out
    seq_written: int = 0             # the last job id written to Redis
    kept: Kept = field(default_factory=Kept)    # plan()'s request classes and ordered backlog, pass to pass
    answered: dict[str, dict[str, Any] | None] = field(default_factory=dict)    # rid -> reply, for the requests of the read being handled
    down_since: dict[str, float] = field(default_factory=dict)   # node -> when its lease was first seen gone
    # When this scheduler could see Redis again after failing to (issue 35): nobody could beat or post
    # while it was away, so a runner's silence counts from then (events.py).
    sighted: float = float("-inf")
    ended: dict[int, str] = field(default_factory=dict)     # state of ended jobs pending jobs depend on
    ended_shown: dict[int, str] = field(default_factory=dict)   # their display ids, where not the id
    file_checkpoints: dict[int, float] = field(default_factory=dict)   # job -> newest checkpoint file reported
    freed: bool = False              # an attempt ended since the last plan (room to refill)
    last_plan: float = float("-inf")
    last_reasons: float = float("-inf")   # when a pass last wrote every pending job's new reason
    news: bool = True                # since the last plan, something a plan acts on changed (apply, see_nodes)
    tails: frozenset[int] = frozenset()     # ids of the held tasks the last snapshot held that are no records
    read: Read = field(default_factory=Read)    # what the tick read for the deciders beyond this state
    blocker: str | None = None       # Keys.blocker as this leader wrote it (Change.blocker); None: not yet
    confirmed: Confirmed = field(default_factory=Confirmed)     # the applier's, pass to pass
    index: Index = field(default_factory=Index)     # places, pending jobs with dependencies, ids touched
    plain_of: object = None          # the table the last pass's snapshot was a view of (pass_snapshot)

    def loaded(self, jobs: dict[int, Job], seq: int, rests: dict[int, Rest]) -> None:
        """The active jobs, the id sequence and the held arrays' rests as Redis holds them (a new
        leader's start)."""
        self.jobs, self.tally, self.rests, self.news = jobs, Tally(jobs.values()), rests, True
        self.confirmed, self.index, self.plain_of = Confirmed(), Index(), None
        self.read = Read()
        for r in rests.values():
            self.tally.add_alike(r.template, r.left)
        self.seq = self.seq_written = seq
        self.blocker = None     # whatever a predecessor left there is written over by the first pass

    def fresh_tasks(self, jobs: Sequence[Job], staged: Container[int]) -> bool:
        """Whether `jobs` are a new array's tasks as expand made them (consecutive ids, alike but for
        id and index), none of them in the table or `staged` (ids in the open batch) yet, in a state
        that holds no node."""
        if not isinstance(jobs, Tasks) or not jobs:
            return False
        first, n = jobs[0].id, len(jobs)
        if jobs[-1].id != first + n - 1 or jobs[0].array_id != first or jobs[0].state in states.ON_NODE:
            return False
        return all(i not in self.jobs and i not in staged for i in range(first, first + n))

    def usage_after(self, ended: Iterable[Job], now: float) -> dict[str, tuple[float, float]]:
        """Fair-share usage with every attempt that ends in `ended` added (GPU-equivalent seconds,
        decayed from then on): an attempt counts once, when the record first shows its end."""
        usage = self.usage
        half = self.cfg.priority.fairshare_half_life
        for j in ended:
            a, old = j.current, self.jobs.get(j.id)
            was = old.current if old is not None else None
            if old is None or a is None or a.end_time is None or was is None or was.attempt != a.attempt \
                    or was.end_time:
                continue
            ran = a.end_time - (a.dispatch_time or a.end_time)
            if ran > 0:
                usage = fairshare.add(usage, j.account, fairshare.weight(old) * ran, now, half)
        return usage

    def apply(self, change: Change, tasks: bool, usage: dict[str, tuple[float, float]]) -> None:
        """Take a committed Change's records into the table (`tasks`: a new array's, as fresh_tasks
        found them), its `rests` (Change.rests), and the fair-share usage they leave (usage_after,
        computed before)."""
        jobs, rests = change.jobs, change.rests
        self.news = self.news or _news(change, tasks, self.jobs, self.rests)
        for a, r in (rests or {}).items():
            # The counts the submit handler checks follow a rest's tasks (a task that leaves one
            # comes in as a record of the change).
            old = self.rests.get(a)
            if old is not None:
                self.tally.add_alike(old.template, -old.left)
            if r is None:
                self.rests.pop(a, None)
            else:
                self.tally.add_alike(r.template, r.left)
                self.rests[a] = r
        if tasks:
            # A new array's tasks, none known yet: taken as a whole (a loop per task was ~8 ms of a
            # 10,000-task submit).
            if jobs[0].state in states.ACTIVE:
                ids = range(jobs[0].id, jobs[0].id + len(jobs))
                self.jobs.update(zip(ids, jobs))
                self.tally.add_alike(jobs[0], len(jobs))
                self.index.added(self.jobs, ids, jobs)
        else:
            for j in jobs:
                self.put(j)
        self.usage = usage
        if change.ended is not None:
            # Learned once it is staged: a redelivered event finds the attempt closed (no result).
            self.estimator.observe_ended(change.ended)
            self.freed = True
            end = change.ended.attempts[-1]     # counted as attempt.guarded judged it (its end is set)
            self.guard.record(change.ended.user, end.outcome, end.end_time or 0.0)
        if change.health:
            self.see_health(change.health)
        if change.blocker is not None:
            self.blocker = change.blocker
        if change.nodes:
            self.see_admin(change.nodes)

    def see_admin(self, admin: Sequence[tuple[str, str | None]]) -> None:
        """Nodes drained or resumed (Change.nodes), as store/noderows.py reads them back: a node not
        down takes its admin state, or on resume is up again (unhealthy while a mark stays)."""
        states_ = dict(admin)
        self.nodes = tuple(n if n.name not in states_ or n.state == "down" else
                           replace(n, state=states_[n.name] or ("unhealthy" if n.reason else "up"))
                           for n in self.nodes)

    def see_health(self, health: Sequence[tuple[str, str | None]]) -> None:
        """Nodes marked unhealthy (an up one gets no work from this tick's plan on), or healthy again
        (news: a plan may place work there). A mark on a node not up keeps its reason only."""
        marks = dict(health)
        self.news = self.news or any(why is None for why in marks.values())
        self.nodes = tuple(n if n.name not in marks else
                           replace(n, state="up", reason="") if marks[n.name] is None and n.state == "unhealthy" else
                           replace(n, state="unhealthy" if n.state == "up" else n.state, reason=marks[n.name] or "")
                           if marks[n.name] is not None else n for n in self.nodes)

    def see_down(self, now: float) -> None:
        """When this scheduler first saw each node's lease gone (the fence margin counts from then)."""
        for n in self.nodes:
            if n.state == "down":
                self.down_since.setdefault(n.name, now)
            else:
                self.down_since.pop(n.name, None)

    def on_node(self) -> list[Job]:
        """The jobs holding a node, by id, as the tally keeps them: a walk of the whole table was
        ~1.4 ms of every tick at 10,000 pending (issue 39), for the few that run."""
        return sorted(self.tally.on_node.values(), key=_ID)

    def windows(self) -> Change | None:
        """The tasks plan() must see of each array kept as a rest not held, made records ahead of a
        pass (rest.topped_up): the slots of the up nodes (each start takes one), the blocked ones
        backfill reserves for, and one more to carry the array's reason; with burst tails on, at
        least a burst allowance (the window tests/property/test_array_window.py proves)."""
        if not self.rests:
            return None
        left, jobs = rest.topped_up(self.rests, self.jobs.values(), window(self.nodes, self.cfg))
        return Change(jobs=jobs, rests=left) if left else None

    def see_nodes(self, nodes: tuple[Node, ...]) -> None:
        """The nodes as read this tick; a change of what a plan reads of them is news."""
        self.news = self.news or _shape(nodes) != _shape(self.nodes)
        self.nodes = nodes

    def snapshot(self, now: float, spent: dict[str, int], ended: tuple[tuple[int, str], ...]) -> Snapshot:
        """What plan() sees at `now` (`view`), for the shell's pass: `spent` the budgets' settled spend,
        `ended` (planning.Planner.ended_states); it keeps which of the jobs are held tails (`tails`,
        applier.without)."""
        snap, self.tails = self.view(now, spent, ended, tuple(sorted(self.ended_shown.items())))
        return snap

    def pass_snapshot(self, now: float, spent: dict[str, int], ended: tuple[tuple[int, str], ...]) -> tuple[Snapshot, Told | None]:
        """`snapshot` for the shell's pass, which tells what changed since the last pass's to the
        applier's Confirmed and returns it for the kept Seen (Kept.inputs, Seen.tell: None, it
        compares the two snapshots): where plan() sees just the table's records (no checkpoint file,
        no held tail), as the last pass did, the snapshot's jobs are a view of the table, made in
        O(1) (a tuple of 60,000 held jobs, then the Seen's comparison of two, were ~1.5 ms a pass)."""
        changed = self.index.take()
        self.confirmed.of(self.jobs, changed)
        snap, self.tails = self.view(now, spent, ended, tuple(sorted(self.ended_shown.items())),
                                     table=self.plain_of is self.jobs)
        told = (changed, self.jobs, self.index.place) if not isinstance(snap.jobs, tuple) else None
        self.plain_of = self.jobs if not self.tails and not self.file_checkpoints else None
        return snap, told

    def view(self, now: float, spent: Mapping[str, int], ended: tuple[tuple[int, str], ...],
             shown: tuple[tuple[int, str], ...], table: bool = False) -> tuple[Snapshot, frozenset[int]]:
        """(what plan() sees at `now`, the ids of the held tails in it); changes nothing, so a
        handler may ask it (`labq stat --start`, `sub --test-only`). `table`: the jobs a view of the
        table where they are all plan() sees (pass_snapshot), not a tuple of them."""
        # The tally's jobs on nodes in the table's order (which orders fairshare.current's sums): a
        # filter of every record was ~4 % of the scheduler during a drain onto 60,000 held jobs.
        running = sorted(self.tally.on_node.values(), key=self.index.on(self.jobs).place)
        usage = fairshare.current(self.usage, running, now, self.cfg.priority.fairshare_half_life)
        jobs = self.jobs
        if self.file_checkpoints:
            # A checkpoint file counts like `labq checkpoint`: work lost is measured from the latest.
            jobs = dict(jobs)
            for jid, at in self.file_checkpoints.items():
                j = jobs.get(jid)
                if j is not None and j.current and at > (j.current.last_checkpoint or 0):
                    jobs[jid] = tr.checkpointed(j, at) or j
        tails = self.held_tails()
        seen = cast(tuple[Job, ...], jobs.values()) if table and jobs is self.jobs and not tails else \
            tuple(jobs.values()) + tails
        return Snapshot(now=now, nodes=self.nodes, jobs=seen, usage=tuple(sorted(usage.items())),
                        spent=tuple(sorted(spent.items())), ended=ended,
                        shown=shown), frozenset(j.id for j in tails)

    def held_tails(self) -> tuple[Job, ...]:
        """A burst allowance of each held rest's first tasks, which plan() sees but are no records
        (`tails`: their ids, whose verdicts are not applied): held tasks count in their user's burst
        tail, so a job submitted after a big held array would escape it were they left out."""
        p = self.cfg.priority
        held = {a: r for a, r in self.rests.items() if r.template.held} if p.burst_penalty else {}
        return tuple(rest.topped_up(held, self.jobs.values(), 0, p.burst_jobs)[1]) if held else ()

    def ended_query(self, extra: Job | None = None) -> tuple[set[int], dict[int, str], dict[int, str]]:
        """(want, resting, shown): the ids of the ended jobs a pending job (and `extra`, a --test-only
        probe) depends on, and the tasks depended on that are in a held array's rest (pending: no
        ended state to keep, jobs/rest.py) with their display ids. Changes nothing (ended_view)."""
        waiting = self.index.on(self.jobs).waiting_on.values()
        want = dependency_targets([*waiting, *([extra] if extra else [])])
        want = {i for i in want if i not in self.jobs}     # (`-= keys()` walks every key)
        resting, shown = rest.states_of(self.rests, want) if self.rests else ({}, {})
        want -= resting.keys()
        return want, resting, shown

    def ended_wanted(self, extra: Job | None = None) -> tuple[list[int], dict[int, str]]:
        """The shell's update (planning.Planner.ended_states): (ids, resting), the ended jobs depended on whose state
        is not kept yet (sorted) and the resting tasks depended on (ended_query). Those no pending job
        depends on any more are forgotten."""
        want, resting, shown = self.ended_query(extra)
        missing = sorted(want - self.ended.keys())
        self.ended = {i: self.ended[i] for i in want if i in self.ended}
        self.ended_shown = {i: s for i, s in self.ended_shown.items() if i in want}
        self.ended_shown.update(shown)
        return missing, resting

    def ended_found(self, missing: list[int], found: list[Job]) -> None:
        """The records of the `missing` ended jobs as read (an id not found: state "")."""
        states_ = {j.id: j.state for j in found}
        self.ended.update((i, states_.get(i, "")) for i in missing)
        self.ended_shown.update((j.id, j.display_id) for j in found if j.array_id is not None)

    def ended_view(self, extra: Job | None, read: Mapping[int, Job | None]) -> tuple[tuple[tuple[int, str], ...],
                                                                                  tuple[tuple[int, str], ...]]:
        """(ended, shown) as ended_states would make them, for a handler: the states kept, else as the
        tick read them (`read`: change.Read.ended); Unread(ended=...) for the rest. Changes nothing."""
        want, resting, shown = self.ended_query(extra)
        missing = sorted(want - self.ended.keys())
        unread = [i for i in missing if i not in read]
        if unread:
            raise Unread(ended=unread)
        got = {i: self.ended[i] for i in want if i in self.ended}
        names = {i: s for i, s in self.ended_shown.items() if i in want} | shown
        for i in missing:
            j = read[i]
            got[i] = j.state if j is not None else ""
            if j is not None and j.array_id is not None:
                names[i] = j.display_id
        return tuple(sorted({**got, **resting}.items())), tuple(sorted(names.items()))

    def put(self, j: Job) -> None:
        old = self.jobs.get(j.id)
        if j.state in states.ACTIVE:
            self.jobs[j.id] = j
            self.tally.replace(old, j)
        elif old is not None:
            del self.jobs[j.id]
            self.tally.replace(old, None)
        self.index.put(self.jobs, j, old)


def window(nodes: Iterable[Node], cfg: Config) -> int:
    """How many pending tasks of each array plan() sees as records (SchedulerState.windows)."""
    width = sum(n.slots for n in nodes if n.state == "up") + cfg.backfill_depth + 1
    return max(width, cfg.priority.burst_jobs) if cfg.priority.burst_penalty else width


def _news(change: Change, tasks: bool, jobs: dict[int, Job], rests: dict[int, Rest]) -> bool:
    """Whether a plan could act on `change`: anything but new held pending jobs (a new held rest
    among them), replies and alerts. A tick whose commits are no news leaves planning to the tick's own
    plan (planning.Planner.due): one more pass per batch of held submits was most of a batch's fixed
    cost at 10,000 pending (issue 39 item 3)."""
    if change.charges or change.controls or change.dispatch or change.nodes or change.books:
        return True
    if any(a in rests or not (r is None or r.template.held) for a, r in change.rests.items()):
        return True
    return any(j.id in jobs or not j.held or j.state != states.PENDING
               for j in (change.jobs[:1] if tasks else change.jobs))


def _shape(nodes: Iterable[Node]) -> list[tuple[object, ...]]:
    """What a plan reads of the nodes, but their leases' times (which move every tick)."""
    return [(n.name, n.cpus, n.mem, n.slots, n.gpus, n.state, n.runs) for n in nodes]
