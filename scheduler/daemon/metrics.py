"""Prometheus metrics of the scheduler (`scheduler.metrics = "host:port"`).

What a lab's monitoring scrapes: the queue (pending by reason and account, running), the GPUs
(total and allocated per node and model), the budgets (limit, spent, committed, available per
budget and period, in the budget's unit: a `unit` label, since one budget counts money and the next
GPU hours), alerts fired, requests handled, dead letters, and the
tick's and plan()'s durations.

The gauges are computed on the scheduler's own thread after a tick, at most every `REFRESH` seconds
(a pass over the active jobs), and handed to the HTTP thread as one finished list: a scrape never
reads the scheduler's state while a tick changes it. `prometheus_client` is imported only here, and
only when metrics are turned on.
"""
import logging
import time
from collections import Counter

from ..jobs import states
from ..money import balance, periods
from ..units import MICRO, unit_name

log = logging.getLogger("labq.metrics")
REFRESH = 2.0       # seconds between two computations of the gauges
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def gauges(jobs, nodes, budgets, spent: dict, now: float, leading: bool, dead: int | None, rests=None, *,
           currency: str) -> list:
    """[(name, help, [(labels dict, value)])] — pure: from the scheduler's view of one instant.
    `rests`: held arrays kept as one record each (jobs/rest.py), pending as many times as they hold tasks."""
    pending: Counter = Counter()
    running: Counter = Counter()
    allocated: Counter = Counter()
    for r in (rests or {}).values():
        pending[(r.template.reason or "None", r.template.account)] += r.left
    for j in jobs:
        if j.state == states.PENDING:
            pending[(j.reason or "None", j.account)] += 1
        elif j.state in states.ON_NODE:
            running[(j.account, j.node or "")] += 1
            for u in j.gpu_uuids:
                allocated[(j.node, u)] += 1
    gpus_total: Counter = Counter()
    gpus_alloc: Counter = Counter()
    node_rows = []
    for n in nodes:
        node_rows.append(({"node": n.name, "state": n.state}, 1))
        for g in n.gpus:
            gpus_total[(n.name, g.model)] += 1
            gpus_alloc[(n.name, g.model)] += 1 if allocated[(n.name, g.uuid)] else 0
    live = [j for j in jobs if j.commit]
    budget_rows: dict[str, list] = {"limit": [], "spent": [], "committed": [], "available": []}
    for b in budgets:
        label = periods.current(b, now)
        bal = balance.balance(b, spent.get(b.name, 0), live, now, label, periods.span_at(b, now, label))
        lab = {"budget": b.name, "unit": unit_name(b.unit, currency), "period": label or "none"}
        for k, v in (("limit", bal.limit + bal.overrides), ("spent", bal.spent + bal.accrued),
                     ("committed", bal.committed), ("available", bal.available)):
            budget_rows[k].append((lab, v / MICRO))
    out = [
        ("labq_jobs_pending", "Pending jobs by pending reason and account.",
         [({"reason": r, "account": a}, v) for (r, a), v in sorted(pending.items())]),
        ("labq_jobs_running", "Running (and draining) jobs by account and node.",
         [({"account": a, "node": n}, v) for (a, n), v in sorted(running.items())]),
        # A gauge: no `_total` (a counter's suffix in Prometheus' naming; `promtool check metrics`).
        ("labq_gpus", "GPUs a node registered, by node and model.",
         [({"node": n, "model": m}, v) for (n, m), v in sorted(gpus_total.items())]),
        ("labq_gpus_allocated", "GPUs held by running jobs, by node and model.",
         [({"node": n, "model": m}, v) for (n, m), v in sorted(gpus_alloc.items())]),
        ("labq_node", "Each known node (1), labelled with its state (up, drain, unhealthy, down).", node_rows),
        ("labq_leader", "1 while this scheduler holds the leader lease.", [({}, 1 if leading else 0)]),
    ]
    for k, rows in budget_rows.items():
        out.append((f"labq_budget_{k}", f"Budget {k} in the budget's unit, in its current period.", rows))
    if dead is not None:
        out.append(("labq_dead_letters", "Entries in the dead-letter stream (labq admin dead).", [({}, dead)]))
    return out


class Metrics:
    """The registry and its HTTP endpoint; the daemon calls `after_tick` from its loop."""

    def __init__(self, address: str):
        import prometheus_client as pc
        from prometheus_client.core import GaugeMetricFamily

        self._family = GaugeMetricFamily
        # No `<counter>_created` series: a timestamp per counter that dashboards never want and that
        # doubles the counters a scrape carries (prometheus_client's switch is process-wide).
        pc.disable_created_metrics()
        self.registry = pc.CollectorRegistry()
        self.registry.register(self)
        self.tick_seconds = pc.Histogram("labq_tick_seconds", "Duration of one scheduler tick.",
                                         buckets=BUCKETS, registry=self.registry)
        self.plan_seconds = pc.Histogram("labq_plan_seconds", "Duration of one plan() pass.",
                                         buckets=BUCKETS, registry=self.registry)
        self.requests = pc.Counter("labq_requests", "Inbox requests handled.", registry=self.registry)
        # Never above 0 unless the policy has a bug: the plan was made from the state it is applied to.
        self.plan_rejected = pc.Counter("labq_plan_rejected", "Plan decisions the applier left out because the "
                                        "state no longer allowed them, by kind.", ["kind"], registry=self.registry)
        self.alerts = pc.Counter("labq_alerts", "Alerts fired, by kind and level.", ["kind", "level"],
                                 registry=self.registry)
        self._gauges: list = []
        self._next = 0.0
        host, _, port = address.rpartition(":")
        self.server, self.thread = pc.start_http_server(int(port), addr=host or "127.0.0.1", registry=self.registry)
        self.port = self.server.server_port
        log.info("metrics at http://%s:%d/metrics", host or "127.0.0.1", self.port)

    def collect(self):
        for name, doc, rows in self._gauges:
            keys = sorted({k for labels, _ in rows for k in labels})
            fam = self._family(name, doc, labels=keys)
            for labels, value in rows:
                fam.add_metric([labels.get(k, "") for k in keys], value)
            yield fam

    def alert(self, alert: dict) -> None:
        self.alerts.labels(str(alert.get("kind", "")), str(alert.get("level", ""))).inc()

    def after_tick(self, sched, seconds: float, wall=time.monotonic) -> None:
        self.tick_seconds.observe(seconds)
        if wall() < self._next:
            return
        self._next = wall() + REFRESH
        now = sched.now or time.time()
        try:
            spent = sched.books.spent_now(now, sched.store.spent()) if sched.leading else {}
            dead = sched.store.dead_letters() if hasattr(sched.store, "dead_letters") else None
        except Exception as e:      # noqa: BLE001 - a scrape must never stop the scheduler
            log.warning("metrics: %s", e)
            return
        self._gauges = gauges(list(sched.jobs.values()), sched.nodes, sched.cfg.budgets, spent, now,
                              sched.leading, dead, getattr(sched, "rests", None), currency=sched.cfg.rates.currency)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
