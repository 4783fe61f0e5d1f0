"""Expected run times in a replay, on the simulator's one seam (policies.Hooks): `learned` and
`sjf-oracle`, registered by name, and the learning a built-in policy gets when its config reads them.

- `Learned`: as the daemon does (scheduler/jobs/estimate.py) — each job is stamped (`learned_est`,
  `learned_basis`) when it enters the queue from the runs that had ended by then, and the estimator
  is fed each attempt end as the replay reaches it. The engine shows an end only at its own instant,
  ends before submits, so an estimate can only rest on jobs that had ended by the instant it is made
  (tests/property/test_learned_runtime.py).
- `Oracle`: each job's true duration from the trace, capped by its time limit. No scheduler knows
  that: a replay with it is an oracle bound on what duration-aware ordering does, not a policy (and,
  greedy shortest-first being no optimum, not a strict lower bound either).

Both run the same Config: backfill over expected run times (estimate.backfill) with short jobs first
(short_job_weight = age_weight, the most the aging bound allows), FIFO weights, no preemption.
"""
from dataclasses import replace

from ..jobs.estimate import Estimator
from ..settings.config import Config
from .policies import Hooks, policy_config, register


def learned_config(base: Config, backfill_depth: int | None = None) -> Config:
    cfg = policy_config(base, "backfill", backfill_depth)
    return replace(cfg, priority=cfg.priority.with_(short_job_weight=cfg.priority.age_weight),
                   estimate=cfg.estimate.with_(backfill=True))


def uses_estimates(cfg: Config) -> bool:
    """Whether anything in the config reads `learned_est`."""
    return bool(cfg.estimate.backfill or cfg.estimate.forecast or cfg.priority.short_job_weight)


class Learned(Hooks):
    label = "run times learned online from the jobs ended so far"

    def __init__(self, cfg: Config | None = None):
        self.estimator = Estimator.from_config(cfg or Config())

    def config(self, base: Config, backfill_depth: int | None = None) -> Config:
        cfg = learned_config(base, backfill_depth)
        self.estimator = Estimator.from_config(cfg)
        return cfg

    def stamp(self, job, trace_job, t: float):
        # A requeued job keeps the estimate it was submitted with, as in the daemon.
        return job if job.attempts else self.estimator.stamp(job)

    def on_end(self, job, trace_job, t: float):
        self.estimator.observe_ended(job)
        return None       # as the daemon: a pending job keeps the estimate it was submitted with


class Oracle(Hooks):
    label = ("an oracle bound, not a policy: each job's true run time, which no scheduler knows "
             "(greedy shortest-first is no optimum, so not a strict lower bound)")

    def config(self, base: Config, backfill_depth: int | None = None) -> Config:
        return learned_config(base, backfill_depth)

    def stamp(self, job, trace_job, t: float):
        run = max(1, round(trace_job.duration))
        limited = job.time_limit > 0 and run > job.time_limit
        return replace(job, learned_est=job.time_limit if limited else run,
                       learned_basis="the trace's true run time (oracle)")


register("learned", Learned)
register("sjf-oracle", Oracle)
