"""`labq prio`: each pending job's priority factors and their weights, sprio-style, without click: from
the fast path (fast.py) or click's (faircmd.py)."""
import time
from types import SimpleNamespace

from labq.scheduler import multifactor as priority  # policy/priority.py's, without the planner
from labq.scheduler.jobs import states

from . import statview
from .out import echo, echo_json

HEADERS = ("JOBID", "USER", "ACCOUNT", "QOS", "PRIORITY", "QOS", "AGE", "FAIRSHARE", "BURST")
SHORT = "SHORT"      # the short-job factor's part: a column only where priority.short_job_weight is set


class Weights(dict):
    """The config's [priority] table as the client settings cache keeps it (clientcache.books): its
    values by name and as attributes, as sections.Priority gives them."""
    __slots__ = ()

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class Books:
    """What multifactor.py reads of a config.Config (priority, qos, accounts, qos_named), from the
    client settings cache: neither TOML nor the config's ~20 ms once it holds them (issue 39 item 4)."""

    def __init__(self, books: dict):
        self.priority = Weights(books["priority"])
        self.qos = [SimpleNamespace(name=n, priority=p) for n, p in books["qos"].items()]
        self.accounts = [SimpleNamespace(name=n, share=s) for n, s in books["shares"].items()]
        self._qos = {q.name: q for q in self.qos}

    def qos_named(self, name: str):
        return self._qos.get(name)


def run(ctx, user, account, expand, as_json) -> None:
    """Pending jobs in the order the scheduler considers them, with each factor's weighted part.

    priority = qos_weight × QoS + age_weight × age (0..1 over age_max) + fairshare_weight × fair share
    (0..1, 2^(−usage share ÷ account share)) − burst_penalty × burst (0 or 1)
    + short_job_weight × short (0..1, fading with the wait; off by default)."""
    # The thin client, not redis-py (~150 ms to import, issue 39 item 4); the weights from the client
    # settings cache; the jobs as views (store/jobview.py), not the model (~14 ms more)
    cfg, c, now = Books(ctx.books), ctx.thin, time.time()
    jobs = c.read.active_views()
    usage = c.fairshare(now, jobs, cfg.priority.fairshare_half_life)
    pending = [j for j in jobs if j.state == states.PENDING]
    order = priority.ordered(pending, now, dict(usage), cfg)
    f = priority.factors(pending, now, dict(usage), cfg)
    shown = [j for j in order if (not user or j.user == user) and (not account or j.account == account)]
    w = cfg.priority
    if as_json:
        return echo_json({"weights": {k: w[k] for k in ("qos_weight", "age_weight", "fairshare_weight",
                                                         "burst_penalty", "short_job_weight")},
                          "usage": dict(sorted(usage.items())),
                          "jobs": [{"id": j.display_id, "job_id": j.id, "user": j.user, "account": j.account,
                                    "qos": j.qos, **f[j.id].as_json(w)} for j in shown]})
    echo(f"weights: qos {w['qos_weight']:g}, age {w['age_weight']:g} (age_max {w['age_max']:.0f}s), "
               f"fairshare {w['fairshare_weight']:g}, burst penalty {w['burst_penalty']:g}"
               + (f", short jobs {w['short_job_weight']:g} (scale {w['short_job_scale']:.0f}s)"
                  if w["short_job_weight"] else ""))
    echo(_table(shown, f, w, expand))


def _table(shown, f, w, expand: bool) -> str:
    """The rows of `shown` (`f`: their factors), one line a job but for an array's tasks with the same
    factors one after another, which share one `42_[5-9000]` line (-r: each its own). At 10,000
    pending jobs every line is formatted: the weights are read once, a single job's id is its line's
    (no run to compact), and the columns go to statview.columns as they are made."""
    qw, aw, fw, bp, sw = (w[k] for k in ("qos_weight", "age_weight", "fairshare_weight", "burst_penalty",
                                          "short_job_weight"))
    short = bool(sw)
    rows: list = []
    for j in shown:
        x = f[j.id]
        row = (j.user, j.account, j.qos, f"{x.priority:.2f}", f"{qw * x.qos:.2f}", f"{aw * x.age:.2f}",
               f"{fw * x.fairshare:.2f}", f"-{bp * x.burst:.2f}" if x.burst else "0",
               *((f"{sw * x.short:.2f}",) if short else ()))
        if j.array_id is None:
            rows.append((str(j.id), row))
        elif not expand and rows and rows[-1][1] == row and type(rows[-1][0]) is list \
                and rows[-1][0][-1].startswith(f"{j.array_id}_"):
            rows[-1][0].append(j.display_id)
        else:
            rows.append(([j.display_id], row))
    headers = HEADERS + ((SHORT,) if short else ())
    ids = [i if type(i) is str else ", ".join(statview.compact_ids(i)) for i, _ in rows]
    return statview.columns([ids, *map(list, zip(*(r for _, r in rows)))] if rows else [[] for _ in headers], headers)
