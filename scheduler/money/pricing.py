"""Prices: an attempt's rate, its planned (forecast) cost and the seconds it is billed for — pure
arithmetic in integer micro-units, ledger.py's (which names them too), apart so that the thin client
prices `labq acct`'s COMMITTED without the job model, the config or the ledger (issue 39 item 4).

`cfg` is config.Config, or anything with the same names for what is read here (Prices: the client
settings cache's copy of them, clientconf.books_of); `job` a model.Job or anything with its fields.
"""
from __future__ import annotations

from ..units import MICRO, MS_PER_HOUR, accrue

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ..jobs.model import Job, Node
    from ..settings.config import Config


def rate(job: Job, unit: str, gpu_model: str, cfg: Config, node: Node | None = None) -> int:
    """Micro-units of `unit` per hour of this job's allocation on a node with `gpu_model` GPUs.

    On a node with a whole-instance price (rates.node_hour), the job pays that price times its
    dominant share of the node (the largest of its GPU, CPU and memory fractions), so a node that
    is fully allocated is paid exactly once, whatever shapes share it. A gang (-N) pays for every
    node: its per-node shape times its nodes (priced as `node`, the first of them)."""
    if unit == "gpu_hours":
        return job.gpus * job.nodes * MICRO
    if unit == "cpu_hours":
        return job.cpus * job.nodes * MICRO
    r = cfg.rates
    price = r.node_price(node.name) if node is not None else 0.0
    if price and node is not None:
        return _money(price * dominant_share(job, node), job, cfg)
    # The same few requests are quoted at every pass: their rate is kept on the config (bounded).
    key = (job.gpus, job.cpus, job.mem, job.nodes, job.qos, gpu_model)
    memo = cfg.rate_memo
    got = memo.get(key)
    if got is None:
        if len(memo) >= 4096:
            memo.clear()
        per_hour = job.gpus * r.gpu_rate(gpu_model) + job.cpus * r.cpu_hour + job.mem / (1 << 30) * r.mem_gib_hour
        got = memo[key] = _money(per_hour, job, cfg)
    return got


def _money(per_hour: float, job: Job, cfg: Config) -> int:
    qos = cfg.qos_named(job.qos)
    return round(per_hour * job.nodes * (qos.rate_factor if qos else 1.0) * MICRO)


def dominant_share(job: Job, node: Node) -> float:
    shares = [job.cpus / node.cpus if node.cpus else 0.0, job.mem / node.mem if node.mem else 0.0]
    if node.gpus:
        shares.append(job.gpus / len(node.gpus))
    return min(max(shares), 1.0)


def overhead(unit: str, cfg: Config) -> int:
    return round(cfg.rates.overhead_per_attempt * MICRO) if unit == "usd" else 0


def planned_seconds(job: Job, cfg: Config) -> float:
    """`safe`: the time limit plus kill_wait, everything an attempt can be billed for (a job that
    ignores SIGTERM at its limit is killed kill_wait later); `forecast`: est × (1 + margin), where est
    is --est, else (with estimate.forecast = true) the run time learned from the user's ended jobs."""
    if cfg.budget_mode == "forecast":
        est = job.est or (job.learned_est if cfg.estimate.forecast else None)
        if est:
            return min(job.time_limit, est * (1 + cfg.rates.forecast_margin))
    return job.time_limit + cfg.kill_wait


def billed(seconds: float, cfg: Config) -> float:
    """The seconds an attempt of this length is billed for (rates.billing)."""
    if cfg.rates.billing == "started_hour" and seconds > 0:
        return -(-int(seconds * 1000) // MS_PER_HOUR) * 3600.0
    return seconds


def forecast(job: Job, unit: str, gpu_model: str, cfg: Config, node: Node | None = None,
             per_hour: int | None = None) -> int:
    """What an attempt commits: its rate (`per_hour` when the caller has it) over its planned, billed seconds."""
    if per_hour is None:
        per_hour = rate(job, unit, gpu_model, cfg, node)
    return accrue(per_hour, billed(planned_seconds(job, cfg), cfg)) + overhead(unit, cfg)


class _Rates:
    """config.Rates's prices and what is asked of them, from Prices' table."""

    def __init__(self, t: dict[str, Any]) -> None:
        self.gpu_hour, self.cpu_hour, self.mem_gib_hour = t["gpu_hour"], t["cpu_hour"], t["mem_gib_hour"]
        self.overhead_per_attempt, self.forecast_margin, self.billing = (t["overhead_per_attempt"],
                                                                         t["forecast_margin"], t["billing"])
        self._by_model, self._node_hour = t["gpu_hour_by_model"], t["node_hour"]

    def node_price(self, node: str) -> float:
        return self._node_hour.get(node, 0.0)       # type: ignore[no-any-return]

    def gpu_rate(self, model: str) -> float:
        return self._by_model.get(model, self.gpu_hour)   # type: ignore[no-any-return]


class _Factor:
    def __init__(self, rate_factor: float) -> None:
        self.rate_factor = rate_factor


class _Estimate:
    def __init__(self, forecast: bool) -> None:
        self.forecast = forecast


class Prices:
    """What this module reads of a config.Config, from the table clientconf.books_of keeps of it in the
    client settings cache (books["pricing"]): `labq acct` prices COMMITTED with the config's own
    figures without loading the config (tomllib and its ~20 ms). forecast(job, unit, model, Prices(t))
    is forecast(job, unit, model, cfg) for the config `t` was made of (tests/unit/test_pricing.py)."""

    def __init__(self, t: dict[str, Any]) -> None:
        self.rates = _Rates(t)
        self.kill_wait, self.budget_mode = t["kill_wait"], t["budget_mode"]
        self.estimate = _Estimate(t["estimate_forecast"])
        self._qos = {name: _Factor(f) for name, f in t["qos_rate_factor"].items()}
        self.rate_memo: dict[tuple[int, int, int, int, str, str], int] = {}

    def qos_named(self, name: str) -> _Factor | None:
        return self._qos.get(name)
