"""`labq report`: cost by account, user, QoS, GPU type, node, status or tag; forecast accuracy;
reconciliation against imported bills; a plot of spending against the limit."""
import time

from labq.scheduler.errors import UsageError
from labq.scheduler.units import parse_duration

from . import statview
from .out import echo, echo_json, fail

COLUMNS = [("jobs", "JOBS"), ("attempts", "ATTEMPTS"), ("gpu_hours", "GPU-H"), ("cpu_hours", "CPU-H"),
           ("cost", "COST"), ("success_rate", "SUCCESS"), ("cost_per_success", "COST/OK"),
           ("failed_cost", "FAILED"), ("preempt_lost_cost", "PREEMPT-LOST"), ("idle_gpu_hours", "IDLE-GPU-H"),
           ("gpu_util_mean", "GPU-UTIL%")]


def _cell(k, v) -> str:
    if v is None:
        return "-"
    if k == "success_rate":
        return f"{v:.0%}"
    if isinstance(v, float):
        return f"{v:,.2f}" if k in ("cost", "cost_per_success", "failed_cost", "preempt_lost_cost") else f"{v:g}"
    return str(v)


def _emit(rows, keys, fmt, headers=None):
    """rows of dicts as a table, CSV or JSON; `keys` the columns in order."""
    if fmt == "json":
        return echo_json(rows)
    if fmt == "csv":
        import csv
        import io
        out = io.StringIO()
        w = csv.writer(out)
        w.writerow(keys)
        w.writerows([["" if r.get(k) is None else r.get(k) for k in keys] for r in rows])
        return echo(out.getvalue(), nl=False)
    if not rows:
        return echo("nothing in that window")
    echo(statview.table([[_cell(k, r.get(k)) for k in keys] for r in rows], headers or [k.upper() for k in keys]))


def run(ctx, by_, since, until, fmt, as_json, forecast_accuracy, reconcile, node_idle, tz, plot_path, budget_name,
        period):
    """`labq report` with its options (spec.REPORT), from the fast path (fast.py) or click's (reportcmd.py)."""
    fmt = "json" if as_json else fmt
    lo, hi = _since(since, "--since") or 0, _since(until, "--until") or float("inf")
    if plot_path:
        from .spendplot import plot
        return plot(ctx, plot_path, budget_name, period)
    # Here, not at the top: a refused `labq report` (a bad --by too, before anything is read) imports
    # neither the job model nor the ledger, and redis-py only once it reads (issue 39 item 4).
    from labq.scheduler.money import report as rep, totals as rep_totals
    keys = None
    if not (forecast_accuracy or node_idle or reconcile):
        try:
            keys = rep.parse_by(by_)
        except ValueError as e:
            raise UsageError(str(e)) from None
    # The thin client (store/thinreads.py): redis-py's import alone cost ~8x `labq sub` (issue 39 item 4).
    c = ctx.thin
    # The whole hours from the totals the scheduler keeps (store/totals.py), records only of the few
    # jobs they leave out: ~30 us a job ended in the window otherwise (issue 39 item 4).
    kept = _kept(c, keys, lo, hi) if keys is not None and rep_totals.CELL_KEYS.issuperset(keys) else None
    # Else archived jobs as compact rows (store/acctrows); of the active ones only those that have run:
    # the others have nothing to count, and 10,000 held ones cost ~1 s of decoding (issue 39 item 4).
    cells, jobs = kept or ([], c.read.acct_rows(lo, views=True) + c.read.ran())
    if forecast_accuracy:
        return _emit(rep.forecast_accuracy(jobs, lo, hi), ["user", "jobs", "p50", "p90", "margin_90"], fmt,
                     ["USER", "JOBS", "ACTUAL/EST P50", "P90", "MARGIN FOR 90%"])
    if node_idle:
        prices = ctx.books["node_hour"]
        if not prices:
            fail("no rented nodes: rates.node_hour gives no whole-instance prices", 2)
        # Up to --until, else up to now (or the last recorded end, should a clock be ahead of ours).
        ends = [a.end_time for j in jobs for a in j.attempts if a.end_time and a.node in prices]
        rows = rep.node_idle(jobs, prices, lo, hi if hi != float("inf") else max([time.time(), *ends]))
        return _emit(rows, ["node", "hours", "instance_cost", "paid", "idle_cost", "utilisation"], fmt,
                     ["NODE", "HOURS", "INSTANCE", "PAID BY JOBS", "IDLE COST", "PAID/INSTANCE"])
    if reconcile:
        from datetime import datetime

        from labq.scheduler.money.periods import zone
        try:
            z = zone(tz)
        except ValueError as e:
            raise UsageError(f"--tz: {e}") from None
        rows = [(e["date"], e["scope"], int(e["amount"])) for e in c.read.ledger_all() if e.get("type") == "import"]
        if not rows:
            fail("no imported bills: run `labq ledger import FILE.csv` first", 2)
        out = rep.reconcile(rows, jobs, lambda t: datetime.fromtimestamp(t, z).strftime("%Y-%m-%d"))
        return _emit(out, ["date", "scope", "imported", "labq", "diff", "diff_pct"], fmt,
                     ["DATE", "SCOPE", "IMPORTED", "LABQ", "DIFF", "DIFF%"])
    # NodeView: [uuid, index, model, mem]; only --by gpu_type reads them (never from cells)
    models = {g[0]: g[2] for n in c.read.nodes() for g in n.gpus} if "gpu_type" in keys else {}
    rows = rep.by(jobs, keys, models, lo, hi, cells)
    if fmt == "table" and rows:
        rows = rows + [rep.total(rows, keys)]
    _emit(rows, [*keys, *(k for k, _ in COLUMNS)], fmt, [*(k.upper() for k in keys), *(h for _, h in COLUMNS)])
    if fmt == "table" and rows:
        echo(f"cost in {ctx.books['currency']}; window "
                   f"{_day(lo) if lo else 'start'} .. {_day(hi) if hi != float('inf') else 'now'}", err=False)


def _kept(c, keys, lo, hi):
    """(cells, jobs) for report.by from the kept totals, or None where they cannot say."""
    from labq.scheduler.errors import RefusedError
    from labq.scheduler.store import totals
    try:
        kept = totals.read(c.read, lo, hi)
    except RefusedError:        # Redis ACL roles older than these keys: the full read, until acl --apply
        return None
    if kept is None:
        return None
    cells, ids, oldest = kept
    jobs = c.read.views(ids)
    old = c.read.history.acct(lo, float("inf")) if c.read.history is not None else []     # as acct_rows(lo)
    if old:     # the archive's rows, but of jobs still in Redis (a crash between its two steps)
        here = totals.here(c.read, lo, max(j.end_time for j in old), oldest)
        if here is None:
            return None
        jobs = [j for j in old if j.id not in here] + jobs
    return cells, jobs + c.read.ran()


def _day(t) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(t))


def _since(text, what):
    """--since/--until (acct's too): a date (YYYY-MM-DD) or how long ago (7d)."""
    if not text:
        return None
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%d"))
    except ValueError:
        return time.time() - parse_duration(text, what, bare_unit=1)

