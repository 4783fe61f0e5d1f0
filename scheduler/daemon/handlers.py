"""What the scheduler does with each request from a user's inbox: submit, cancel, hold, release,
checkpoint, and (admins) drain and resume.

A handler decides; it writes nothing. It returns a `Change` (job records, control values, the
reply) that the daemon commits in one transaction with the acknowledgement of the request.
"""
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any, Protocol

from .. import policy
from ..errors import RefusedError, UsageError
from ..jobs import idruns, rest, states
from ..jobs.estimate import Estimator
from ..jobs.idruns import LISTED, Runs
from ..jobs.jobspec import array_range, array_throttle, job_from_submit
from ..jobs.model import Job, Node, Snapshot
from ..jobs.refs import parse_task_ids, resolve_ref, tasks_named
from ..jobs.rest import Rest
from ..money import balance, ledger, periods, pricing
from ..policy.refusal import Refusals
from ..security import members
from ..settings.config import Config
from ..units import accrue, fmt_money
from . import transitions as tr
from .change import Change, Read
from .lookup import Lookup, record_of, records_of, rests_named
from .state import SchedulerState, Tally

BUDGET_OPS = ("budget_set", "budget_override", "budget_revoke", "ledger_import")
# What one cancel/hold/release/requeue may name: a request is handled inside a tick, so its cost
# must be bounded (200,000 ids, one GET each, once froze the scheduler for minutes).
MAX_IDS = 10_000
MAX_TASKS_NAMED = 1_000_000
# A cancel of more jobs than this is committed in parts of this many, one transaction each: below
# commit.BIG_COMMIT, so that the freed memory is handed back once at the end (requests._streamed), not
# per part (malloc_trim walks the whole heap: 20 trims doubled a 100,000-task cancel's time).
CHUNK = 2000
# What a request does to one named job: (the new record, or None where it may not; its state or the error).
Judge = Callable[[Job], tuple[Job | None, str]]


class Books(Protocol):
    """The bookkeeper's part (bookkeeper.Bookkeeper): budget balances and the budget requests."""
    def spent_now(self, now: float, spent: dict[str, int] | None) -> dict[str, int]: ...
    def request(self, op: str, user: str, body: dict[str, Any], now: float, read: Read) -> Change: ...


class State(Protocol):
    """What the handlers read of the scheduler (daemon.Scheduler is one); they ask nothing of it and
    write nothing through it. What they read beyond the state is what the tick read (`read`); where
    that lacks something they raise change.Unread. New job ids follow `seq` (Change.last_id)."""
    cfg: Config
    nodes: tuple[Node, ...]
    jobs: dict[int, Job]
    rests: dict[int, Rest]    # array id -> a big array's tasks not yet records
    tally: Tally
    books: Books
    estimator: Estimator      # run times learned from ended jobs, stamped on each submit
    read: Read                # what the tick read for the requests: ended records, the spent hash, ledger keys
    state: SchedulerState     # the state itself, for what plan() would see (its `view`, which changes nothing)
    seq: int                  # the last job id handed out


def estimate_dict(job: Job, cfg: Config) -> dict[str, Any]:
    """The learned run time of a job and what it rests on (`--test-only`'s, `show --json`'s shape)."""
    if job.learned_est:
        return {"seconds": job.learned_est, "basis": job.learned_basis}
    return {"seconds": None, "basis": f"fewer than {cfg.estimate.min_samples} runs of user {job.user} have ended"}


def start_basis(cfg: Config) -> str:
    return "learned run times" if cfg.estimate.backfill else "time limits"


class Handlers:
    def __init__(self, state: State) -> None:
        self.s = state
        self.refusals = Refusals()     # per request shape while the nodes and config stand

    def handle(self, user: str, op: str, body: dict[str, Any], now: float) -> Change:
        if op in BUDGET_OPS:   # budget set / override / revoke, ledger import: scheduler/daemon/bookkeeper.py
            return self.s.books.request(op, user, body, now, self.s.read)
        fn = {"submit": self.submit, "cancel": self.cancel, "drain": self.drain, "resume": self.resume,
              "checkpoint": self.checkpoint, "hold": self.hold, "release": self.release,
              "requeue": self.requeue, "starts": self.starts}.get(op)
        if fn is None:
            raise UsageError(f"unknown request {op!r} "
                             "(expected submit, cancel, hold, release, requeue, checkpoint, drain, resume or starts)")
        return fn(user, body, now)

    # -- submit --------------------------------------------------------------------------------
    def submit(self, user: str, body: dict[str, Any], now: float) -> Change:
        cfg = self.s.cfg
        # The learned run time goes into the record (labq show reads it there; backfill, the short-job
        # priority and the forecast budget mode use it where the config says so).
        template = self.s.estimator.stamp(job_from_submit(body, user, cfg, now, self.dep_ids), own=True)
        why = members.refusal(template, user, cfg)
        if why:
            raise RefusedError(why)
        indices = array_range(body, cfg.max_array_size)
        throttle = array_throttle(body)
        if throttle and indices is None:
            raise UsageError("array_throttle: only for an array (-a LO-HI%N)")
        wait = body.get("hold_until_budget", False)
        if not isinstance(wait, bool):
            raise UsageError(f"hold_until_budget: expected true or false, got {wait!r}")
        why, unpaid = self.refusals(template, self.s.nodes, cfg, self.s.books.spent_now(now, self.s.read.spent) if cfg.budgets else {},
                                      self.s.tally.on_node.values())
        if why or (unpaid and not wait):
            raise RefusedError(why or unpaid)
        n = len(indices) if indices else 1
        tally = self.s.tally
        if tally.pending + n > cfg.max_pending:
            raise RefusedError(f"queue full: {tally.pending} jobs pending, {n} more would pass "
                               f"scheduler.max_pending={cfg.max_pending}")
        mine = tally.pending_by_user[user]
        if mine + n > cfg.max_pending_per_user:
            raise RefusedError(f"user {user} has {mine} jobs pending, {n} more would pass "
                               f"scheduler.max_pending_per_user={cfg.max_pending_per_user}")
        _max_submit(template, n, tally, cfg)
        if body.get("test_only"):
            return Change(reply=self.test_only(template, now))
        first = self.s.seq + 1     # taken as the change commits (Change.last_id)
        rests: dict[int, Rest | None] = {}
        if indices is None:
            jobs = [_numbered(template, first)]
        else:
            jobs, rests = rest.made(template, first, indices, throttle)     # a big array: one record
        shown = f"{first}_[{indices[0]}-{indices[-1]}]" if indices else str(first)
        # Ids are consecutive; a huge array's reply names the range rather than every id.
        ids = {"job_ids": list(range(first, first + n))} if n <= 1000 else {}
        # --hold-until-budget: taken all the same; it pends BudgetExhausted until the budget has room.
        held = {"budget_hold": unpaid} if unpaid else {}
        return Change(jobs=jobs, rests=rests, last_id=first + n - 1, reply={"ok": True, "job_id": first, "count": n, "last_job_id": first + n - 1, **ids,
                                        "display": shown, **held})

    def test_only(self, job: Job, now: float) -> dict[str, Any]:
        """Forecast, each budget's availability after it, and the verdict — without submitting."""
        probe = replace(job, id=max(self.s.jobs, default=0) + 1_000_000_000)
        ended, _ = self.s.state.ended_view(probe, self.s.read.ended)
        snap = Snapshot(now=now, nodes=self.s.nodes, jobs=tuple(self.s.jobs.values()) + (probe,),
                        spent=tuple(sorted(self.s.books.spent_now(now, self.s.read.spent).items())), ended=ended)
        plan = policy.plan(snap, self.s.cfg)
        placed = next((p for p in plan.places if p.job_id == probe.id), None)
        why = next((p for p in plan.pending if p.job_id == probe.id), None)
        running = [j for j in self.s.jobs.values() if j.state in states.ON_NODE]
        spent = dict(snap.spent)
        budgets: list[dict[str, Any]] = []
        model = next((g.model for n in self.s.nodes for g in n.gpus
                      if not job.gpu_type or g.model == job.gpu_type), "")
        for b in ledger.budgets_for(job, self.s.cfg.budgets):
            need = dict(placed.commit)[b.name] if placed else pricing.forecast(job, b.unit, model, self.s.cfg)
            bal = balance.balance(b, spent.get(b.name, 0), running, now, span=periods.span_at(b, now))
            budgets.append({"budget": b.name, "unit": b.unit, "forecast": need / 1e6,
                            "available_after": (ledger.cap(b) - bal.spent - bal.committed - bal.accrued - need) / 1e6})
        if placed:
            where = ",".join(n for n, _ in placed.parts) or placed.node     # a gang: every node
            verdict = f"would start now on {where}" + (f" with {','.join(placed.gpus)}" if placed.gpus else "")
        else:
            verdict = f"would pend: {why.reason} ({why.detail})" if why else "would pend"
        start = now if placed else policy.expected_starts(snap, self.s.cfg).get(probe.id)
        rate = placed.cost_rate if placed else pricing.rate(job, "usd", model, self.s.cfg)
        return {"ok": True, "test_only": True, "verdict": verdict, "starts_now": placed is not None,
                "reason": why.reason if why else None, "budgets": budgets, "expected_start": start,
                "estimate": estimate_dict(job, self.s.cfg), "start_from": start_basis(self.s.cfg),
                "cost_per_hour": rate / 1e6, "forecast_cost": accrue(rate, job.time_limit) / 1e6,
                "forecast_text": fmt_money(accrue(rate, job.time_limit), currency=self.s.cfg.rates.currency)}

    def starts(self, user: str, body: dict[str, Any], now: float) -> Change:
        """Expected starts of the pending jobs (`labq stat --start`), from the scheduler's own snapshot:
        the ended jobs that dependencies name and the budgets' effective limits are in it."""
        st = self.s.state
        spent = self.s.books.spent_now(now, self.s.read.spent)
        snap, _ = st.view(now, spent, *st.ended_view(None, self.s.read.ended))
        got = policy.expected_starts(snap, self.s.cfg)
        return Change(reply={"ok": True, "now": now, "starts": {str(k): v for k, v in got.items()}})

    # -- hold / release --------------------------------------------------------------------------
    def hold(self, user: str, body: dict[str, Any], now: float) -> Change:
        return self._set_held(user, body, True)

    def release(self, user: str, body: dict[str, Any], now: float) -> Change:
        return self._set_held(user, body, False)

    def _set_held(self, user: str, body: dict[str, Any], held: bool) -> Change:
        def act(job: Job) -> tuple[Job | None, str]:
            if job.state != states.PENDING:
                return None, f"job {job.display_id} is {job.state}, not pending"
            return replace(job, held=held), "held" if held else "released"
        # Only the rests whose tasks this changes: `hold A` of a rest pending holds the rest whole,
        # and `A_i` of it leaves the rest as a record; a rest already so stays as it is.
        return self._each_job(user, body, act, diverge=lambda r: r.template.held != held,
                              whole=lambda r: rest.flipped(r, held))

    def _each_job(self, user: str, body: dict[str, Any], act: Judge, make: Callable[[Job], Job] | None = None,
                  diverge: Callable[[Rest], bool] = lambda r: True,
                  whole: Callable[[Rest], Job | Rest] | None = None) -> Change:
        """Apply `act(job) -> (new job or None, state or error)` to each named job the user may touch.
        With `make`, `act` only judges and `make(job)` builds each new record later; more than CHUNK
        of them CHUNK at a time (Change.chunks, committed one transaction each): a 100,000-task cancel
        never holds a second copy of every Job, nor a result dict per task (the reply names runs of
        ids, idruns.py)."""
        ids = _named_ids(body)
        admin = user in self.s.cfg.security.admins
        may = lambda u: u == user or admin    # noqa: E731
        change, runs = Change(), Runs()
        told, taken = rests_named(self.s, ids, may, diverge, whole, change, act)
        results: list[dict[str, Any]] = []
        errors: list[dict[str, Any]] = []
        todo: list[Job | None] = []     # _chunks lets each go once its chunk is built
        seen: set[int] = set()
        look = Lookup(self.s, ids, taken, change.rests)
        for text in ids:
            whole_one = text.isdigit() and int(text) in told     # its tasks made records before, if any
            found = look.records(int(text)) if whole_one else resolve_ref(text, look.record, look.tasks, look.task)
            if not found and not whole_one:
                errors.append({"id": text, "ok": False, "error": f"no such job: {text}"})
                results.append(errors[-1])
            for job in found:
                if job.user != user and not admin:
                    errors.append({"id": job.display_id, "ok": False,
                                   "error": f"job {job.display_id} belongs to {job.user}"})
                    results.append(errors[-1])
                    continue
                new, said = act(job)
                if new is None:
                    errors.append({"id": job.display_id, "ok": False, "error": said})
                    results.append(errors[-1])
                    continue
                if make is None and job.id not in look.resting:     # a resting task stays as it was
                    change.jobs.append(new)
                    change.controls += _controls(job, new)
                elif make is not None and job.id not in seen:
                    seen.add(job.id)
                    todo.append(job)
                runs.add(job, said)
                if runs.count <= LISTED:
                    results.append({"id": job.display_id, "ok": True, "state": said})
            if whole_one:       # after its records: A_[0-99] and A_[100-99999] read as one run
                rest.told(runs, *told[int(text)])
        del look, seen
        if make is not None and len(todo) > CHUNK:
            change.chunks = _chunks(todo, act, make)
        elif make is not None:
            # A few records: committed with the reply in the round's batch, like any request. Streamed,
            # each cancel read its partial key and was a transaction of its own (~3 round trips).
            for old in (j for j in todo if j is not None):
                change.jobs.append(new := make(old))
                change.controls += _controls(old, new)
        change.reply = idruns.reply(runs, results, errors)
        return change

    # -- checkpoint ----------------------------------------------------------------------------
    def checkpoint(self, user: str, body: dict[str, Any], now: float) -> Change:
        """A running job says it has just saved a checkpoint (`labq checkpoint`, from inside it)."""
        jid = body.get("job_id")
        job = self.s.jobs.get(jid) if isinstance(jid, int) and not isinstance(jid, bool) else None
        if job is None or job.user != user:
            raise UsageError(f"checkpoint: no running job {jid!r} of user {user}")
        new = tr.checkpointed(job, now)
        if new is None:
            raise UsageError(f"checkpoint: job {job.display_id} is not running")
        return Change(jobs=[new], reply={"ok": True, "job_id": jid, "time": now})

    # -- drain / resume ------------------------------------------------------------------------
    def drain(self, user: str, body: dict[str, Any], now: float) -> Change:
        """Take nothing new on the node; what runs there finishes."""
        return self._node_admin(user, body, "drain")

    def resume(self, user: str, body: dict[str, Any], now: float) -> Change:
        return self._node_admin(user, body, None)

    def _node_admin(self, user: str, body: dict[str, Any], value: str | None) -> Change:
        if user not in self.s.cfg.security.admins:
            raise RefusedError(f"only admins ({', '.join(self.s.cfg.security['admins'])}) may drain or resume nodes")
        name = body.get("node")
        if not isinstance(name, str) or name not in {n.name for n in self.s.nodes}:
            raise UsageError(f"node: no such node {name!r} (known: {', '.join(n.name for n in self.s.nodes)})")
        return Change(nodes=[(name, value)], reply={"ok": True, "node": name, "state": value or "up"})

    # -- cancel --------------------------------------------------------------------------------
    def cancel(self, user: str, body: dict[str, Any], now: float) -> Change:
        def judge(job: Job) -> tuple[Job | None, str]:
            if job.state == states.PENDING:
                return job, states.CANCELLED
            if job.state in states.ON_NODE:
                return job, "cancelling"
            return None, f"job {job.display_id} already ended"

        def make(job: Job) -> Job:
            if job.state == states.PENDING:
                return tr.end_pending(job, states.CANCELLED, f"cancelled by {user}", now)
            # The runner sees the control key, TERMs the tree and reports `cancelled`.
            return replace(job, cancel_requested=True)
        return self._each_job(user, body, judge, make,
                              whole=lambda r: rest.ended(r, states.CANCELLED, f"cancelled by {user}", now))

    # -- requeue -------------------------------------------------------------------------------
    def requeue(self, user: str, body: dict[str, Any], now: float) -> Change:
        """`labq requeue`: a running job is stopped (SIGTERM, SIGKILL after kill_wait) and goes back to
        PD with the same id and restart_count + 1. An ended job stays ended: jobs that depend on it
        have already been judged by its state."""
        def act(job: Job) -> tuple[Job | None, str]:
            if job.state == states.PENDING:
                return job, "pending (nothing to requeue)"
            if job.state in states.ON_NODE and job.cancel_requested:
                return None, f"job {job.display_id} is being cancelled"
            if job.state == states.PREEMPTING or job.requeue_requested:
                return job, "requeueing"
            if job.state in states.ON_NODE:
                return replace(job, requeue_requested=True), "requeueing"
            return None, f"job {job.display_id} already ended ({job.state}); only running jobs can be requeued"
        return self._each_job(user, body, act, diverge=lambda r: False)

    def dep_ids(self, text: str) -> list[int]:
        """The job ids a dependency on `text` means: `42` (the job, or every task of array 42) or
        `42_3` (one task); empty when there is no such job. Ended jobs' records are the tick's (Unread)."""
        tasks = parse_task_ids(text)
        head = self._record(tasks[0] if tasks else int(text))
        if head is None or (tasks and head.array_id != head.id):
            return []
        if head.array_id != head.id:
            return [head.id]
        ids = range(head.id, head.id + (head.array_count or 1))
        if not tasks:
            return list(ids)
        resting = rest.tasks_of(self.s.rests, ids) if self.s.rests else {}
        # In the table, else as the tick read them: only ids and indices are read, which never change.
        active = [j for i in ids if (j := self.s.jobs.get(i)) is not None]
        ended = records_of(self.s.read.records, [i for i in ids if i not in self.s.jobs and i not in resting])
        return sorted(j.id for j in [*active, *ended, *resting.values()] if j.array_index in tasks[1])

    def _record(self, jid: int) -> Job | None:
        if jid in self.s.jobs:
            return self.s.jobs[jid]
        return rest.tasks_of(self.s.rests, [jid]).get(jid) or record_of(self.s.read.records, jid)


_SET_ID = getattr(Job, "id").__set__       # the slot's own setter (frozen: no setattr), as jobspec._copies uses


def _numbered(template: Job, jid: int) -> Job:
    """A single job's record: its template given id `jid` in place. The template is this request's
    own (job_from_submit built it, Estimator.stamp returns it or a new one) and nothing else holds
    it, so it is numbered, not copied: a copy of its 71 slots (jobspec.expand) was ~5 us of a submit's
    ~40 in the handler."""
    _SET_ID(template, jid)
    return template


def _named_ids(body: dict[str, Any]) -> list[str]:
    """The job ids a cancel/hold/release/requeue names, within MAX_IDS and MAX_TASKS_NAMED."""
    ids = body.get("ids")
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
        raise UsageError("expected a list of job ids")
    if len(ids) > MAX_IDS:
        raise RefusedError(f"{len(ids)} job ids in one request; at most {MAX_IDS} (send them in parts)")
    named = sum(tasks_named(i) for i in ids)
    if named > MAX_TASKS_NAMED:
        raise RefusedError(f"the ids name {named} tasks; at most {MAX_TASKS_NAMED} in one request")
    return ids


def _controls(old: Job, new: Job) -> list[tuple[int, str]]:
    if (new.cancel_requested and not old.cancel_requested) or (new.requeue_requested and not old.requeue_requested):
        return [(old.id, "cancel")]      # requeue: transitions._close sends it back
    return []


def _chunks(todo: list[Job | None], act: Judge, make: Callable[[Job], Job]) -> Iterator[Change]:
    """The new records of `todo`, CHUNK at a time, each with the runs of ids it acts on (its reply);
    each old record let go once its chunk is built (the table drops it when the chunk commits), so
    two copies of a chunk live at once, not of all."""
    for i in range(0, len(todo), CHUNK):
        chunk = todo[i:i + CHUNK]
        todo[i:i + CHUNK] = [None] * len(chunk)
        part = [j for j in chunk if j is not None]     # every one: a slot is let go only here
        runs = Runs()
        for j in part:
            runs.add(j, act(j)[1])
        jobs = [make(j) for j in part]
        yield Change(jobs=jobs, controls=[c for old, new in zip(part, jobs) for c in _controls(old, new)],
                     reply={"runs": runs.runs})


def _max_submit(job: Job, n: int, tally: Tally, cfg: Config) -> None:
    """max_submit counts pending and running jobs, like SLURM's MaxSubmitJobs: beyond it, refuse."""
    for cap, who, have in ((cfg.account_named(job.account), f"account {job.account}",
                            tally.active_by_account[job.account]),
                           (cfg.user_named(job.user), f"user {job.user}", tally.active_by_user[job.user])):
        if cap is None or cap.max_submit is None:
            continue
        if have + n > cap.max_submit:
            raise RefusedError(f"{who} has {have} jobs pending or running, {n} more would pass max_submit={cap.max_submit}")
