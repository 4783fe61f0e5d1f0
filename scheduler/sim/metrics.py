"""The replay's report, from the final job records alone. Pure.

Per job that ran and ended: wait = first start − submit; completion time (response) = final end −
submit; run = the final attempt's length; bounded slowdown = max(1, response / max(run, 10 s)).
Makespan runs from the first submit to the last end; utilisation is allocated resource-seconds
(lost work included: it held the resources) over capacity × makespan, in GPUs when the cluster has
GPUs, else CPUs.
"""
from collections import Counter

from ..jobs import states
from ..money import periods
from ..units import MICRO
from .result import BUDGET_REASONS, EPOCH, Result

BSLD_BOUND_S = 10.0


def percentile(values, q: float) -> float:
    """Linear interpolation between the closest ranks (numpy's default); 0 for no values."""
    if not values:
        return 0.0
    xs = sorted(values)
    pos = (len(xs) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _mean(xs) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def capacity(nodes) -> dict:
    return {"nodes": len(nodes), "gpus": sum(len(n.gpus) for n in nodes), "cpus": sum(n.cpus for n in nodes)}


def waits(res: Result) -> list[float]:
    """Each job's wait (first start − submit), for the jobs that ran and ended."""
    return [_at(j.attempts[0].dispatch_time) - j.submit_time for j in res.jobs.values()
            if j.state in states.TERMINAL and j.attempts]


def _at(t: float | None) -> float:
    """A time a replay always sets where the report reads it (an ended job's end, its attempts' starts)."""
    if t is None:
        raise ValueError("a replayed job that ended without its times")
    return t


def _ran(a) -> float:
    return _at(a.end_time) - _at(a.dispatch_time)


def report(res: Result) -> dict:
    cap = capacity(res.nodes)
    # At the end of a replay every job's record is alive: what is summed here is read from them in
    # passes, not copied into lists beside them (a list per figure was ~30 MB at 200,000 jobs, issue 41).
    finished = [j for j in res.jobs.values() if j.state in states.TERMINAL and j.attempts]
    waited = waits(res)
    resp = [_at(j.end_time) - j.submit_time for j in finished]
    bsld = sum(max(1.0, r / max(_ran(j.attempts[-1]), BSLD_BOUND_S)) for r, j in zip(resp, finished))
    first = EPOCH + res.trace[0].submit if res.trace else EPOCH
    last = max((_at(a.end_time) for _, a in _ended(res)), default=first)
    makespan = max(0.0, last - first)
    used = {"gpus": sum(len(a.gpus) * _ran(a) for _, a in _ended(res)),
            "cpus": sum(j.cpus * _ran(a) for j, a in _ended(res))}
    util = {k: (used[k] / (cap[k] * makespan) if cap[k] and makespan else None) for k in ("gpus", "cpus")}
    primary = "gpus" if cap["gpus"] else "cpus"
    preempted = [(j, a) for j, a in _ended(res) if a.outcome == "preempted"]
    timeouts = [(j, a) for j, a in _ended(res) if a.outcome == "timeout"]
    pending = [j for j in res.jobs.values() if j.state == states.PENDING]
    outcomes = Counter(j.state for j in res.jobs.values())
    budgets = {b.name: _budget(b, res) for b in res.cfg.budgets}
    return {
        "cluster": cap,
        "jobs": {"trace": len(res.trace), "queued": len(res.jobs), "refused": len(res.refused),
                 "gpus_rounded_up": sum(1 for t in res.trace if t.gpus_asked is not None),
                 "cpus_rounded_up": sum(1 for t in res.trace if t.cpus_asked is not None),
                 "completed": outcomes[states.COMPLETED], "timeout": outcomes[states.TIMEOUT],
                 "expired": sum(outcomes[s] for s in (states.EXPIRED, states.DEADLINE, states.CANCELLED)),
                 "never_started": sum(1 for j in pending if not j.attempts),
                 "requeued_unfinished": sum(1 for j in pending if j.attempts)},
        "makespan_s": _r(makespan, 1),
        "utilisation": _r(util[primary], 4),
        "utilisation_of": primary,
        "utilisation_by": {k: _r(v, 4) for k, v in util.items()},
        "wait_s": {"mean": _r(_mean(waited), 1), "p50": _r(percentile(waited, 0.5), 1),
                   "p95": _r(percentile(waited, 0.95), 1)},
        "bounded_slowdown": {"mean": _r(bsld / len(finished) if finished else 0.0, 3), "bound_s": BSLD_BOUND_S},
        "completion_time_s": {"mean": _r(_mean(resp), 1)},
        "cost": _m(sum(j.cost for j in res.jobs.values())),
        "currency": res.cfg.rates.currency,
        "budgets": budgets,
        "refused": {"count": len(res.refused), "by_kind": dict(sorted(Counter(r.kind for r in res.refused).items())),
                    "first": res.refused[0].message if res.refused else None},
        "held_by_budget": {"jobs": len(res.budget_held),
                           "never_started": sum(1 for j in pending if j.reason in BUDGET_REASONS)},
        "preemptions": {"count": len(preempted), "jobs": len({j.id for j, _ in preempted}), **_lost(preempted)},
        "timeouts": {"count": len(timeouts), **_lost(timeouts)},
        "plan": {"calls": res.plan_calls, "skipped": res.plan_skipped, "instants": res.instants},
    }


def _ended(res: Result):
    """(job, attempt) of every attempt that ended, job by job."""
    return ((j, a) for j in res.jobs.values() for a in j.attempts if a.end_time is not None)


def _lost(attempts) -> dict:
    """Work lost by these attempts (since their last checkpoint; a replay has none): seconds, and
    GPU- and CPU-hours of the allocation it held."""
    return {"lost_work_s": _r(sum(a.lost_work_s for _, a in attempts), 1),
            "lost_gpu_hours": _r(sum(a.lost_work_s * len(a.gpus) for _, a in attempts) / 3600, 3),
            "lost_cpu_hours": _r(sum(a.lost_work_s * j.cpus for j, a in attempts) / 3600, 3)}


def _budget(b, res: Result) -> dict:
    """Spent over the replay, and what is left in the period current at its end."""
    spent = periods.history(b, res.spent)
    now = periods.spent_now([b], res.spent, res.end_time)[b.name]
    return {"unit": b.unit, "period": b.period, "limit": _m(b.limit), "spent": _m(sum(v for _, v in spent)),
            "periods": len([v for _, v in spent if v]), "left": _m(b.limit - now)}


def _r(x, digits):
    return None if x is None else round(float(x), digits)


def _m(micro: int) -> float:
    return round(micro / MICRO, 6)
