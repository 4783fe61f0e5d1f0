"""How a job record changes on each thing that happens to it — pure functions, Job in, Job out.

The daemon calls these and writes the result in one transaction with whatever caused it (the
request or event acknowledged, the ledger entries, the reply).
"""
from dataclasses import dataclass, replace

from . import ledger, states
from .config import Config
from .model import Attempt, Job
from .plan import Place


@dataclass(frozen=True)
class Charge:
    """One ledger entry: `amount` micro-units of `budget` for attempt `attempt` of job `job`."""
    job: int
    attempt: int
    budget: str
    unit: str
    amount: int

    @property
    def key(self) -> str:
        return f"{self.job}.{self.attempt}"


def admit(job: Job, place: Place, now: float) -> Job:
    n = len(job.attempts) + 1
    a = Attempt(attempt=n, node=place.node, gpus=place.gpus, dispatch_time=now)
    return replace(job, state=states.RUNNING, reason=states.NONE, detail="", node=place.node,
                   gpu_uuids=place.gpus, start_time=job.start_time or now, commit=place.commit,
                   rates=place.rates, cost_rate=place.cost_rate, attempts=job.attempts + (a,))


def preempting(job: Job, for_job: int | None, detail: str, now: float) -> Job:
    """The preempt control went out: the job drains (`PR`) for `for_job` during its grace."""
    return replace(job, state=states.PREEMPTING, preempted_for=for_job, preempt_time=now, detail=detail)


def pend(job: Job, reason: str, detail: str) -> Job:
    return replace(job, reason=reason, detail=detail)


def end_pending(job: Job, state: str, detail: str, now: float) -> Job:
    """A job that never ran ends (expired, cancelled while pending): no attempt, no charge."""
    return replace(job, state=state, reason=states.NONE, detail=detail, end_time=now)


def started(job: Job, attempt: int, body: dict) -> Job | None:
    cur = job.current
    if job.state not in states.ON_NODE or cur is None or cur.attempt != attempt or cur.start_time:
        return None
    a = replace(cur, start_time=float(body.get("start_time", 0)) or cur.dispatch_time)
    return replace(job, attempts=job.attempts[:-1] + (a,))


def checkpointed(job: Job, at: float) -> Job | None:
    """`labq checkpoint` from inside the running attempt: remember when."""
    cur = job.current
    if job.state not in states.ON_NODE or cur is None or cur.end_time:
        return None
    return replace(job, attempts=job.attempts[:-1] + (replace(cur, last_checkpoint=at),))


def finished(job: Job, attempt: int, body: dict, now: float, cfg: Config):
    """(new job, charges) for the attempt's end, or None when the event is stale or a duplicate."""
    cur = job.current
    if job.state not in states.ON_NODE or cur is None or cur.attempt != attempt or cur.end_time:
        return None
    outcome = body.get("outcome", "error")
    # Billing stops when the allocation is released; never trust a clock ahead of ours.
    end = min(float(body.get("end_time") or now), now)
    ckpt = body.get("last_checkpoint")
    return _close(job, cur, outcome, end, body.get("exit_code"), body.get("usage") or {},
                  body.get("message", ""), cfg, float(ckpt) if isinstance(ckpt, (int, float)) else None)


def node_failed(job: Job, last_heartbeat: float, now: float, cfg: Config):
    """The node's lease expired under the job: `NF`, charged to the last heartbeat, requeued."""
    cur = job.current
    end = max(cur.dispatch_time or now, min(last_heartbeat or now, now))
    return _close(job, cur, "node_failure", end, None, {}, "node lease expired", cfg)


INTERRUPTED = frozenset({"timeout", "preempted", "node_failure", "cancelled"})


def _close(job: Job, cur: Attempt, outcome: str, end: float, exit_code, usage: dict, message: str, cfg: Config,
           checkpoint: float | None = None):
    start = cur.dispatch_time or end
    budgets = {b.name: b for b in cfg.budgets}
    rates = dict(job.rates)
    charges = tuple(Charge(job.id, cur.attempt, name, budgets[name].unit,
                           ledger.charge(rates.get(name, 0), start, end, budgets[name].unit, cfg))
                    for name, _ in job.commit if name in budgets)
    cost = ledger.charge(job.cost_rate, start, end, "usd", cfg)
    # The newest of what the runner saw in the checkpoint directory and what `labq checkpoint` said.
    last_ckpt = max((t for t in (checkpoint, cur.last_checkpoint) if t), default=None)
    # Work lost: what ran since the last checkpoint, for an attempt cut short (not one that ended itself).
    lost = 0.0
    if outcome in INTERRUPTED:
        began = cur.start_time or start
        lost = max(0.0, end - max(began, last_ckpt or began))
    a = replace(cur, end_time=end, outcome=outcome, exit_code=exit_code, usage=usage, cost=cost,
                charges=tuple((c.budget, c.amount) for c in charges),
                start_time=cur.start_time or None, last_checkpoint=last_ckpt, lost_work_s=round(lost, 3))
    state = states.OUTCOME_STATE.get(outcome, states.FAILED)
    common = dict(attempts=job.attempts[:-1] + (a,), commit=(), rates=(), cost_rate=0, exit_code=exit_code,
                  node="", gpu_uuids=(), preempted_for=None, preempt_time=None, borrowed=False,
                  preempt_count=job.preempt_count + (outcome == "preempted"))
    # A job whose cancel was asked for is never requeued, whatever ended the attempt.
    if job.cancel_requested and (state == states.PENDING or outcome == "node_failure"):
        new = replace(job, state=states.CANCELLED, reason=states.NONE, detail="cancelled", end_time=end,
                      **{**common, "node": cur.node, "gpu_uuids": cur.gpus})
    elif outcome == "node_failure":
        # SLURM requeues on node failure by default; the job keeps its id and counts the restart.
        new = replace(job, state=states.PENDING, reason=states.NONE, detail=f"requeued: {message}",
                      restart_count=job.restart_count + 1, **common)
    elif state == states.PENDING:
        new = replace(job, state=states.PENDING, reason=states.NONE, detail=f"requeued after {outcome}",
                      restart_count=job.restart_count + 1, **common)
    else:
        new = replace(job, state=state, reason=states.NONE, detail=message, end_time=end,
                      **{**common, "node": cur.node, "gpu_uuids": cur.gpus})
    return new, charges
