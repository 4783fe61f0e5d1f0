"""Policy variants for the simulator: each one is a Config, derived from the configured one with
`dataclasses.replace`. The scheduling code is the same for all of them — `policy.plan()`.

- fifo:      no QoS, fair-share or burst weight (order by age), backfill_depth 0, no preemption
- priority:  the configured weights without fair share, backfill_depth 0
- backfill:  fifo's weights with backfill_depth 1 (or --backfill-depth N), no preemption
- fairshare: priority's with fairshare_weight > 0 (the configured one, else the built-in 50)
- config:    the configuration exactly as the daemon would run it
"""
from dataclasses import replace

from ..config import Config
from ..errors import UsageError

POLICIES = ("fifo", "priority", "backfill", "fairshare", "config")
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
    elif name == "priority":
        weights["fairshare_weight"] = 0.0
        cfg = replace(base, priority=weights, backfill_depth=0)
    else:
        weights["fairshare_weight"] = weights.get("fairshare_weight") or Config().priority["fairshare_weight"]
        cfg = replace(base, priority=weights, backfill_depth=0)
    if backfill_depth is not None:
        cfg = replace(cfg, backfill_depth=backfill_depth)
    return cfg


def describe(cfg: Config) -> str:
    w = cfg.priority
    return (f"weights qos {w['qos_weight']:g}, age {w['age_weight']:g}, fairshare {w['fairshare_weight']:g}, "
            f"burst {w['burst_penalty']:g}; backfill_depth {cfg.backfill_depth}; "
            f"preemption {'on' if cfg.preemption else 'off'}")
