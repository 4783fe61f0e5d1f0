"""Fair-share usage: what each account has used recently, decayed with a half-life. Pure.

Usage is counted in GPU-equivalent seconds (a GPU-second, or CPUS_PER_GPU CPU-seconds) so that
CPU-only work counts too. It is kept apart from budgets: budgets never decay, usage does.
The factor is SLURM's classic one, 2^(-usage_share / share): 1 for an account that used nothing,
0.5 for one that used exactly its share, towards 0 for one far over it.
"""
from __future__ import annotations

from ..cjson import loads  # json.loads without `json`, `re`, `enum` (cjson.py)

TYPE_CHECKING = False    # typing.TYPE_CHECKING without importing typing (mypy reads the name alike)
if TYPE_CHECKING:       # the model costs `labq share` ~14 ms: it passes store/jobview.JobView records
    from collections.abc import Iterable, Mapping
    from typing import Any

    from ..jobs.model import Job

Usage = dict[str, tuple[float, float]]   # account -> (decayed value, as of epoch)

CPUS_PER_GPU = 16


def weight(job: Job) -> float:
    """GPU-equivalents the job holds."""
    return (job.gpus + job.cpus / CPUS_PER_GPU) * job.nodes


def decayed(value: float, since: float, now: float, half_life: float) -> float:
    if half_life <= 0 or now <= since:
        return value
    halved: float = 0.5 ** ((now - since) / half_life)     # float ** float is typed Any
    return value * halved


def add(usage: Usage, account: str, amount: float, now: float, half_life: float) -> Usage:
    """A new {account: (value, as_of)} with `amount` added to `account` at `now`."""
    value, since = usage.get(account, (0.0, now))
    return {**usage, account: (decayed(value, since, now, half_life) + amount, now)}


def current(usage: Usage, running: Iterable[Job], now: float, half_life: float) -> dict[str, float]:
    """Each account's decayed usage at `now`, counting what running jobs have used so far."""
    out = {a: decayed(v, since, now, half_life) for a, (v, since) in usage.items()}
    for j in running:
        began = j.current.dispatch_time if j.current else None
        if began is not None and now > began:
            out[j.account] = out.get(j.account, 0.0) + weight(j) * (now - began)
    return out


def factors(usage: dict[str, float], shares: dict[str, float]) -> dict[str, float]:
    """account -> fair-share factor in (0, 1]; accounts absent from `shares` have share 1."""
    total_use = sum(usage.values())
    names = set(usage) | set(shares)
    total_share = sum(shares.get(a, 1.0) for a in names) or 1.0
    out = {}
    for a in names:
        share = shares.get(a, 1.0) / total_share
        used = usage.get(a, 0.0) / total_use if total_use > 0 else 0.0
        out[a] = 2.0 ** (-used / share) if share > 0 else 0.0
    return out


def usage_from(raw: Mapping[Any, Any]) -> Usage:
    """The fair-share usage hash as Redis holds it (store/reads.py, thinreads.py), account -> (decayed
    value, as of epoch); bad entries are skipped."""
    out = {}
    for acct, text in raw.items():
        try:
            value, since = loads(text)
            out[acct] = (float(value), float(since))
        except (ValueError, TypeError):
            continue
    return out
