"""How a job record changes on each thing that happens to it — pure functions, Job in, Job out.

The daemon calls these and writes the result in one transaction with whatever caused it (the
request or event acknowledged, the ledger entries, the reply).
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..jobs import states
from ..jobs.model import Attempt, Job, evolve
from ..jobs.plan import Place
from ..money import ledger, periods, pricing

if TYPE_CHECKING:     # annotations only: settings/ reads jobs/ (bounds), never the reverse
    from ..money.ledger import Budget
    from ..settings.config import Config

# What an ended attempt makes of the job (_close): the new record and the attempt's ledger entries.
Closed = tuple[Job, tuple["Charge", ...]]


@dataclass(frozen=True)
class Charge:
    """One ledger entry: `amount` micro-units of `budget` for attempt `attempt` of job `job`."""
    job: int
    attempt: int
    budget: str
    unit: str
    amount: int
    period: str = ""           # a periodic budget's part of the attempt in one period (periods.split)

    @property
    def key(self) -> str:
        return f"{self.job}.{self.attempt}.{self.budget}@{self.period}" if self.period else f"{self.job}.{self.attempt}"


def admit(job: Job, place: Place, now: float) -> Job:
    n = len(job.attempts) + 1
    a = Attempt(attempt=n, node=place.node, gpus=place.gpus, dispatch_time=now, parts=place.parts)
    return evolve(job, state=states.RUNNING, reason=states.NONE, detail="", node=place.node,
                   gpu_uuids=place.gpus, parts=place.parts, start_time=job.start_time or now, commit=place.commit,
                   rates=place.rates, cost_rate=place.cost_rate, borrowed=place.borrowed, earmark="", earmark_gpus=(),
                   attempts=job.attempts + (a,))


def preempting(job: Job, for_job: int | None, detail: str, now: float) -> Job:
    """The preempt control went out: the job drains (`PR`) for `for_job` during its grace."""
    return evolve(job, state=states.PREEMPTING, preempted_for=for_job, preempt_time=now, detail=detail)


def pend(job: Job, reason: str, detail: str, earmark: str = "", earmark_gpus: Iterable[str] = ()) -> Job:
    """The plan's reason for a pending job; the earmark stays only while the plan keeps it."""
    return evolve(job, reason=reason, detail=detail, earmark=earmark, earmark_gpus=tuple(earmark_gpus))


def end_pending(job: Job, state: str, detail: str, now: float) -> Job:
    """A job that never ran ends (expired, cancelled while pending): no attempt, no charge."""
    return evolve(job, state=state, reason=states.NONE, detail=detail, end_time=now, earmark="", earmark_gpus=())


def started(job: Job, attempt: int, body: dict[str, Any]) -> Job | None:
    cur = job.current
    if job.state not in states.ON_NODE or cur is None or cur.attempt != attempt:
        return None
    began = float(body.get("start_time", 0)) or cur.dispatch_time
    if cur.start_time and not _earlier_part(cur, began):
        return None
    a = replace(cur, start_time=began)
    return evolve(job, attempts=job.attempts[:-1] + (a,))


def _earlier_part(cur: Attempt, began: float | None) -> bool:
    """A gang's part that began before the attempt's recorded start: its parts' `started` are read
    stream by stream, not in time order (the chaos soak billed a part's first 3.5 s to nobody), and
    the attempt is billed from its first part's process start."""
    return bool(cur.parts) and began is not None and began < (cur.start_time or float("inf"))


def checkpointed(job: Job, at: float) -> Job | None:
    """`labq checkpoint` from inside the running attempt: remember when."""
    cur = job.current
    if job.state not in states.ON_NODE or cur is None or cur.end_time:
        return None
    return evolve(job, attempts=job.attempts[:-1] + (replace(cur, last_checkpoint=at),))


def finished(job: Job, attempt: int, body: dict[str, Any], now: float, cfg: Config) -> Closed | None:
    """(new job, charges) for the attempt's end, or None when the event is stale or a duplicate."""
    cur = job.current
    if job.state not in states.ON_NODE or cur is None or cur.attempt != attempt or cur.end_time:
        return None
    outcome = body.get("outcome", "error")
    # The process's end as the node measured it (a late event, after a Redis outage, keeps it);
    # never trust a clock ahead of ours.
    end = min(float(body.get("end_time") or now), now)
    ckpt = body.get("last_checkpoint")
    began = body.get("start_time")
    if began and (not cur.start_time or _earlier_part(cur, float(began))):
        # `started` never arrived (Redis was away as it began): the runner's end says when it did.
        cur = replace(cur, start_time=float(began))
    return _close(job, cur, outcome, end, body.get("exit_code"), body.get("usage") or {},
                  body.get("message", ""), cfg, float(ckpt) if isinstance(ckpt, (int, float)) else None, now)


def part_usage(job: Job, attempt: int, node: str, usage: dict[str, Any]) -> Job | None:
    """A gang's part on `node` reported its usage: kept on its attempt under usage["nodes"][node]
    (the attempt's own usage is the part that ended it). None when there is nothing new."""
    a = job.attempts[attempt - 1] if 0 < attempt <= len(job.attempts) else None
    if a is None or not a.parts or not isinstance(usage, dict):
        return None
    nodes = dict(a.usage.get("nodes") or {})
    if node in nodes:
        return None
    nodes[node] = usage
    new = replace(a, usage={**a.usage, "nodes": nodes})
    return evolve(job, attempts=job.attempts[:attempt - 1] + (new,) + job.attempts[attempt:])


def node_failed(job: Job, last_heartbeat: float, now: float, cfg: Config, why: str = "node lease expired") -> Closed:
    """The node's lease expired under the job: `NF`, charged to the last heartbeat, requeued."""
    cur = job.current
    assert cur is not None, "node_failed: the job has no attempt"
    end = max(cur.dispatch_time or now, min(last_heartbeat or now, now))
    return _close(job, cur, "node_failure", end, None, {}, why, cfg, now=now)


def withdrawn(job: Job, why: str, now: float, start_timeout: float = 0, node: str = "") -> Job:
    """An attempt no runner claimed, taken back by the scheduler (dispatch.py): nothing ran, so
    nothing is charged and no restart is counted. `why` "cancel" ends the job `CA` at once (labq
    del); "timeout" (not claimed within scheduler.start_timeout) puts it back in the queue."""
    cur = job.current
    assert cur is not None, "withdrawn: the job has no attempt"
    a = replace(cur, end_time=cur.dispatch_time or now, outcome="withdrawn")
    common: dict[str, Any] = dict(attempts=job.attempts[:-1] + (a,), commit=(), rates=(), cost_rate=0, node="", gpu_uuids=(),
                  parts=(), preempted_for=None, preempt_time=None, borrowed=False, requeue_requested=False)
    if why == "cancel":
        return evolve(job, state=states.CANCELLED, reason=states.NONE, end_time=now,
                       detail="cancelled before a runner took it", **common)
    return evolve(job, state=states.PENDING, reason=states.NONE, **common,
                   detail=f"requeued: no runner on node {node or cur.node} took it within {start_timeout:.0f}s")


INTERRUPTED = frozenset({"timeout", "preempted", "node_failure", "cancelled"})


def counts_as_preemption(job: Job, outcome: str) -> bool:
    """Whether an attempt's end counts toward `max_preemptions`: only a preemption the scheduler
    decided (QoS, reclaim, a budget's on_exhaust = "preempt"), i.e. the attempt ended `preempted`
    after the preempt control put the job in `PR`. The runner also reports `preempted` for the agent's
    orderly stop (checkpoint signal, grace, requeue), but that is the node going away, like a node
    failure: counting it would leave a job unprotected after a few restarts of its node's agent."""
    return outcome == "preempted" and job.state == states.PREEMPTING


def _close(job: Job, cur: Attempt, outcome: str, end: float, exit_code: int | None, usage: dict[str, Any],
           message: str, cfg: Config, checkpoint: float | None = None, now: float | None = None) -> Closed:
    start = cur.dispatch_time or end
    charges, cost = _bill(job, cur, end, end if now is None else now, cfg)
    # The newest of what the runner saw in the checkpoint directory and what `labq checkpoint` said.
    last_ckpt = max((t for t in (checkpoint, cur.last_checkpoint) if t), default=None)
    # Work lost: what ran since the last checkpoint, for an attempt cut short (not one that ended itself).
    lost = 0.0
    if outcome in INTERRUPTED:
        began = cur.start_time or start
        lost = max(0.0, end - max(began, last_ckpt or began))
    a = replace(cur, end_time=end, outcome=outcome, exit_code=exit_code, usage=usage, cost=cost,
                charges=_totals(charges),
                start_time=cur.start_time or None, last_checkpoint=last_ckpt, lost_work_s=round(lost, 3))
    common: dict[str, Any] = dict(
        attempts=job.attempts[:-1] + (a,), commit=(), rates=(), cost_rate=0, exit_code=exit_code, node="",
        gpu_uuids=(), parts=(), preempted_for=None, preempt_time=None, borrowed=False,
        preempt_count=job.preempt_count + counts_as_preemption(job, outcome), requeue_requested=False)
    state, detail, more = after_attempt(job, outcome, exit_code, cur.start_time or start, end, last_ckpt, message, cfg)
    if state == states.PENDING:
        new = evolve(job, state=state, reason=states.NONE, detail=detail, restart_count=job.restart_count + 1,
                      **common, **more)
    else:
        new = evolve(job, state=state, reason=states.NONE, detail=detail, end_time=end,
                      **{**common, "node": cur.node, "gpu_uuids": cur.gpus, "parts": cur.parts})
    return new, charges


def _bill(job: Job, cur: Attempt, end: float, now: float, cfg: Config) -> tuple[tuple[Charge, ...], int]:
    """(charges, cost) of an attempt: what its process ran, from its start to its end as the node
    measured them, at most the time limit + kill_wait; nothing for an attempt that never started."""
    span = ledger.run_span(cur.start_time, end, cur.dispatch_time, now, ledger.ceiling_seconds(job, cfg))
    if span is None:
        return (), 0
    budgets = {b.name: b for b in cfg.budgets}
    rates = dict(job.rates)
    # In safe mode the commitment is a promise too: never billed above what was committed.
    most = dict(job.commit) if cfg.budget_mode == "safe" else {}
    charges = tuple(c for name, _ in job.commit if name in budgets
                    for c in attempt_charges(job, cur, budgets[name], rates.get(name, 0), *span, cfg, most.get(name)))
    return charges, ledger.charge(job.cost_rate, *span, "usd", cfg)


def attempt_charges(job: Job, cur: Attempt, b: Budget, rate: int, start: float, end: float, cfg: Config,
                    most: int | None = None) -> list[Charge]:
    """The ledger entries of one attempt for budget `b`: one charge, or for a periodic budget one
    per period the allocation was held in (each period pays for the time used in it). `most`
    caps the total; the cut comes off the latest periods, so parts booked at earlier edges stand."""
    if b.period == "none":
        amount = ledger.charge(rate, start, end, b.unit, cfg)
        return [Charge(job.id, cur.attempt, b.name, b.unit, amount if most is None else min(amount, most))]
    parts = periods.split(b, rate, start, end, pricing.overhead(b.unit, cfg), lambda s: pricing.billed(s, cfg))
    over = sum(parts.values()) - most if most is not None else 0
    for lab in reversed(list(parts)):
        if over <= 0:
            break
        cut = min(over, parts[lab])
        parts[lab] -= cut
        over -= cut
    return [Charge(job.id, cur.attempt, b.name, b.unit, amount, lab) for lab, amount in parts.items()]


def _totals(charges: Iterable[Charge]) -> tuple[tuple[str, int], ...]:
    out: dict[str, int] = {}
    for c in charges:
        out[c.budget] = out.get(c.budget, 0) + c.amount
    return tuple(out.items())


def after_attempt(job: Job, outcome: str, exit_code: int | None, began: float, end: float, last_ckpt: float | None,
                  message: str, cfg: Config) -> tuple[str, str, dict[str, Any]]:
    """What an ended attempt makes of the job: (state, detail, fields a requeue changes).

    A requeue (state PD) keeps the id and counts a restart. What requeues:
    - a preemption, a checkpoint exit code, or `labq requeue`: at once, never counted;
    - a node failure: at once (SLURM's default), unless --no-requeue (then `NF`); with --retries N
      it is a counted retry instead, with backoff, and `NF` once the N are spent;
    - an exit code listed in --retry-on: a counted retry with backoff while --retries last;
    - a timeout only with --requeue-on-timeout and a checkpoint taken during this attempt (the
      next attempt resumes from it): at once, not counted. OOM is never retried unchanged.
    """
    state = states.OUTCOME_STATE.get(outcome, states.FAILED)
    # A job whose cancel was asked for is never requeued, whatever ended the attempt.
    if job.cancel_requested and (state == states.PENDING or outcome in ("node_failure", "cancelled")):
        return states.CANCELLED, "cancelled", {}
    if job.requeue_requested and outcome == "cancelled":
        return states.PENDING, "requeued (labq requeue)", {}
    if state == states.PENDING:
        return states.PENDING, f"requeued after {outcome}", {}
    if outcome == "node_failure":
        if not job.requeue:
            return states.NODE_FAIL, f"{message} (--no-requeue)", {}
        if not job.retries:
            return states.PENDING, f"requeued: {message}", {}
        return _retry(job, end, message, cfg) or (states.NODE_FAIL, f"{message}; {_spent(job)}", {})
    if outcome == "timeout" and job.requeue_on_timeout and last_ckpt is not None and last_ckpt >= began:
        return states.PENDING, "requeued after timeout (--requeue-on-timeout, checkpoint taken)", {}
    if outcome == "exit" and exit_code in job.retry_on:
        return _retry(job, end, f"exit code {exit_code}", cfg) or (state, f"{message or f'exit code {exit_code}'}; "
                                                                          f"{_spent(job)}", {})
    return state, message, {}


def retry_delay(retries_used: int, cfg: Config) -> int:
    """Exponential backoff: retry_backoff, then twice as long for each further retry, capped."""
    doubled: int = 2 ** min(retries_used, 32)      # int ** int is typed Any: the exponent may be negative
    return min(cfg.retry_backoff * doubled, cfg.retry_backoff_max)


def _retry(job: Job, end: float, why: str, cfg: Config) -> tuple[str, str, dict[str, Any]] | None:
    if job.retries_used >= job.retries:
        return None
    n = job.retries_used + 1
    delay = retry_delay(job.retries_used, cfg)
    return (states.PENDING, f"retry {n}/{job.retries} after {why}, backoff {delay}s",
            {"retries_used": n, "eligible_time": end + delay})


def _spent(job: Job) -> str:
    return f"retries exhausted ({job.retries_used}/{job.retries})"
