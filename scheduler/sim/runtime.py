"""Where a replayed job's expected run time comes from (`Job.learned_est`, read by backfill and the
short-job priority term when the config turns them on).

- `Learned`: as the daemon does (scheduler/estimate.py) — stamped at submit from the runs that ended
  before that instant, fed one ended attempt at a time as the replay reaches its end. The replay
  processes an instant's ends before its submits and never an end before its instant, so an
  estimate can only rest on jobs that had ended by then (tests/property/test_learned_runtime.py).
- `Oracle`: each job's true duration from the trace, capped by its time limit. No scheduler knows
  that: a replay with it is a bound on what duration-aware ordering could do, not a policy.
"""
from dataclasses import replace

from ..estimate import Estimator
from ..model import Job
from .trace import TraceJob


class Learned:
    kind = "learned"

    def __init__(self, cfg):
        self.estimator = Estimator.from_config(cfg)

    def stamp(self, job: Job, tj: TraceJob) -> Job:
        return self.estimator.stamp(job)

    def observe(self, job: Job) -> None:
        self.estimator.observe_ended(job)


class Oracle:
    kind = "oracle"

    def stamp(self, job: Job, tj: TraceJob) -> Job:
        run = max(1, round(tj.duration))
        limited = job.time_limit > 0 and run > job.time_limit
        return replace(job, learned_est=job.time_limit if limited else run,
                       learned_basis="the trace's true run time (oracle)")

    def observe(self, job: Job) -> None:
        """The oracle learns nothing: it already knows."""


def uses_estimates(cfg) -> bool:
    """Whether anything in the config reads `learned_est`."""
    return bool(cfg.estimate["backfill"] or cfg.estimate["forecast"] or cfg.priority["short_job_weight"])


def source(cfg, oracle: bool = False):
    """The run-time source a replay under `cfg` uses: the oracle when asked, else the learned one when
    the config reads estimates, else none (jobs keep no estimate, as on a daemon that uses none)."""
    if oracle:
        return Oracle()
    return Learned(cfg) if uses_estimates(cfg) else None
