"""Policy variants for the simulator: each one is a Config, derived from the configured one with
`dataclasses.replace`. The scheduling code is the same for all of them — `policy.plan()`.

- fifo:      no QoS, fair-share or burst weight (order by age), backfill_depth 0, no preemption
- priority:  the configured weights without fair share, backfill_depth 0
- backfill:  fifo's weights with backfill_depth 1 (or --backfill-depth N), no preemption
- fairshare: priority's with fairshare_weight > 0 (the configured one, else the built-in 50)
- config:    the configuration exactly as the daemon would run it
- learned, sjf-oracle (registered Hooks, below): backfill over run times learned online
             from the jobs ended so far, short jobs first; and the same with the trace's true run
             times, an oracle bound, not a policy.
A built-in policy whose config reads learned run times ([estimate] backfill/forecast, a
short_job_weight) learns them online as the daemon does (`Learned`).

A policy that needs more than a Config (an expected runtime per job, learned from the jobs that
ended so far) is a `Hooks` subclass registered by name (`register`); the engine calls it.

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

from ..errors import UsageError
from ..jobs.estimate import Estimator
from ..settings.config import Config
from ..settings.sections import Priority

BUILT_IN = ("fifo", "priority", "backfill", "fairshare", "config")
POLICIES = BUILT_IN            # the built-in names; `names()` adds the registered ones
_FIFO_WEIGHTS = {"qos_weight": 0.0, "fairshare_weight": 0.0, "burst_penalty": 0.0}


class Hooks:
    """What a policy may add to a replay besides its Config. The engine calls, on the virtual clock:

    - `estimate(job, trace_job, t)` when a job enters the queue (its submit, or a requeue): the
      expected runtime in seconds, or None; the engine stores it as the record's `est`, which
      plan() and the backfill timelines read like the daemon's;
    - `stamp(job, trace_job, t)` at the same moments: the record as it enters the queue; by default
      with `est` from `estimate` (`Learned` overrides it to write the daemon's `learned_est`);
    - `on_end(job, trace_job, t)` after every attempt end, with the job's record after it (ended or
      requeued): only what has ended by `t` is ever shown, so an estimate never reads the future.
      It may return ids of pending jobs whose estimate should be asked again (None: none).
    """
    label = ""                 # shown in reports beside the config, e.g. "a bound: true durations"

    def config(self, base: Config, backfill_depth: int | None = None) -> Config:
        return policy_config(base, "backfill", backfill_depth)

    def estimate(self, job, trace_job, t: float) -> int | None:
        return None

    def stamp(self, job, trace_job, t: float):
        return replace(job, est=self.estimate(job, trace_job, t))

    def on_end(self, job, trace_job, t: float):
        return None


_REGISTRY: dict = {}


def register(name: str, factory) -> None:
    """Make `--policy NAME` (and `--compare`) build a replay with `factory()`, a Hooks."""
    if name in BUILT_IN:
        raise ValueError(f"{name} is a built-in policy")
    _REGISTRY[name] = factory


def names() -> tuple[str, ...]:
    return BUILT_IN + tuple(sorted(_REGISTRY))


def _check(name: str, backfill_depth: int | None) -> None:
    if name not in BUILT_IN and name not in _REGISTRY:
        raise UsageError(f"--policy: expected one of {', '.join(names())}, got {name!r}")
    if backfill_depth is not None and backfill_depth < 0:
        raise UsageError(f"--backfill-depth: expected a whole number ≥ 0, got {backfill_depth}")


def resolve(base: Config, name: str, backfill_depth: int | None = None) -> tuple[Config, Hooks | None]:
    """The Config and the hooks (None for a built-in policy) of the policy `name`."""
    _check(name, backfill_depth)
    if name in _REGISTRY:
        hooks = _REGISTRY[name]()
        return hooks.config(base, backfill_depth), hooks
    cfg = policy_config(base, name, backfill_depth)
    return cfg, (Learned(cfg) if uses_estimates(cfg) else None)


def policy_config(base: Config, name: str, backfill_depth: int | None = None) -> Config:
    if name in _REGISTRY:
        return resolve(base, name, backfill_depth)[0]
    _check(name, backfill_depth)
    weights = dict(base.priority)
    if name == "config":
        cfg = base
    elif name in ("fifo", "backfill"):
        weights.update(_FIFO_WEIGHTS)
        cfg = replace(base, priority=Priority(**weights), backfill_depth=1 if name == "backfill" else 0, preemption=False)
    elif name == "priority":
        weights["fairshare_weight"] = 0.0
        cfg = replace(base, priority=Priority(**weights), backfill_depth=0)
    else:
        weights["fairshare_weight"] = weights.get("fairshare_weight") or Config().priority["fairshare_weight"]
        cfg = replace(base, priority=Priority(**weights), backfill_depth=0)
    if backfill_depth is not None:
        cfg = replace(cfg, backfill_depth=backfill_depth)
    return cfg


def describe(cfg: Config) -> str:
    w = cfg.priority
    short = f", short jobs {w.short_job_weight:g} (scale {w.short_job_scale:g}s)" if w.short_job_weight else ""
    runs = " over expected run times" if cfg.estimate.backfill else ""
    return (f"weights qos {w['qos_weight']:g}, age {w['age_weight']:g}, fairshare {w['fairshare_weight']:g}, "
            f"burst {w['burst_penalty']:g}{short}; backfill_depth {cfg.backfill_depth}{runs}; "
            f"preemption {'on' if cfg.preemption else 'off'}")


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
