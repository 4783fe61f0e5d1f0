"""Rates, forecasts, accrual and budget balances — pure arithmetic in integer micro-units.

A job's rate is what its allocation costs per hour, in each budget's unit. Allocation is billed:
what is reserved, for as long as it is reserved. The scheduler commits `forecast()` when it admits
an attempt; the commitment shrinks as the attempt accrues and is replaced by the charge when it ends.
"""
from dataclasses import dataclass

from .config import Config
from .model import Budget, Job
from .units import MICRO

MS_PER_HOUR = 3_600_000


def rate(job: Job, unit: str, gpu_model: str, cfg: Config) -> int:
    """Micro-units of `unit` per hour of this job's allocation on a node with `gpu_model` GPUs."""
    if unit == "gpu_hours":
        return job.gpus * MICRO
    if unit == "cpu_hours":
        return job.cpus * MICRO
    r = cfg.rates
    per_hour = job.gpus * r.gpu_rate(gpu_model) + job.cpus * r.cpu_hour + job.mem / (1 << 30) * r.mem_gib_hour
    qos = cfg.qos_named(job.qos)
    return round(per_hour * (qos.rate_factor if qos else 1.0) * MICRO)


def overhead(unit: str, cfg: Config) -> int:
    return round(cfg.rates.overhead_per_attempt * MICRO) if unit == "usd" else 0


def planned_seconds(job: Job, cfg: Config) -> float:
    """`safe`: the time limit (an admitted job can always finish); `forecast`: est × (1 + margin)."""
    if cfg.budget_mode == "forecast" and job.est:
        return min(job.time_limit, job.est * (1 + cfg.rates.forecast_margin))
    return job.time_limit


def accrue(rate_per_hour: int, seconds: float) -> int:
    """What `seconds` of an allocation costs at `rate_per_hour`, rounded down to whole micro-units."""
    return rate_per_hour * max(0, int(seconds * 1000)) // MS_PER_HOUR


def forecast(job: Job, unit: str, gpu_model: str, cfg: Config) -> int:
    return accrue(rate(job, unit, gpu_model, cfg), planned_seconds(job, cfg)) + overhead(unit, cfg)


def charge(rate_per_hour: int, start: float, end: float, unit: str, cfg: Config) -> int:
    """The settled charge of one attempt: allocation × wall time × rate, plus the per-attempt overhead."""
    return accrue(rate_per_hour, end - start) + overhead(unit, cfg)


def budgets_for(job: Job, budgets) -> tuple[Budget, ...]:
    return tuple(b for b in budgets if b.applies_to(job))


def cap(b: Budget) -> int:
    """The part of the limit that admission may commit: limit × (1 − reserve)."""
    return int(b.limit * (1 - b.reserve))


def outstanding(job: Job, budget: str, now: float) -> int:
    """A running job's commitment to `budget` minus what it has accrued so far (never below 0)."""
    committed = dict(job.commit).get(budget, 0)
    return max(0, committed - accrued(job, budget, now)) if committed else 0


def accrued(job: Job, budget: str, now: float) -> int:
    """What the running attempt has cost `budget` since it was admitted."""
    started = job.current.dispatch_time if job.current and job.current.dispatch_time else now
    return accrue(dict(job.rates).get(budget, 0), now - started)


@dataclass(frozen=True)
class Balance:
    name: str
    unit: str
    limit: int
    spent: int
    committed: int
    accrued: int

    @property
    def available(self) -> int:
        return self.limit - self.spent - self.committed - self.accrued


def balance(b: Budget, spent: int, running, now: float) -> Balance:
    """The budget as `labq budget` shows it. `committed` is what running jobs may still spend."""
    mine = [j for j in running if b.name in dict(j.commit)]
    return Balance(b.name, b.unit, b.limit, spent,
                   committed=sum(outstanding(j, b.name, now) for j in mine),
                   accrued=sum(min(accrued(j, b.name, now), dict(j.commit)[b.name]) for j in mine))
