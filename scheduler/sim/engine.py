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
and the Pending reasons. A periodic budget's rollover is an instant too, because spending starts again from zero there.

plan() is not called where it provably could not change anything. Backfill off, it walks the queue kept
in its order up to the blocker (kept.py), budgets or not (a budget that admits none of a group's
next jobs pends them at once: policy/floors.py Floors); backfill on, it is given the head (easy.py),
with budgets less the jobs whose budget floor exceeds the budget's room (left out: idle.py), or, `through`, the
whole queue with the daemon's kept state (through.py). The result is identical to calling it on the whole
queue at every instant (`skip=False`; tests/unit/test_sim.py, tests/property/test_sim_through.py).
"""
from collections import Counter
from itertools import filterfalse

from .. import policy
from ..daemon import transitions as tr
from ..daemon.applier import apply_plan
from ..jobs import states
from ..jobs.model import Job, Snapshot
from ..money import fairshare, periods
from ..policy.tracks import Tracks
from ..settings.config import Config
from . import easy, kept, submit
from .clock import Clock
from .idle import NONE, Idle
from .queue import Queue
from .result import BUDGET_REASONS, EPOCH, Refused, Result, prepare_nodes
from .spent import Spent
from .through import Through
from .trace import TraceJob

# Clock items besides attempt ends (job id, attempt, outcome): instants where only time changed something.
ROLLOVER = ("rollover",)    # a periodic budget's new period: its spending starts from zero
WAKE = ("wake",)            # a running job reaches its QoS min_runtime and may be preempted


class Simulator:
    def __init__(self, trace: list[TraceJob], nodes, cfg: Config, skip: bool = True, progress=None,
                 template: dict | None = None, queue_limits: bool = False, hooks=None, through: bool = False):
        self.trace, self.cfg, self.skip, self.progress = trace, cfg, skip, progress
        self.hooks = hooks         # policies.Hooks: expected runtimes, told of every end (None: none)
        # The daemon's max_pending bounds protect a live scheduler; a trace's own scheduler had
        # none of them, so a replay applies them only when asked (--enforce-queue-limits).
        self.queue_limits = queue_limits
        self.nodes = prepare_nodes(nodes)
        self.template = {"argv": ("trace",), "workdir": "/", **(template or {})}
        # Through plan() (`through`), no order is drawn from the replay's queue: it keeps none.
        self.queue = Queue(cfg, ordered=not (through and skip))
        self.running: dict[int, Job] = {}
        self.ended: dict[int, Job] = {}
        self.natural_end: dict[int, float] = {}
        self.refused: list[Refused] = []
        self.ledger = Spent(cfg)
        self.spent = self.ledger.spent        # the `spent` hash: NAME or NAME@PERIOD -> settled micro-units
        self.spent_now = self.ledger.now
        self.rollovers = any(b.period != "none" for b in cfg.budgets)
        self.half_life = cfg.priority["fairshare_half_life"]
        # Fair-share usage is what plan() ranks accounts by; it reads it only with a fair-share weight.
        self.fairshare = bool(cfg.priority["fairshare_weight"])
        self.usage: dict = {}
        self.budget_held: set[int] = set()
        # Pending jobs charged to a budget that no pass has pended for it yet: while there are any,
        # a kept walk's instant where nothing fits is still a pass (its budget reasons are counted).
        self.fresh: set[int] = set()
        self.queue.backlog = kept.backlog(cfg, self.nodes)    # backfill off: the queue kept in plan()'s order
        # `through`: a pass the backlog does not take goes through plan() with the daemon's kept state
        # (through.py), not easy.py's head or a whole pass
        self.through = Through() if through and skip and self.queue.backlog is None else None
        self.budget_idle = Idle(cfg, self.nodes) if cfg.budgets and self.queue.backlog is None else None
        self.idle: frozenset | set = NONE     # queued jobs idle for their budget: left out of this pass
        # plan()'s free capacity and quota usage, kept as jobs start and end, and the running jobs'
        # backfill timelines, repaired pass to pass as the daemon's (policy.Kept); neither is given to
        # the reference whole passes, `skip=False`; `_inert` and the windows read standing's free room
        self.standing, self.tracks = policy.Standing(self.nodes, cfg, EPOCH), Tracks()
        self.node_by_name = {n.name: n for n in self.nodes}
        self.model = {n.name: (n.gpus[0].model if n.gpus else "") for n in self.nodes}
        self.single_model = easy.single_model(self.nodes)
        self.preemptible_running = self.draining = self.gangs_running = 0
        self.attempts = 0           # bumped whenever a job starts, is preempted or ends: idle.py's memo key
        self.active_by: Counter = Counter()
        self._refusals: dict = {}
        self._affordable: dict = {}           # (request, user, account, QoS) -> budget.affordable_at_any_length
        self._most: dict[str, int] = {}       # GPU model -> submit.most_gpus
        self.calls = self.skipped = self.instants = 0
        self.now = EPOCH
        # Preemption that needs no blocked job of its own (reclaimed guarantees) makes any skip unsafe.
        self.never_skip = cfg.preemption and any(a.guarantee for a in cfg.accounts)
        # No gate but capacity and budgets (kept.py, easy.py).
        self.budget_gated_only = not (self.never_skip or cfg.users or any(q.reserved for q in cfg.qos)
                                      or any(a.borrow_limit is not None or a.max_running is not None
                                             or a.max_gpus is not None or a.max_cpus is not None for a in cfg.accounts))
        self.clock = Clock(EPOCH + t.submit for t in trace)
        if self.rollovers and trace:
            self.clock.at(self._rollover(EPOCH + trace[0].submit), ROLLOVER)

    # -- the loop ----------------------------------------------------------------------------
    def run(self) -> Result:
        total, step = len(self.trace), max(1, len(self.trace) // 200)
        shown = 0
        for t, ends, arrivals in self.clock.batches():
            self.now = t
            self.instants += 1
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
            if self.progress and (self.clock.arrived() - shown >= step or self.clock.arrived() == total > shown):
                shown = self.clock.arrived()
                self.progress(shown, total)
        if self.progress:
            self.progress(total, total)
        # At the replay's end every job's record is alive: no copy of them, nor of (id, record) pairs.
        end, jobs = self._end_time(), self.ended
        jobs.update(self._stuck())
        return Result(self.cfg, self.nodes, self.trace, {i: jobs[i] for i in sorted(jobs)}, self.refused,
                      self.budget_held, dict(self.spent), self.calls, self.skipped, self.instants, end)

    def _rollover(self, t: float) -> float:
        """The next start of a period of some periodic budget after t."""
        return min(periods.bounds(b.period, periods.current(b, t), b.timezone)[1]
                   for b in self.cfg.budgets if b.period != "none")

    def _stuck(self) -> dict[int, Job]:
        """The jobs still pending at the end, each with the reason one last pass over all of them gives."""
        stuck = dict(self.queue.jobs)
        if not stuck:
            return {}
        t = self.now
        p = self._call(t, tuple(stuck.values()))
        self.calls -= 1                    # not a pass of the replay
        for ids, verdict in p.pending.runs():
            for i in ids:
                stuck[i] = tr.pend(stuck[i], verdict[0], verdict[1])
        return stuck

    def _end_time(self) -> float:
        return max((a.end_time for j in self.ended.values() for a in j.attempts if a.end_time), default=EPOCH)

    # -- submits -----------------------------------------------------------------------------
    def _arrive(self, t: float, i: int) -> None:
        tj = self.trace[i]
        account = tj.account or self.template.get("account") or self.cfg.default_account(tj.user)
        most = self._most.get(tj.gpu_type)
        if most is None:
            most = self._most[tj.gpu_type] = submit.most_gpus(self.nodes, tj.gpu_type)
        gpus, cpus, mem, nodes = submit.gang_shape(tj, self.nodes, most)
        job = Job(**{**self.template, "account": account}, id=i + 1, name=tj.name, user=tj.user, qos=tj.qos,
                  gpus=gpus, gpu_type=tj.gpu_type, cpus=cpus, mem=mem, time_limit=tj.time_limit,
                  submit_time=t, nodes=nodes)
        if self.hooks:
            job = self.hooks.stamp(job, tj, t)
        why = submit.refusal(self, job)
        if why:
            self.refused.append(Refused(tj, *why))
            return
        self.active_by[("account", job.account)] += 1
        self.active_by[("user", job.user)] += 1
        self._enqueue(job)

    def _enqueue(self, job: Job) -> None:
        self.queue.add(job)
        self._put(job)
        if self.budget_idle is not None:
            self.budget_idle.add(job)
        elif self.queue.backlog is not None and job.id not in self.budget_held and self.queue.charged(job):
            self.fresh.add(job.id)

    def _unqueue(self, job_id: int) -> Job:
        if self.budget_idle is not None:
            self.budget_idle.remove(job_id)
        self.fresh.discard(job_id)
        return self.queue.remove(job_id)

    def _put(self, job: Job) -> None:
        if self.through is not None:
            self.through.put(job)

    def _leave(self, job: Job) -> None:
        if self.through is not None:
            self.through.leave(job.id)
        self.active_by[("account", job.account)] -= 1
        self.active_by[("user", job.user)] -= 1
        self.ended[job.id] = job

    # -- ends --------------------------------------------------------------------------------
    def _end(self, t: float, jid: int, attempt: int, outcome: str) -> None:
        job = self.running.get(jid)
        if job is None or (job.state == states.PREEMPTING and outcome != "preempted"):
            return            # its natural end, after it was preempted: the preempted end stands
        # A simulated process starts as it is dispatched (billing runs from the process's start).
        body = {"outcome": outcome, "start_time": job.current.dispatch_time if job.current else None, "end_time": t,
                "exit_code": 0 if outcome == "completed" else None}
        done = tr.finished(job, attempt, body, t, self.cfg)
        if done is None:      # stale: the attempt already ended (preempted before its natural end)
            return
        new, charges = done
        del self.running[jid], self.natural_end[jid]
        self.attempts += 1
        self.standing.end(job)
        self.preemptible_running -= self._preemptible(job)
        self.draining -= job.state == states.PREEMPTING
        self.gangs_running -= job.nodes > 1
        self.ledger.settle(charges, t)
        ran = (new.attempts[-1].end_time or t) - (new.attempts[-1].dispatch_time or t)     # an ended attempt has both
        if self.fairshare and ran > 0:
            self.usage = fairshare.add(self.usage, job.account, fairshare.weight(job) * ran, t, self.half_life)
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
            job = self.queue.jobs.get(i)
            if job is not None:
                self._unqueue(i)
                self._enqueue(self.hooks.stamp(job, self.trace[i - 1], t))

    # -- planning ----------------------------------------------------------------------------
    def _inert(self) -> bool:
        """Whether plan() provably changes nothing now: no Place (no pending request fits any node's
        free room), no Preempt (no preemptible job runs, no guarantee could be reclaimed), no Expire
        (no pending job has a --max-wait, --deadline, --begin, retry time or dependency), and no
        budget reason to record that would be new (no pending job is charged to a budget but those
        idle for it, which are counted held already, or, walking the kept queue, those pended for it
        at some pass already: `fresh`; plan() gives a job that does not fit a budget's reason when
        the budget would not admit it either)."""
        if len(self.queue) == len(self.idle):
            return True           # no pending job but those idle for their budget: nothing to place, expire or preempt for
        bi = self.budget_idle
        if (self.never_skip or self.queue.timed or (bi is not None and self.queue.budgeted > len(self.idle) and not bi.admits_all(self.queue.budgeted))
                or (self.cfg.preemption and self.preemptible_running)):
            return False
        if self.queue.shapes.fit_some(self.standing.placer.free, bi.shapes if self.idle and bi is not None else None):
            return False
        return not self.fresh or kept.admitted(self, self.now, map(self.queue.jobs.__getitem__, self.fresh))

    def _easy(self, t: float) -> bool:
        """Whether a backfill pass may be given only the head of the queue (easy.py says when that
        decides the whole pass): the queue in an order drawn without a pass (queue.in_one_order), no gate
        but capacity and budgets, nothing timed, draining or preemptible, one GPU model per node, no gang
        (easy.py counts one node per job). A job its budget would not admit neither starts nor reserves
        (policy/__init__.py), so a job easy.py leaves out stays a no-op."""
        return (self.cfg.backfill_depth > 0 and len(self.queue) - len(self.idle) > easy.MIN_QUEUE and self.single_model
                and not self.queue.gangs and not self.gangs_running
                and self.budget_gated_only and not self.queue.timed
                and not self.draining and not (self.cfg.preemption and self.preemptible_running)
                and self.queue.in_one_order(t))

    def _settle(self, t: float) -> None:
        """At a pass start: the queued jobs whose budget provably keeps them waiting (idle.py) are
        counted held by it and, where a pass over the rest decides the same, left out of it."""
        self.idle = NONE
        bi = self.budget_idle
        if bi is None:
            return
        self.budget_held.update(bi.update(t, self.spent_now(t)[0], list(self.running.values()), self.attempts))
        if bi.idle and bi.excludes(self.queue):
            self.idle = bi.idle

    def _plan(self, t: float) -> None:
        # (The reference counts the idle jobs held too: a budget keeps them waiting, although a whole
        # pass quotes only those it reaches before the blocker's reservation is made.)
        self._settle(t)
        if not self.skip:
            return self._apply(t, self._call(t, tuple(self.queue.jobs.values())))
        if self._inert():
            self.skipped += 1
            return
        if self.queue.backlog is not None:
            return kept.run(self, t)
        if self.through is not None:
            return self._apply(t, self.through.plan(self, t))
        if self._easy(t):
            return self._apply(t, easy.plan(self, t))
        self._apply(t, self._call(t, self._queued()))

    def _queued(self) -> tuple[Job, ...]:
        """The queued jobs plan() is given in a whole pass: all but the idle ones."""
        jobs, idle = self.queue.jobs, self.idle
        return tuple(map(jobs.__getitem__, filterfalse(idle.__contains__, jobs))) if idle else tuple(jobs.values())

    def _usage(self, t: float) -> dict:
        if not self.fairshare:
            return {}
        return fairshare.current(self.usage, self.running.values(), t, self.half_life)

    def _call(self, t: float, pending, usage: dict | None = None):
        self.calls += 1
        usage = self._usage(t) if usage is None else usage
        snap = Snapshot(now=t, nodes=self.nodes, jobs=(*pending, *self.running.values()),
                        spent=self.spent_now(t)[1], usage=tuple(sorted(usage.items())))
        if not self.skip:       # the reference, whole passes: plan() sums, counts and files all alone
            return policy.plan(snap, self.cfg)
        # What the running jobs hold of each budget, as the pass start summed it.
        held = self.budget_idle.known(t, self.attempts) if self.budget_idle is not None else None
        return policy.plan(snap, self.cfg, held=held, standing=self.standing, tracks=self.tracks)

    def _apply(self, t: float, p) -> None:
        """The Plan, applied by the daemon's applier (applier.apply_plan); the replay then times what
        it started and preempted. A rejection would be a policy bug: the plan was made from this state."""
        # The room a placement needs is the Standing's, kept as jobs start and end; the reference
        # (whole passes) works it out from the running jobs, so the two are held to each other.
        done = apply_plan(p, self.queue.jobs, self.running, self.nodes, t, reasons=False,
                          free=self.standing.placer.free if self.skip else None)
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
            self.queue.replace(job)        # (an idle job has none: it never preempts)
            self._put(job)
        # The reasons themselves are not kept: the daemon writes them into the records, the replay
        # reports only each stuck job's last one (`_stuck`) and which jobs a budget held.
        for ids, verdict in p.pending.runs():
            if verdict[0] in BUDGET_REASONS:
                self.held(ids)

    def held(self, ids) -> None:
        """These pending jobs were pended for a budget."""
        self.budget_held.update(ids)
        if self.fresh:
            self.fresh.difference_update(ids)

    def _start(self, t: float, job: Job) -> None:
        self.running[job.id] = job
        self._put(job)
        self.attempts += 1
        self.standing.start(job)
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
        self.clock.at(t + run, (job.id, job.attempts[-1].attempt, "completed" if duration <= job.time_limit else "timeout"))

    def _preempt(self, t: float, job: Job, pr) -> None:
        self.draining += 1
        self.running[job.id] = job
        self._put(job)
        self.attempts += 1
        # As the runner does: once it has seen the control the attempt ends `preempted`, after the
        # grace or when the job exits first (here: when its work would have been done).
        end = min(t + max(0, pr.grace), self.natural_end[job.id])
        self.natural_end[job.id] = end
        self.clock.at(end, (job.id, job.attempts[-1].attempt, "preempted"))

    def _preemptible(self, job: Job) -> bool:
        if job.borrowed:
            return True
        if job.preemptible is not None:
            return job.preemptible
        qos = self.cfg.qos_named(job.qos)
        return bool(qos and qos.preemptible)


def simulate(trace: list[TraceJob], nodes, cfg: Config, skip: bool = True, progress=None,
             template: dict | None = None, queue_limits: bool = False, hooks=None, through: bool = False) -> Result:
    """Replay `trace` on `nodes` under `cfg`. `template`: Job fields every job gets (budget, project, account).
    `skip=False` calls plan() at every instant with the whole queue (the reference). `queue_limits`: refuse
    submits beyond scheduler.max_pending(_per_user), as the daemon does. `hooks`: policies.Hooks, or None.
    `through`: backfill on, each pass through plan() with the daemon's kept state (through.py)."""
    return Simulator(trace, nodes, cfg, skip, progress, template, queue_limits, hooks, through).run()
