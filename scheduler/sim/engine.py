"""The replay: a trace through the daemon's own `policy.plan()` on a virtual clock. Pure: no Redis,
no wall clock; the same trace, cluster and config give the same result, always.

At each instant where something happens the simulator does what the daemon does in one tick:
it applies the attempt ends (`transitions.finished`; charges into the `spent` balance of the
budget's current period, as `periods` names it; fair-share usage via `fairshare.add`), takes the
submits (refused as `labq sub` would be: `policy.refusal`, the queue bounds, max_submit), then calls
`plan(snapshot, cfg)` once and applies the Plan with the daemon's applier (`applier.apply_plan`): `admit` for a Place
(the attempt then runs min(duration, time limit): outcome `completed` or `timeout`), `end_pending`
for an Expire, `preempting` for a Preempt (the victim ends at now + min(grace, what it has left),
outcome `preempted` as the runner reports it, requeued by `finished` with its lost work recorded),
and the Pending reasons.
A periodic budget's rollover is an instant too, because spending starts again from zero there.

plan() is not called where it provably could not change anything, and in strict priority order
it is given only the part of the queue that provably decides the pass (`_plan`); the jobs a spent
budget keeps waiting are parked out of the queue (parked.py). The result is identical to calling it
on the whole queue at every instant (`skip=False`; tests/unit/test_sim.py).
"""
import math
from collections import Counter
from dataclasses import dataclass, field, replace

from .. import fairshare, ledger, periods, policy, states, transitions as tr
from ..applier import apply_plan
from ..config import Config
from ..model import Job, Node, Snapshot
from . import easy
from .clock import Clock
from .parked import Parking
from .queue import Queue
from .room import Room, shape
from .trace import TraceJob

# Trace time 0 on the virtual clock. Never 0.0: the transitions read a zero time as "unset".
EPOCH = 1_000_000_000.0
BUDGET_REASONS = frozenset({states.BUDGET_RESERVED, states.BUDGET_EXHAUSTED})
WINDOW = 4      # pending jobs in a strict-order pass before it is widened (see Simulator._plan)
# Clock items besides attempt ends (job id, attempt, outcome): instants where only time changed something.
ROLLOVER = ("rollover",)    # a periodic budget's new period: its spending starts from zero
WAKE = ("wake",)            # a running job reaches its QoS min_runtime and may be preempted
NONE: frozenset = frozenset()


@dataclass
class Refused:
    trace: TraceJob
    kind: str          # capacity | budget | queue | max_submit | qos
    message: str


@dataclass
class Result:
    """What the replay did: every job that entered the queue, as its final record."""
    cfg: Config
    nodes: tuple[Node, ...]
    trace: list[TraceJob]
    jobs: dict[int, Job]                    # id -> final record (ended, or still pending at the end)
    refused: list[Refused]
    # ids that pended for a budget at some pass, or waited at an instant when a budget of theirs
    # provably had no room for them (parked.py): the same whether or not plan() was asked about them
    budget_held: set[int] = field(default_factory=set)
    spent: dict[str, int] = field(default_factory=dict)  # the `spent` hash: NAME or NAME@PERIOD -> micro
    plan_calls: int = 0
    plan_skipped: int = 0
    end_time: float = EPOCH

    def trace_of(self, job_id: int) -> TraceJob:
        return self.trace[job_id - 1]


def prepare_nodes(nodes) -> tuple[Node, ...]:
    """The cluster as always up: no lease to expire on a virtual clock."""
    return tuple(replace(n, state="up", lease_expiry=math.inf) for n in nodes)


class Simulator:
    def __init__(self, trace: list[TraceJob], nodes, cfg: Config, skip: bool = True, progress=None,
                 template: dict | None = None, queue_limits: bool = False, hooks=None):
        self.trace, self.cfg, self.skip, self.progress = trace, cfg, skip, progress
        self.hooks = hooks         # policies.Hooks: expected runtimes, told of every end (None: none)
        # The daemon's max_pending bounds protect a live scheduler; a trace's own scheduler had
        # none of them, so a replay applies them only when asked (--enforce-queue-limits).
        self.queue_limits = queue_limits
        self.nodes = prepare_nodes(nodes)
        self.template = {"argv": ("trace",), "workdir": "/", **(template or {})}
        self.queue = Queue(cfg)
        self.running: dict[int, Job] = {}
        self.ended: dict[int, Job] = {}
        self.natural_end: dict[int, float] = {}
        self.refused: list[Refused] = []
        self.budgets = {b.name: b for b in cfg.budgets}
        self.spent: dict[str, int] = {}       # the `spent` hash: NAME or NAME@PERIOD -> settled micro-units
        self.rollovers = any(b.period != "none" for b in cfg.budgets)
        self.half_life = cfg.priority["fairshare_half_life"]
        # Fair-share usage is what plan() ranks accounts by; it reads it only with a fair-share weight.
        self.fairshare = bool(cfg.priority["fairshare_weight"])
        self.usage: dict = {}
        self.budget_held: set[int] = set()
        self.parking = Parking(cfg, self.nodes) if cfg.budgets else None
        self.idle: frozenset | set = NONE     # queued jobs idle for their budget: left out of this pass
        self.room = Room(self.nodes)
        self.node_by_name = {n.name: n for n in self.nodes}
        self.model = {n.name: (n.gpus[0].model if n.gpus else "") for n in self.nodes}
        self.single_model = easy.single_model(self.nodes)
        self.preemptible_running = self.draining = self.gangs_running = 0
        self.active_by: Counter = Counter()
        self._refusals: dict = {}
        self.calls = self.skipped = 0
        self.now = EPOCH
        self.plan_runs = 0          # plan() calls; `calls` counts passes (a windowed pass may take several)
        # Preemption that needs no blocked job of its own (reclaimed guarantees) makes any skip unsafe.
        self.never_skip = cfg.preemption and any(a.guarantee for a in cfg.accounts)
        # Budgets alone hold only jobs that fit (a budget reason); the first that does not fit still
        # ends a strict-order pass.
        self.budget_gated_only = not (self.never_skip or cfg.users or any(q.reserved for q in cfg.qos)
                                      or any(a.borrow_limit is not None or a.max_running is not None
                                             or a.max_gpus is not None or a.max_cpus is not None for a in cfg.accounts))
        self.clock = Clock([(EPOCH + t.submit, i) for i, t in enumerate(trace)])
        if self.rollovers and trace:
            self.clock.at(self._rollover(EPOCH + trace[0].submit), ROLLOVER)

    # -- the loop ----------------------------------------------------------------------------
    def run(self) -> Result:
        total, step = len(self.trace), max(1, len(self.trace) // 200)
        shown = 0
        for t, ends, arrivals in self.clock.batches():
            self.now = t
            rolled = ROLLOVER in ends
            for end in ends:
                if len(end) == 3:
                    self._end(t, *end)
            for i in arrivals:
                self._arrive(t, i)
            self._plan(t)
            # The next rollover matters while anything may still happen: arrivals, running jobs
            # (an idle cluster whose queue this rollover did not start stays so at the next one).
            if rolled and (self.clock.waiting() or self.running):
                self.clock.at(self._rollover(t), ROLLOVER)
            if self.progress and self.clock.arrived() - shown >= step:
                shown = self.clock.arrived()
                self.progress(shown, total)
        if self.progress:
            self.progress(total, total)
        jobs = {**self.ended, **self._stuck()}
        return Result(self.cfg, self.nodes, self.trace, dict(sorted(jobs.items())), self.refused,
                      self.budget_held, dict(self.spent), self.calls, self.skipped, self._end_time())

    def _rollover(self, t: float) -> float:
        """The next start of a period of some periodic budget after t."""
        return min(periods.bounds(b.period, periods.current(b, t), b.timezone)[1]
                   for b in self.cfg.budgets if b.period != "none")

    def _stuck(self) -> dict[int, Job]:
        """The jobs still pending at the end, each with the reason one last pass over all of them gives."""
        stuck = self._pending()
        if not stuck:
            return {}
        t = self.now
        p = self._call(t, tuple(stuck.values()))
        self.calls -= 1                    # not a pass of the replay
        self.plan_runs -= 1
        for ids, verdict in p.pending.runs():
            for i in ids:
                stuck[i] = tr.pend(stuck[i], verdict[0], verdict[1])
        return stuck

    def _pending(self) -> dict[int, Job]:
        """Every pending job: the queue's and the parked ones."""
        if self.parking is None or not self.parking.jobs:
            return dict(self.queue.jobs)
        return {**self.queue.jobs, **self.parking.jobs}

    def _end_time(self) -> float:
        return max((a.end_time for j in self.ended.values() for a in j.attempts if a.end_time), default=EPOCH)

    # -- submits -----------------------------------------------------------------------------
    def _arrive(self, t: float, i: int) -> None:
        tj = self.trace[i]
        account = tj.account or self.template.get("account") or self.cfg.default_account(tj.user)
        gpus, cpus, mem, nodes = gang_shape(tj, self.nodes)
        job = Job(**{**self.template, "account": account}, id=i + 1, name=tj.name, user=tj.user, qos=tj.qos,
                  gpus=gpus, gpu_type=tj.gpu_type, cpus=cpus, mem=mem, time_limit=tj.time_limit,
                  submit_time=t, nodes=nodes)
        if self.hooks:
            job = self.hooks.stamp(job, tj, t)
        why = self._refusal(job)
        if why:
            self.refused.append(Refused(tj, *why))
            return
        self.active_by[("account", job.account)] += 1
        self.active_by[("user", job.user)] += 1
        self._enqueue(job)

    def _refusal(self, job: Job):
        """(kind, message) when `labq sub` would refuse the job, else None."""
        cfg = self.cfg
        if cfg.qos_named(job.qos) is None:
            return "qos", f"qos: unknown QoS {job.qos!r}"
        key = (job.gpus, job.gpu_type, job.cpus, job.mem, job.time_limit, job.qos, job.account, job.project,
               job.budget, job.user, job.nodes)
        if key not in self._refusals:
            why = policy.refusal(job, self.nodes, cfg)
            self._refusals[key] = None if why is None else (
                "capacity" if why.startswith(("no node", "no set")) else "budget" if why.startswith("budget") else "cap", why)
        if self._refusals[key]:
            return self._refusals[key]
        if self.queue_limits and len(self.queue) + 1 > cfg.max_pending:
            return "queue", f"queue full: {len(self.queue)} jobs pending, scheduler.max_pending={cfg.max_pending}"
        mine = self.queue.per_user[job.user]
        if self.queue_limits and mine + 1 > cfg.max_pending_per_user:
            return "queue", f"user {job.user} has {mine} jobs pending, scheduler.max_pending_per_user={cfg.max_pending_per_user}"
        for cap, who in ((cfg.account_named(job.account), ("account", job.account)),
                         (cfg.user_named(job.user), ("user", job.user))):
            if cap is not None and cap.max_submit is not None and self.active_by[who] + 1 > cap.max_submit:
                return "max_submit", (f"{who[0]} {who[1]} has {self.active_by[who]} jobs pending or running, "
                                      f"max_submit={cap.max_submit}")
        return None

    def _enqueue(self, job: Job) -> None:
        self.queue.add(job)
        if self.parking is not None:
            self.parking.add(job)

    def _unqueue(self, job_id: int) -> Job:
        if self.parking is not None:
            self.parking.remove(job_id)
        return self.queue.remove(job_id)

    def _leave(self, job: Job) -> None:
        self.active_by[("account", job.account)] -= 1
        self.active_by[("user", job.user)] -= 1
        self.ended[job.id] = job

    # -- ends --------------------------------------------------------------------------------
    def _end(self, t: float, jid: int, attempt: int, outcome: str) -> None:
        job = self.running.get(jid)
        if job is None or (job.state == states.PREEMPTING and outcome != "preempted"):
            return            # its natural end, after it was preempted: the preempted end stands
        body = {"outcome": outcome, "end_time": t, "exit_code": 0 if outcome == "completed" else None}
        done = tr.finished(job, attempt, body, t, self.cfg)
        if done is None:      # stale: the attempt already ended (preempted before its natural end)
            return
        new, charges = done
        del self.running[jid]
        self.room.give(job)
        self.preemptible_running -= self._preemptible(job)
        self.draining -= job.state == states.PREEMPTING
        self.gangs_running -= job.nodes > 1
        for c in charges:
            b = self.budgets.get(c.budget)
            key = ledger.spent_field(c.budget, c.period or (periods.current(b, t) if b else ""))
            self.spent[key] = self.spent.get(key, 0) + c.amount
        a = new.attempts[-1]
        if self.fairshare and a.end_time > a.dispatch_time:
            self.usage = fairshare.add(self.usage, job.account,
                                       fairshare.weight(job) * (a.end_time - a.dispatch_time), t, self.half_life)
        if new.state == states.PENDING:
            if self.hooks:
                new = self.hooks.stamp(new, self.trace[jid - 1], t)
            self._enqueue(new)
        else:
            self._leave(new)
        if self.hooks:
            self._reestimate(t, self.hooks.on_end(new, self.trace[jid - 1], t) or ())

    def _reestimate(self, t: float, ids) -> None:
        """Ask the hooks again for these pending jobs' expected runtimes (learned from what ended)."""
        for i in ids:
            if self.parking is not None and i in self.parking.jobs:
                self._unpark(i)      # its forecast may change: judged anew
            job = self.queue.jobs.get(i)
            if job is not None:
                self._unqueue(i)
                self._enqueue(self.hooks.stamp(job, self.trace[i - 1], t))

    # -- planning ----------------------------------------------------------------------------
    def _inert(self) -> bool:
        """Whether plan() provably changes nothing now: no Place (no pending request fits any node's
        free room), no Preempt (no preemptible job runs, no guarantee could be reclaimed), no Expire
        (no pending job has a --max-wait, --deadline, --begin, retry time or dependency), and no
        budget reason to record (no pending job is charged to a budget: plan() gives a job that
        does not fit a budget's reason when the budget would not admit it either)."""
        if len(self.queue) == len(self.idle):
            return True           # no pending job but those idle for their budget: nothing to place, expire or preempt for
        if (self.never_skip or self.queue.timed or self.queue.budgeted > len(self.idle)
                or (self.cfg.preemption and self.preemptible_running)):
            return False
        return not self.room.fits_somewhere(self.queue.shapes.minimal())

    def _strict(self, t: float) -> bool:
        """Whether plan() provably starts pending jobs in its order and nothing past the first that
        does not fit: backfill off (backfill_depth 0: `blocker` in policy/__init__.py), nothing that
        could preempt or be waited for, no gate but capacity and budgets (no cap, protected capacity,
        hold, begin or dependency), and each account's jobs in submit order (queue.py)."""
        return (self.cfg.backfill_depth == 0 and self.budget_gated_only and not self.queue.timed and not self.draining
                and not (self.cfg.preemption and self.preemptible_running)
                and self.queue.accounts_in_submit_order(t))

    def _easy(self, t: float) -> bool:
        """Whether a backfill pass may be given only the head of the queue (easy.py says when that
        decides the whole pass): the queue in an order drawn without a pass (queue.in_one_order), no gate
        but capacity and budgets, nothing timed, draining or preemptible, one GPU model per node, no gang
        (easy.py counts one node per job). A budget only pends jobs that could start, and one that pends
        a job keeps it from reserving too (policy/__init__.py), so a job easy.py leaves out stays a no-op."""
        return (self.cfg.backfill_depth > 0 and len(self.queue) > easy.MIN_QUEUE and self.single_model
                and not self.queue.gangs and not self.gangs_running
                and self.budget_gated_only and not self.queue.timed
                and not self.draining and not (self.cfg.preemption and self.preemptible_running)
                and self.queue.in_one_order(t))

    def _park(self, t: float) -> None:
        """Find the jobs a budget now provably keeps waiting and bring back the others (parked.py):
        those count as held by their budget; they are parked, or, while few, left out of the pass
        by id (`idle`). When a pass over the rest might not decide what the pass over every pending
        job does, every parked job comes back and none is left out."""
        pk = self.parking
        self.idle = NONE
        if pk is None:
            return
        spent = periods.spent_now(self.cfg.budgets, self.spent, t)
        idle, park, back = pk.update(t, spent, self.running.values())
        for i in back:
            self._unpark(i)
        self.budget_held.update(idle)
        if not pk.excludes(self.queue, idle):
            for i in list(pk.jobs):
                self._unpark(i)
            return
        for i in park:
            self._park_one(i)
        if len(park) < len(idle):
            self.idle = set(idle).difference(park)

    def _park_one(self, job_id: int) -> None:
        job = self.queue.remove(job_id)
        self.parking.park(job)
        if self.queue.penalised:
            self.queue.bursts.add(job)       # burst tails are of every pending job (Parking.excludes)

    def _unpark(self, job_id: int) -> None:
        job = self.parking.unpark(job_id)
        if self.queue.penalised:
            self.queue.bursts.remove(job)
        self.queue.add(job)

    def _plan(self, t: float) -> None:
        self._park(t)
        if not self.skip:
            return self._apply(t, self._call(t, tuple(self._pending().values())), everyone=True)
        if self._inert():
            self.skipped += 1
            return
        if not self._strict(t):
            if self._easy(t):
                return self._apply(t, easy.plan(self, t))
            return self._apply(t, self._call(t, self._queued()))
        # Strict order: the first job decides whether anything starts; when it fits, a pass over a
        # window that holds the first n jobs decides the same as the whole pass as soon as fewer than
        # n start: one of the n stayed pending, on capacity, and nothing after it starts. A first job
        # that fits nowhere holds every later one, unless its budget holds it (then it holds none).
        q = self.queue
        one = q.one_order()
        # (the idle jobs do nothing: the first of the others decides)
        heads = self._first(1, self.idle) if self.idle and one else q.heads()
        if not self.room.fits_somewhere([shape(j) for j in heads]) and not any(map(q.charged, heads)):
            self.skipped += 1          # the first job is one of these, and none fits
            return
        usage = self._usage(t)
        ranked = heads if self.idle and one else q.ranked_heads(t, usage)
        if not self.room.fits_somewhere([shape(ranked[0])]) and not q.charged(ranked[0]):
            self.skipped += 1
            return
        n = WINDOW
        # jobs whose budget has no room for them now, or after this pass's first admissions
        spent: set[int] = set(self.idle) if one else set()
        while True:
            window = self._first(n, spent) if spent else q.window(n, ranked)
            p = self._call(t, window, usage)
            # Decided once one of the first n stayed pending on capacity (plan()'s blocker: every job
            # after it pends behind it): fewer than n started or pend for a budget.
            held = sum(1 for pd in p.pending if pd.reason in BUDGET_REASONS)
            if len(p.places) + held < n or len(window) + len(spent) == len(q):
                if spent:
                    self._held_before_blocker(p, window, spent)
                return self._apply(t, p)
            n *= 4
            if held and self.parking is not None and q.one_order():
                # Those do nothing in the wider pass either (pended for their budget at their turn):
                # the next window is the first n of the others.
                spent = self.parking.held_after(p.places) - {pl.job_id for pl in p.places}

    def _held_before_blocker(self, p, window, spent: set[int]) -> None:
        """The jobs left out of a strict pass for their budget would each have been pended for it
        there, up to the blocker (the first job of the window neither started nor held by a budget),
        after which every job pends behind it."""
        settled = {pl.job_id for pl in p.places} | {pd.job_id for pd in p.pending if pd.reason in BUDGET_REASONS}
        blocker = next((j for j in window if j.id not in settled), None)
        if blocker is None:
            self.budget_held.update(spent)
        else:
            at = (blocker.submit_time, blocker.id)
            jobs = self.queue.jobs
            self.budget_held.update(i for i in spent if (jobs[i].submit_time, i) < at)

    def _queued(self) -> tuple[Job, ...]:
        """The queued jobs plan() is given in a whole pass: all but the idle ones."""
        jobs = self.queue.jobs.values()
        idle = self.idle
        return tuple(j for j in jobs if j.id not in idle) if idle else tuple(jobs)

    def _first(self, n: int, leave: set[int]) -> list[Job]:
        """The first n queued jobs in submit order but those in `leave` (the queue in one order)."""
        jobs, out = self.queue.jobs, []
        for _, i in self.queue.fifo:
            if i not in leave:
                out.append(jobs[i])
                if len(out) == n:
                    break
        return out

    def _usage(self, t: float) -> dict:
        if not self.fairshare:
            return {}
        return fairshare.current(self.usage, self.running.values(), t, self.half_life)

    def _call(self, t: float, pending, usage: dict | None = None):
        self.calls += 1
        self.plan_runs += 1
        usage = self._usage(t) if usage is None else usage
        spent = periods.spent_now(self.cfg.budgets, self.spent, t) if self.cfg.budgets else {}
        snap = Snapshot(now=t, nodes=self.nodes, jobs=(*pending, *self.running.values()),
                        spent=tuple(sorted(spent.items())), usage=tuple(sorted(usage.items())))
        return policy.plan(snap, self.cfg)

    def _apply(self, t: float, p, everyone: bool = False) -> None:
        """The Plan, applied by the daemon's applier (applier.apply_plan); the replay then times what
        it started and preempted. A rejection would be a policy bug: the plan was made from this state.
        `everyone`: plan() was given the parked jobs too."""
        jobs = self._pending() if everyone else self.queue.jobs
        done = apply_plan(p, jobs, self.running, self.nodes, t, reasons=False)
        if done.rejected:
            raise AssertionError(f"plan() decided what its own snapshot does not allow: {done.rejected[0].why}")
        for job in done.started:
            self._unqueue(job.id)
            self._start(t, job)
        for job in done.expired:
            self._unqueue(job.id)
            self._leave(job)
        for job, pr in zip(done.stopping, done.preempts):     # plan() gives no Cancel
            self._preempt(t, job, pr)
        for job in done.pended:      # an earmark changed: plan() reads it, so it is kept in the record
            self.queue.jobs[job.id] = job        # (a parked job has none: it never preempts)
        # The reasons themselves are not kept: the daemon writes them into the records, the replay
        # reports only each stuck job's last one (`_stuck`) and which jobs a budget held.
        for ids, verdict in p.pending.runs():
            if verdict[0] in BUDGET_REASONS:
                self.budget_held.update(ids)

    def _start(self, t: float, job: Job) -> None:
        self.running[job.id] = job
        self.room.take(job)
        self.gangs_running += job.nodes > 1
        if self._preemptible(job):
            self.preemptible_running += 1
            qos = self.cfg.qos_named(job.qos)
            if self.cfg.preemption and qos and qos.min_runtime:
                # From then on it may be preempted: a blocked job that deferred (PreemptionDeferred) can act.
                self.clock.at(t + qos.min_runtime, WAKE)
        duration = self.trace[job.id - 1].duration
        run = min(duration, job.time_limit)
        self.natural_end[job.id] = t + run
        self.clock.at(t + run, (job.id, job.current.attempt, "completed" if duration <= job.time_limit else "timeout"))

    def _preempt(self, t: float, job: Job, pr) -> None:
        self.draining += 1
        self.running[job.id] = job
        # As the runner does: once it has seen the control the attempt ends `preempted`, after the
        # grace or when the job exits first (here: when its work would have been done).
        end = min(t + max(0, pr.grace), self.natural_end[job.id])
        self.natural_end[job.id] = end
        self.clock.at(end, (job.id, job.current.attempt, "preempted"))

    def _preemptible(self, job: Job) -> bool:
        if job.borrowed:
            return True
        if job.preemptible is not None:
            return job.preemptible
        qos = self.cfg.qos_named(job.qos)
        return bool(qos and qos.preemptible)


def simulate(trace: list[TraceJob], nodes, cfg: Config, skip: bool = True, progress=None,
             template: dict | None = None, queue_limits: bool = False, hooks=None) -> Result:
    """Replay `trace` on `nodes` under `cfg`. `template`: Job fields every job gets (budget, project,
    account). `skip=False` calls plan() at every instant with the whole queue (the reference).
    `queue_limits`: refuse submits beyond scheduler.max_pending(_per_user), as the daemon does.
    `hooks`: a policies.Hooks (expected runtimes), or None."""
    return Simulator(trace, nodes, cfg, skip, progress, template, queue_limits, hooks).run()


def gang_shape(tj, nodes) -> tuple[int, int, int, int]:
    """(gpus, cpus, mem per node, nodes) of a trace job: its own, or, when it asks for more GPUs than
    any node has (of its model), a gang (`sub -N`) of whole nodes, its CPUs and memory split over them."""
    if tj.nodes > 1 or not tj.gpus:
        return tj.gpus, tj.cpus, tj.mem, tj.nodes
    most = max((sum(1 for g in n.gpus if not tj.gpu_type or g.model == tj.gpu_type) for n in nodes), default=0)
    if not most or tj.gpus <= most:
        return tj.gpus, tj.cpus, tj.mem, 1
    k = -(-tj.gpus // most)
    return most, -(-tj.cpus // k), -(-tj.mem // k), k
