"""Policy variants for the simulator: each one is a Config, derived from the configured one with
`dataclasses.replace`. The scheduling code is the same for all of them — `policy.plan()`.

- fifo:      no QoS, fair-share or burst weight (order by age), backfill_depth 0, no preemption
- priority:  the configured weights without fair share, backfill_depth 0
- backfill:  fifo's weights with backfill_depth 1 (or --backfill-depth N), no preemption
- fairshare: priority's with fairshare_weight > 0 (the configured one, else the built-in 50)
- learned:   backfill's, planning with run times learned online from the jobs ended so far
             (estimate.backfill) and short jobs first (short_job_weight = age_weight, the most the
             aging bound allows; a job that has waited age_max is in submit order again)
- sjf-oracle: learned's, with each job's true run time from the trace: an oracle bound, not a
             policy (the usual reference; greedy shortest-first is not optimal, so a learned
             replay can come out slightly ahead of it)
- config:    the configuration exactly as the daemon would run it
"""
from dataclasses import replace

from ..config import Config
from ..errors import UsageError

POLICIES = ("fifo", "priority", "backfill", "fairshare", "learned", "sjf-oracle", "config")
# What a replay under the policy is, where it is not a policy a daemon could run.
LABELS = {"sjf-oracle": ("an oracle bound, not a policy: each job's true run time, which no scheduler knows "
                         "(a reference point; greedy shortest-first is no optimum, so not a strict lower bound)")}
_FIFO_WEIGHTS = {"qos_weight": 0.0, "fairshare_weight": 0.0, "burst_penalty": 0.0}


def policy_config(base: Config, name: str, backfill_depth: int | None = None) -> Config:
    if name not in POLICIES:
        raise UsageError(f"--policy: expected one of {', '.join(POLICIES)}, got {name!r}")
    if backfill_depth is not None and backfill_depth < 0:
        raise UsageError(f"--backfill-depth: expected a whole number ≥ 0, got {backfill_depth}")
    weights = dict(base.priority)
    if name == "config":
        cfg = base
    elif name in ("fifo", "backfill"):
        weights.update(_FIFO_WEIGHTS)
        cfg = replace(base, priority=weights, backfill_depth=1 if name == "backfill" else 0, preemption=False)
    elif name in ("learned", "sjf-oracle"):
        weights.update(_FIFO_WEIGHTS, short_job_weight=weights["age_weight"])
        cfg = replace(base, priority=weights, backfill_depth=1, preemption=False,
                      estimate={**base.estimate, "backfill": True})
    elif name == "priority":
        weights["fairshare_weight"] = 0.0
        cfg = replace(base, priority=weights, backfill_depth=0)
    else:
        weights["fairshare_weight"] = weights.get("fairshare_weight") or Config().priority["fairshare_weight"]
        cfg = replace(base, priority=weights, backfill_depth=0)
    if backfill_depth is not None:
        cfg = replace(cfg, backfill_depth=backfill_depth)
    return cfg


def is_oracle(name: str) -> bool:
    """Whether the policy replays with the trace's true run times (sim/runtime.py Oracle)."""
    return name == "sjf-oracle"


def describe(cfg: Config, name: str = "") -> str:
    w = cfg.priority
    short = f", short jobs {w['short_job_weight']:g} (scale {w['short_job_scale']:g}s)" if w["short_job_weight"] else ""
    runs = ("true run times (oracle)" if is_oracle(name) else "learned run times") if cfg.estimate["backfill"] else ""
    label = f" — {LABELS[name]}" if name in LABELS else ""
    return (f"weights qos {w['qos_weight']:g}, age {w['age_weight']:g}, fairshare {w['fairshare_weight']:g}, "
            f"burst {w['burst_penalty']:g}{short}; backfill_depth {cfg.backfill_depth}"
            f"{' over ' + runs if runs else ''}; preemption {'on' if cfg.preemption else 'off'}{label}")
