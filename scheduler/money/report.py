"""Cost reports — pure aggregation over job records (`labq report`).

The unit is the attempt: it has a node, GPUs of one model, a span (from admission to its
end), a cost and an outcome. A job belongs to every group one of its attempts falls in. Per group:

- jobs, attempts, GPU-hours and CPU-hours (allocation × span), cost (the attempts' settled costs);
- success rate: completed jobs / ended jobs; cost per successful job: cost / completed jobs;
- failed cost: attempts that ended `exit`, `oom`, `error`, `timeout` or `node_failure`;
- preemption loss: for preempted attempts, cost × lost_work_s / span (the work since the last
  checkpoint, at the attempt's rate);
- idle GPU-hours and mean GPU utilisation where the attempt's `usage` reports them:
  `gpu_idle_s` (GPU-seconds below the idle threshold) and `gpu_util_mean` (percent).

Also: forecast accuracy (--est against the actual run time, per user) and reconciliation of
imported bills against labq's own costs.
"""
from __future__ import annotations

import math
from collections import namedtuple

from ..jobs import codes  # not states: its StrEnum imports `enum` (codes.py)
from ..units import MICRO
from .pricing import forecast

TYPE_CHECKING = False
if TYPE_CHECKING:     # annotations only: `labq report` imports this module without typing (see Row)
    from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
    from typing import Any, Protocol

    from ..settings.config import Config

    class Tried(Protocol):
        """What a report reads of an attempt: model.Attempt, an archived row's, a gang's node part."""
        @property
        def attempt(self) -> int: ...
        @property
        def node(self) -> str: ...
        @property
        def gpus(self) -> Sequence[str]: ...
        @property
        def dispatch_time(self) -> float | None: ...
        @property
        def start_time(self) -> float | None: ...
        @property
        def end_time(self) -> float | None: ...
        @property
        def outcome(self) -> str | None: ...
        @property
        def exit_code(self) -> int | None: ...
        @property
        def cost(self) -> int: ...
        @property
        def lost_work_s(self) -> float: ...
        @property
        def usage(self) -> Mapping[str, Any] | None: ...

    class Billed(Protocol):
        """What a report reads of a job: model.Job, or an archived acct row's record of one."""
        @property
        def id(self) -> int: ...
        @property
        def user(self) -> str: ...
        @property
        def account(self) -> str: ...
        @property
        def state(self) -> str: ...
        @property
        def gpus(self) -> int: ...
        @property
        def cpus(self) -> int: ...
        @property
        def gpu_type(self) -> str: ...
        @property
        def est(self) -> float | None: ...
        @property
        def end_time(self) -> float | None: ...
        @property
        def tags(self) -> Sequence[tuple[str, str]]: ...
        @property
        def attempts(self) -> Sequence[Tried]: ...

    class Raised(Protocol):
        """What the spend plot reads of an override: ledger.Override's fields."""
        @property
        def budget(self) -> str: ...
        @property
        def amount(self) -> int: ...
        @property
        def created(self) -> float: ...
        @property
        def expires(self) -> float: ...
        @property
        def ended(self) -> float | None: ...

FAILED = frozenset({"exit", "oom", "error", "timeout", "node_failure"})
KEYS = ("account", "user", "qos", "gpu_type", "node", "status", "project", "name")


def parse_by(text: str) -> tuple[str, ...]:
    """`account,user,tag:model` -> the group keys; ValueError naming a bad one."""
    keys = tuple(k.strip() for k in (text or "account").split(",") if k.strip())
    for k in keys:
        if k not in KEYS and not (k.startswith("tag:") and len(k) > 4):
            raise ValueError(f"--by: unknown key {k!r} (expected {', '.join(KEYS)} or tag:KEY)")
    return keys or ("account",)


def span(a: Tried) -> float:
    start = a.dispatch_time or a.start_time
    return max(0.0, (a.end_time or start or 0) - (start or 0))


def attempts_in(jobs: Iterable[Billed], since: float = 0,
                until: float = float("inf")) -> Iterator[tuple[Billed, Tried]]:
    """(job, attempt) for every ended attempt whose end falls in [since, until)."""
    for j in jobs:
        for a in j.attempts:
            if a.end_time is not None and since <= a.end_time < until:
                yield j, a


def _value(key: str, j: Billed, a: Tried, models: Mapping[str, str]) -> str:
    if key.startswith("tag:"):
        return dict(j.tags).get(key[4:], "-")
    if key == "status":
        return j.state
    if key == "node":
        return a.node or "-"
    if key == "gpu_type":
        if not a.gpus:
            return "none"
        return models.get(a.gpus[0]) or j.gpu_type or "?"
    got: str = getattr(j, key) or "-"
    return got


class Row:
    """One group's sums. (A plain class, not a dataclass: `labq report` then imports neither
    dataclasses nor typing, ~10 ms of its CPU, issue 39 item 4.) Times are summed as integer
    microseconds, so any grouping of the sums (money/totals.py's cells) gives the same total."""

    def __init__(self, group: tuple[str, ...]) -> None:
        self.group = group
        self.job_ids: set[int] = set()
        self.completed: set[int] = set()
        self.ended: set[int] = set()
        self.kept = [0] * 13        # vector()'s sums of the kept cells added (absorb)
        self.attempts = 0
        self.gpu_us = 0
        self.cpu_us = 0
        self.cost = 0
        self.failed_cost = 0
        self.preempt_lost_cost = 0
        self.lost_work_us = 0
        self.idle_gpu_us = 0
        self.util_weight = 0        # GPU-microseconds of the attempts that reported a mean utilisation
        self.util_sum = 0           # of utilisation (millionths of a percent) x those GPU-microseconds

    def add(self, j: Billed, a: Tried) -> None:
        s = span(a)
        us = round(s * 1_000_000)
        nodes: int = getattr(j, "nodes", 1) or 1     # an archived row from before schema 3 has none: 1
        gpus = len(a.gpus) or j.gpus * nodes    # a gang's attempt lists every node's GPUs
        self.job_ids.add(j.id)
        if j.state in codes.TERMINAL:
            self.ended.add(j.id)
            if j.state == codes.COMPLETED:
                self.completed.add(j.id)
        self.attempts += 1
        self.gpu_us += gpus * us
        self.cpu_us += j.cpus * nodes * us
        self.cost += a.cost
        if a.outcome in FAILED:
            self.failed_cost += a.cost
        if a.outcome == "preempted" and s > 0:
            self.preempt_lost_cost += round(a.cost * min(a.lost_work_s, s) / s)
            self.lost_work_us += round(a.lost_work_s * 1_000_000)
        u = a.usage or {}
        if isinstance(u.get("gpu_idle_s"), (int, float)):
            self.idle_gpu_us += round(u["gpu_idle_s"] * 1_000_000)
        if isinstance(u.get("gpu_util_mean"), (int, float)) and gpus and us > 0:
            self.util_weight += gpus * us
            self.util_sum += round(u["gpu_util_mean"] * 1_000_000) * gpus * us

    def vector(self) -> list[int]:
        """Every sum as integers: jobs, completed, ended, then the attempts' sums."""
        k = self.kept
        return [len(self.job_ids) + k[0], len(self.completed) + k[1], len(self.ended) + k[2],
                self.attempts + k[3], self.gpu_us + k[4], self.cpu_us + k[5], self.cost + k[6],
                self.failed_cost + k[7], self.preempt_lost_cost + k[8], self.lost_work_us + k[9],
                self.idle_gpu_us + k[10], self.util_weight + k[11], self.util_sum + k[12]]

    def absorb(self, vec: Sequence[int]) -> None:
        """A kept cell's vector (of jobs not among those add() saw) into these sums."""
        self.kept = [a + b for a, b in zip(self.kept, vec)]

    def as_dict(self, keys: Sequence[str]) -> dict[str, Any]:
        jobs, done, ended, attempts, gpu, cpu, cost, failed, lost, lost_us, idle, uw, us = self.vector()
        h = 3_600_000_000
        return {**dict(zip(keys, self.group)), "jobs": jobs, "attempts": attempts,
                "gpu_hours": round(gpu / h, 4), "cpu_hours": round(cpu / h, 4), "cost": cost / MICRO,
                "success_rate": round(done / ended, 4) if ended else None,
                "cost_per_success": round(cost / done / MICRO, 6) if done else None,
                "failed_cost": failed / MICRO, "preempt_lost_cost": lost / MICRO,
                "lost_work_hours": round(lost_us / h, 4), "idle_gpu_hours": round(idle / h, 4) if idle else None,
                "gpu_util_mean": round(us / (uw * 1_000_000), 2) if uw else None}


# One node's part of a gang's attempt, as `report --by node` credits it.
PartAttempt = namedtuple("PartAttempt", "attempt node gpus dispatch_time start_time end_time outcome exit_code cost "
                                        "lost_work_s usage")


class PartJob:
    """A gang's job as one of its node parts: one node (its CPUs and GPUs), the rest the job's."""
    nodes = 1

    def __init__(self, job: Billed) -> None:
        self._job = job

    def __getattr__(self, name: str) -> Any:
        return getattr(self._job, name)


def node_parts(j: Billed, a: Tried) -> Iterator[tuple[Billed, Tried]]:
    """(job, attempt) per node of a gang's attempt — each part its node, its GPUs, an equal share of
    the cost and of the idle GPU time — or the attempt itself where it ran on one node (or where its
    parts were not kept: an acct row archived before they were)."""
    parts: Sequence[tuple[str, Sequence[str]]] = getattr(a, "parts", ()) or ()
    if len(parts) < 2:
        yield j, a
        return
    n, usage = len(parts), a.usage or {}
    idle = usage.get("gpu_idle_s")
    share = {**usage, "gpu_idle_s": idle / n} if isinstance(idle, (int, float)) else usage
    job = PartJob(j)
    for i, (node, gpus) in enumerate(parts):
        cost = a.cost // n + (1 if i < a.cost % n else 0)
        yield job, PartAttempt(a.attempt, node, tuple(gpus), a.dispatch_time, a.start_time, a.end_time, a.outcome,
                               a.exit_code, cost, a.lost_work_s, share)


def by(jobs: Iterable[Billed], keys: Sequence[str], models: Mapping[str, str] | None = None, since: float = 0,
       until: float = float("inf"), cells: Iterable[tuple[Sequence[str], Sequence[int]]] = ()) -> list[dict[str, Any]]:
    """One row per group of `keys`, sorted by cost (highest first), then by group; `cells`: kept sums
    of other jobs (money/totals.py), (their DIMS' values, Row.vector), where `keys` are all CELL_KEYS."""
    models = models or {}
    rows: dict[tuple[str, ...], Row] = {}
    dims = ("account", "user", "qos", "project", "status")     # totals.DIMS, status as the job's state
    for values, vec in cells:
        g = tuple(values[dims.index(k)] if k == "status" else values[dims.index(k)] or "-" for k in keys)
        rows.setdefault(g, Row(g)).absorb(vec)
    for j0, a0 in attempts_in(jobs, since, until):
        for j, a in (node_parts(j0, a0) if "node" in keys else ((j0, a0),)):
            g = tuple(_value(k, j, a, models) for k in keys)
            rows.setdefault(g, Row(g)).add(j, a)
    out = [r.as_dict(keys) for r in rows.values()]
    return sorted(out, key=lambda d: (-d["cost"], tuple(str(d[k]) for k in keys)))


def total(rows: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> dict[str, object]:
    """The sum row (rates recomputed from the sums, not averaged)."""
    t: dict[str, object] = {k: "TOTAL" if i == 0 else "" for i, k in enumerate(keys)}
    for k in ("jobs", "attempts", "gpu_hours", "cpu_hours", "cost", "failed_cost", "preempt_lost_cost",
              "lost_work_hours"):
        t[k] = round(sum(r[k] for r in rows), 6)
    idle = [r["idle_gpu_hours"] for r in rows if r["idle_gpu_hours"] is not None]
    t["idle_gpu_hours"] = round(sum(idle), 4) if idle else None
    t["success_rate"] = t["cost_per_success"] = t["gpu_util_mean"] = None
    return t


def node_idle(jobs: Sequence[Billed], prices: Mapping[str, float], since: float, until: float) -> list[dict[str, Any]]:
    """Rented nodes (rates.node_hour): what the instance cost over the window, what its jobs paid
    for their dominant shares, and the rest — the idle cost nobody was charged. The window is
    [since, until), or from a node's first attempt when `since` is 0."""
    out = []
    for name in sorted(prices):
        spans = [(t, a) for j in jobs for a in j.attempts if a.node == name and (t := _began(a)) is not None]
        if not spans:
            continue
        lo = since or min(start for start, _ in spans)
        paid = 0.0
        for start, a in spans:
            end = a.end_time if a.end_time is not None else until
            overlap = max(0.0, min(end, until) - max(start, lo))
            if overlap and end > start:
                paid += a.cost * overlap / (end - start)
        hours = max(0.0, until - lo) / 3600
        instance = prices[name] * hours
        out.append({"node": name, "hours": round(hours, 3), "instance_cost": round(instance, 4),
                    "paid": round(paid / MICRO, 4), "idle_cost": round(max(0.0, instance - paid / MICRO), 4),
                    "utilisation": round(paid / MICRO / instance, 4) if instance else None})
    return out


def _began(a: Tried) -> float | None:
    return a.dispatch_time if a.dispatch_time is not None else a.start_time


def committed_cost(j: Any, gpu_model: str, cfg: Config) -> int:
    """What admitting one attempt of `j` commits, in the currency (the forecast of DESIGN §5)."""
    return forecast(j, "usd", gpu_model, cfg)


def committed_by_job(jobs: Iterable[Billed], models: Mapping[str, str], cfg: Config) -> dict[int, int]:
    """job id -> what admission encumbered for all its attempts (`acct`'s COMMITTED); `models`:
    GPU uuid -> model, as the nodes report them."""
    return {j.id: sum(committed_cost(j, models.get(a.gpus[0], j.gpu_type) if a.gpus else "", cfg)
                      for a in j.attempts) for j in jobs}


# -- forecast accuracy -----------------------------------------------------------------------
def percentile(values: Iterable[float], p: float) -> float:
    """Nearest-rank percentile of a non-empty list."""
    v = sorted(values)
    return v[max(0, math.ceil(p * len(v)) - 1)]


def forecast_accuracy(jobs: Iterable[Billed], since: float = 0, until: float = float("inf")) -> list[dict[str, Any]]:
    """Per user (and `*` for all): completed jobs that gave --est, actual run time / est at p50 and
    p90, and the forecast_margin that would have covered 90 % of those runs."""
    ratios: dict[str, list[float]] = {}
    for j in jobs:
        if j.state != codes.COMPLETED or not j.est or j.end_time is None or not since <= j.end_time < until:
            continue
        ran = sum(max(0.0, (a.end_time or 0) - (a.start_time or a.dispatch_time or 0)) for a in j.attempts
                  if a.end_time)
        for who in (j.user, "*"):
            ratios.setdefault(who, []).append(ran / j.est)
    out = []
    for who in sorted(ratios, key=lambda u: (u == "*", u)):
        r = ratios[who]
        p90 = percentile(r, 0.9)
        out.append({"user": who, "jobs": len(r), "p50": round(percentile(r, 0.5), 4), "p90": round(p90, 4),
                    "margin_90": round(max(0.0, p90 - 1), 4)})
    return out


# -- reconciliation ----------------------------------------------------------------------------
def reconcile(imported: Iterable[tuple[str, str, int]], jobs: Iterable[Billed],
              day_of: Callable[[float], str]) -> list[dict[str, Any]]:
    """Imported bill rows against labq's own costs, per (date, scope).

    `imported`: (date, scope, micro) rows; the date is `YYYY-MM-DD` or `YYYY-MM` (then the whole
    comparison is by month), the scope an account or `tag:K=V`. `day_of(epoch) -> "YYYY-MM-DD"`
    buckets an attempt's end (the caller owns the time zone). labq's side counts the attempts of
    those scopes that ended within the imported dates, so a day labq billed and the bill has not
    shows up too."""
    imported = list(imported)
    if not imported:
        return []
    monthly = all(len(d) == 7 for d, _, _ in imported)

    def cut(d: str) -> str:
        return d[:7] if monthly else d

    want: dict[tuple[str, str], int] = {}
    for date, scope, amount in imported:
        want[(cut(date), scope)] = want.get((cut(date), scope), 0) + amount
    scopes = {s for _, s in want}
    first, last = min(d for d, _ in want), max(d for d, _ in want)
    have: dict[tuple[str, str], int] = {}
    for j, a in attempts_in(jobs):
        assert a.end_time is not None      # attempts_in yields ended attempts only
        d = cut(day_of(a.end_time))
        if not first <= d <= last:
            continue
        for scope in ({j.account} | {f"tag:{k}={v}" for k, v in j.tags}) & scopes:
            have[(d, scope)] = have.get((d, scope), 0) + a.cost
    out = []
    for k in sorted(set(want) | set(have)):
        w, h = want.get(k, 0), have.get(k, 0)
        out.append({"date": k[0], "scope": k[1], "imported": w / MICRO, "labq": h / MICRO, "diff": (w - h) / MICRO,
                    "diff_pct": round(100 * (w - h) / h, 2) if h else None})
    return out


# -- spending over time (labq report --plot) ----------------------------------------------------
def spend_series(entries: Iterable[Mapping[str, Any]], budget: str, period: str) -> list[tuple[float, int]]:
    """(time, cumulative micro-units) of `budget`'s charges settled in `period`, oldest first."""
    out: list[tuple[float, int]] = []
    total = 0
    for e in sorted((e for e in entries if e.get("type") == "charge" and e.get("budget") == budget
                     and e.get("period", "") == period), key=lambda e: float(e.get("ts") or 0)):
        total += int(e["amount"])
        out.append((float(e.get("ts") or 0), total))
    return out


def limit_steps(limit: int, overrides: Iterable[Raised], budget: str, start: float, end: float) -> list[tuple[float, int]]:
    """(time, limit + the overrides active then) at each change within [start, end]."""
    edges = {start, end}
    mine = [o for o in overrides if o.budget == budget]
    for o in mine:
        edges |= {t for t in (o.created, o.ended or o.expires) if start <= t <= end}
    return [(t, limit + sum(o.amount for o in mine if o.created <= t < (o.ended or o.expires))) for t in sorted(edges)]
