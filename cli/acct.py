"""`labq acct`: ended jobs with their costs, as sacct shows them.

sacct's habits: the window defaults to since midnight today (all time once -j names jobs), -S/-E
take sacct's time forms, `--format=JobID,JobName%30,State` picks fields, -P/--parsable2 separates
them with `|`, exit codes read `code:signal`.
"""
import gc
import time
from collections import namedtuple
from functools import partial
from itertools import repeat
from operator import add, floordiv, itemgetter, mod, truediv

from labq.scheduler.errors import RefusedError
from labq.scheduler.units import MICRO, currency_symbol, fmt_duration, fmt_money

from . import statview
from .out import echo, echo_json
from .report import _since

_OUTPUTS = ("table", "csv", "json")


def window(since, until, start, end, named: bool, now: float) -> tuple[float, float]:
    """The end-time window: -S/-E (sacct's forms) or --since/--until; by default since midnight
    today, or all time when -j names the jobs (as sacct does)."""
    if start or end:        # here, not at the top: sacct's forms import datetime (a plain `acct` none)
        from labq.scheduler.jobs import when
    lo = (when.parse(start, now, "--starttime", future=False) if start else _since(since, "--since"))
    hi = (when.parse(end, now, "--endtime", future=False) if end else _since(until, "--until"))
    if lo is None and not named:
        lo = time.mktime(time.localtime(now)[:3] + (0, 0, 0, 0, 0, -1))
    return lo or 0.0, hi if hi is not None else float("inf")


def run(ctx, start, end, since, until, job_ids, user, allusers, account, state, fmt, parsable2, parsable, noheader,
        allocations, duplicates, as_json):
    """`labq acct` with its options (spec.ACCT), from the fast path (fast.py) or click's (acctcmd.py)."""
    from .hot import _id_filter, _states
    now = time.time()
    user = _whose(ctx.thin, user, allusers)
    picked, wanted = _id_filter(job_ids), _states(state)
    lo, hi = window(since, until, start, end, bool(job_ids), now)
    if fmt in ("table", "csv") and not (as_json or parsable or parsable2 or duplicates):
        # The thin client (no redis-py: ~0.1 s of start-up); no garbage collection: this process makes
        # ~100k tuples and strings that all live until it exits, and each pass would walk them all.
        gc.disable()
        return _table(_table_rows(ctx, lo, hi, user, account, wanted, picked if job_ids else None), fmt, noheader,
                      currency=ctx.thin.currency)
    from . import render, slurmfmt  # here: the table's `acct` needs neither (slurmfmt imports `re`, render `enum`)
    read = ctx.client.read
    # Archived jobs come as compact rows (store/acctrows.py), the recent ones as records.
    jobs = [j for j in read.acct_rows(lo, hi, user, account) if (not wanted or j.state in wanted) and picked(j)]
    jobs.sort(key=lambda j: j.id)
    if duplicates:
        return _duplicates(ctx, _records(read, jobs), fmt, as_json, "|" if parsable or parsable2 else None, parsable,
                           noheader)
    committed = _committed(ctx, jobs)
    if as_json or fmt == "json":
        # --json shows every field of each job (DESIGN §8's shape): the records, of the chosen jobs only.
        return echo_json([{**render.job_dict(j), "committed_cost": committed[j.id] / MICRO,
                           "final_cost": j.cost / MICRO} for j in _records(read, jobs)])
    fields = slurmfmt.sacct_fields(slurmfmt.DEFAULT_SACCT if fmt in _OUTPUTS else fmt)
    m = partial(fmt_money, currency=ctx.cfg.rates.currency)
    extra = {j.id: {"cost": m(j.cost), "committed": m(committed[j.id])} for j in jobs}
    sep = "|" if parsable or parsable2 else None
    out = slurmfmt.sacct(fields, jobs, extra, header=not noheader, sep=sep, trailing=parsable)
    return echo(out) if out else None


def _whose(thin, user: str | None, allusers: bool) -> str | None:
    """The user whose jobs acct shows (None: everyone's). Like sacct with PrivateData=jobs: a user
    sees their own; admins ([security] admins) everyone's, or one user's with -u."""
    me = thin.user
    if me in thin.security.get("admins", ("root",)):
        return user
    if allusers or (user and user != me):
        raise RefusedError(f"acct: only admins ({', '.join(thin.security.get('admins', ('root',)))}) see other "
                           f"users' jobs; `labq acct` shows yours ({me})")
    return me


def _records(read, jobs) -> list:
    """The full records of `jobs` (archived ones come as compact acct rows)."""
    # here: a refused or table-only `labq acct` needs no model
    from labq.scheduler.jobs.model import Job
    full = {j.id: j for j in read.jobs([j.id for j in jobs if not isinstance(j, Job)])}
    return [j if isinstance(j, Job) else full[j.id] for j in jobs if isinstance(j, Job) or j.id in full]


def _duplicates(ctx, jobs: list, fmt, as_json, sep, trailing, noheader):
    """--duplicates: a row per attempt (cli/acctdup.py); --json adds `attempt` to acct's objects,
    whose costs and state are then the attempt's."""
    from labq.scheduler.money.report import committed_by_job

    from . import acctdup, render, slurmfmt
    rows = acctdup.views(jobs)
    models = {g.uuid: g.model for n in ctx.client.nodes() for g in n.gpus}
    committed = [committed_by_job([v], models, ctx.cfg)[v.id] for v in rows]
    if as_json or fmt == "json":
        return echo_json([{**render.job_dict(v), "attempt": v.restart_count + 1 if v.attempts else None,
                           "committed_cost": c / MICRO, "final_cost": v.cost / MICRO} for v, c in zip(rows, committed)])
    if fmt in ("table", "csv") and sep is None:
        return _table(acctdup.table_rows(rows, committed), fmt, noheader, per_attempt=True,
                      currency=ctx.cfg.rates.currency)
    fields = slurmfmt.sacct_fields(slurmfmt.DEFAULT_SACCT if fmt in _OUTPUTS else fmt)
    m = partial(fmt_money, currency=ctx.cfg.rates.currency)
    extra = [{"cost": m(v.cost), "committed": m(c), "state": acctdup.LONG.get(v.state, "")}
             for v, c in zip(rows, committed)]
    out = slurmfmt.sacct(fields, rows, extra, header=not noheader, sep=sep, trailing=trailing)
    return echo(out) if out else None


def _committed(ctx, jobs) -> dict:
    # Committed: what admission encumbered for each attempt (rate × planned time); final: the charges.
    # An archived row carries it, computed when it was archived.
    from labq.scheduler.jobs.model import Job
    from labq.scheduler.money.report import committed_by_job
    records = [j for j in jobs if isinstance(j, Job)]
    out = {j.id: j.committed for j in jobs if not isinstance(j, Job)}
    if records:
        models = {g.uuid: g.model for n in ctx.client.nodes() for g in n.gpus}
        out.update(committed_by_job(records, models, ctx.cfg))
    return out


_HEADERS = ("JOBID", "NAME", "USER", "ACCOUNT", "STATE", "EXIT", "START", "END", "ELAPSED", "GPUS", "ATTEMPTS",
            "COMMITTED", "COST")
_Ids = namedtuple("_Ids", "id array_id array_index")      # what a --jobs filter reads of a job


def _table_rows(ctx, lo, hi, user, account, wanted, picked) -> list[tuple]:
    """The table's jobs as tuples of store/acctrows.TABLE_ORDER, by id: the archive's as the
    database gives them (no object per row), Redis's from their acct rows (COMMITTED priced here,
    from this client's rates, as from a record), and those of the records (Redis's jobs that ended
    before their scheduler wrote rows) made here."""
    read: list = []

    def gpu_models() -> dict:        # read once, and only for jobs still in Redis
        if not read:
            read.append({g[0]: g[2] for n in ctx.thin.read.nodes() for g in n.gpus})   # [uuid, index, model, mem]
        return read[0]

    def prices():                    # the config's rates as the client settings cache keeps them: no config
        from labq.scheduler.money.pricing import Prices
        return Prices(ctx.books["pricing"])

    def priced(fresh) -> list[int]:  # COMMITTED of Redis's acct rows, from the client's rates (as of records)
        from labq.scheduler.store.acctrows import committed
        return committed(fresh, gpu_models(), prices())
    rows, records = ctx.thin.read.acct_table(lo, hi, user, account, committed=priced)
    if records:
        from labq.scheduler.money.report import committed_by_job

        from . import render
        committed = committed_by_job(records, gpu_models(), prices())
        rows = [*rows, *((j.id, j.array_id, j.array_index, j.name, j.user, j.account, j.state, j.exit_code,
                          j.start_time, j.end_time, render.elapsed(j, j.end_time or 0), j.gpus * (j.nodes or 1),
                          len(j.attempts),
                          committed[j.id], j.cost) for j in records)]
    if wanted:
        rows = [v for v in rows if v[6] in wanted]
    if picked:
        rows = [v for v in rows if picked(_Ids(v[0], v[1], v[2]))]
    rows.sort(key=itemgetter(0))
    return rows


def _table(rows: list[tuple], fmt: str, noheader: bool, per_attempt: bool = False, *, currency: str) -> None:
    """The table (or CSV) of `rows` (_table_rows). A month of a busy lab is ~100k rows: the work is
    done column by column: each distinct value formatted (and padded) once, the rest in C (map,
    zip, join), no object per row."""
    n = len(rows)
    (ids, aids, aixs, names, users, accts, sts, codes, starts, ends, els, gpus, natts, comms,
     costs) = zip(*rows) if n else ((),) * 15
    if aids.count(None) == n:
        shown = list(map(str, ids))
    else:
        shown = [str(i) if a is None else f"{a}_{x}" for i, a, x in zip(ids, aids, aixs)]
    heads: dict[int, str] = {}
    headers = _HEADERS[:10] + ("ATTEMPT",) + _HEADERS[11:] if per_attempt else _HEADERS
    as_csv = fmt == "csv"
    exits = (["" if c is None else c for c in codes] if as_csv else list(zip(codes, sts)),
             None if as_csv else _exit_codes(set(zip(codes, sts))))
    # (values, {distinct value: its cell}) of each column after JOBID
    cells = [(names, _texts(names)), (users, _texts(users)), (accts, _texts(accts)), (sts, _texts(sts)), exits,
             (starts, _stamps(starts, heads)), (ends, _stamps(ends, heads)), (els, _durations(els)),
             (gpus, _texts(gpus)), (natts, _texts(natts)), (comms, _money(comms, as_csv, currency)),
             (costs, _money(costs, as_csv, currency))]
    if as_csv:
        import csv  # here: a table's `acct` does without it
        import io
        out = io.StringIO()
        w = csv.writer(out)
        if not noheader:
            w.writerow(headers)
        w.writerows(zip(shown, *(v if t is None else map(t.__getitem__, v) for v, t in cells)))
        return echo(out.getvalue(), nl=False)
    widths = [max(len(headers[0]), max(map(len, shown), default=0))]
    widths += [max(len(h), max(map(len, t.values()), default=0)) for h, (_, t) in zip(headers[1:], cells)]
    # Each cell padded to its column's width, the last column not (what rstrip took off each line).
    columns = [list(map(str.ljust, shown, repeat(widths[0], n)))]
    for (v, t), w in zip(cells[:-1], widths[1:]):
        if min(map(len, t.values()), default=w) < w:    # (times are all as wide as their column: as they are)
            t = dict(zip(t, map(str.ljust, t.values(), repeat(w))))
        columns.append(list(map(t.__getitem__, v)))
    columns.append(list(map(cells[-1][1].__getitem__, cells[-1][0])))
    lines = [] if noheader else ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines += map("  ".join, zip(*columns))
    if lines:
        echo("\n".join(lines))
    if not noheader:
        echo(f"{n} {'attempts' if per_attempt else 'jobs'}, total cost {fmt_money(sum(costs), currency=currency)}")


def _texts(values) -> dict:
    return {v: str(v) for v in set(values)}


# The formatters below take a column's distinct values and make each one's text with map() over
# C functions (int, divmod's halves, dict lookups, str concatenation) instead of a Python call per
# value: a month of a busy lab has ~100k distinct costs, times and run times.
def _money(values, as_csv: bool, currency: str) -> dict:
    if as_csv:
        return {m: f"{m / MICRO:.6f}" for m in set(values)}
    sym, distinct = currency_symbol(currency), set(values)
    common = list(filter((10_000).__le__, distinct)) if sym else []     # $1,234.56: the usual case
    out = dict(zip(common, map(add, repeat(sym), map(format, map(truediv, common, repeat(MICRO)), repeat(",.2f")))))
    out.update((m, fmt_money(m, currency=currency)) for m in distinct.difference(common))   # fmt_money's own text for the rest
    return out


def _exit_codes(pairs) -> dict:
    return {(c, st): statview.exit_code(_Ended(c, st)) for c, st in pairs}


class _Clock(dict):
    """"MM:SS" of each second of an hour, made as first asked for: all 3,600 at import were ~15 M
    instructions, a quarter of a whole `labq sub` (issue 39 item 4); a lookup that finds it is C's."""

    def __missing__(self, s: int) -> str:
        text = self[s] = f"{s // 60:02d}:{s % 60:02d}"
        return text


_MMSS = _Clock()


def _durations(values) -> dict:
    """fmt_duration(int(e)) of each distinct value: `[D-]HH:` per hour, `MM:SS` from _MMSS."""
    distinct = list(set(values))
    secs = list(map(int, distinct))
    if secs and min(secs) < 0:
        return {e: fmt_duration(int(e)) for e in distinct}
    hours = list(map(floordiv, secs, repeat(3600)))
    heads = {h: f"{h // 24}-{h % 24:02d}:" if h >= 24 else f"{h:02d}:" for h in set(hours)}
    return dict(zip(distinct, map(add, map(heads.__getitem__, hours), map(_MMSS.__getitem__,
                                                                            map(mod, secs, repeat(3600))))))


def _stamps(values, heads: dict) -> dict:
    """Local `YYYY-MM-DD HH:MM:SS` of each distinct value ("-" for none), as
    time.strftime(time.localtime(int(t))): the zone's offset is looked up once per UTC hour and the
    text made per local hour (`heads`) plus _MMSS; an hour in which the offset changes (DST) is
    formatted value by value."""
    distinct = set(values)
    out = {t: "-" for t in (None, 0) if t in distinct}       # 0 stands for 0.0 too (equal, same hash)
    distinct.difference_update((None, 0))
    distinct = list(distinct)
    secs = list(map(int, distinct))
    utc_hours = list(map(floordiv, secs, repeat(3600)))
    offsets = {u: _offset(u) for u in set(utc_hours)}
    if None in offsets.values():
        odd = [(t, s) for t, s, u in zip(distinct, secs, utc_hours) if offsets[u] is None]
        out.update((t, time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(s))) for t, s in odd)
        keep = [i for i, u in enumerate(utc_hours) if offsets[u] is not None]
        distinct, secs, utc_hours = [distinct[i] for i in keep], [secs[i] for i in keep], [utc_hours[i] for i in keep]
    local = list(map(add, secs, map(offsets.__getitem__, utc_hours)))
    hours = list(map(floordiv, local, repeat(3600)))
    for h in set(hours) - heads.keys():
        heads[h] = time.strftime("%Y-%m-%d %H:", time.gmtime(h * 3600))
    out.update(zip(distinct, map(add, map(heads.__getitem__, hours), map(_MMSS.__getitem__, map(mod, local, repeat(3600))))))
    return out


def _offset(utc_hour: int) -> int | None:
    """The local zone's offset from UTC (seconds) throughout this UTC hour; None when it changes in it."""
    first, last = time.localtime(utc_hour * 3600), time.localtime(utc_hour * 3600 + 3599)
    return first.tm_gmtoff if first.tm_gmtoff == last.tm_gmtoff else None


_Ended = namedtuple("_Ended", "exit_code state")      # what slurmfmt.exit_code reads of a job
