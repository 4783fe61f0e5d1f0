"""`labq admin archive` and `labq admin export`: the accounting archive (scheduler/store/archive.py)
for the lab's administrator and its own tools."""
import json
import os
import sys

import click

from labq.scheduler.errors import UsageError
from labq.scheduler.units import MICRO

from .common import pass_ctx
from .out import echo_json

FORMATS = ("csv", "json")


@click.command()
@click.option("--now", is_flag=True, help="Run an archive pass now, in the leading scheduler.")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def archive(ctx, now, as_json):
    """Move ended jobs and ledger entries older than history.keep to the archive now (the scheduler
    does it by itself every few seconds; this is for before a backup or a Redis upgrade)."""
    if not now:
        raise UsageError("give --now (an archive pass in the scheduler now); `labq acct` and `labq admin export` "
                         "read the archive")
    # Through the inbox: the leader is the one writer of Redis and of the archived ledger's hash chain.
    got = ctx.client.archive_now()
    if as_json:
        return echo_json(got)
    click.echo(f"archived {got['jobs']} jobs and {got['ledger']} ledger entries (ended more than "
               f"{_days(got['keep'])} ago)" + ("; more remain: the scheduler goes on each tick" if got["more"] else ""))


def _days(seconds: float) -> str:
    from labq.scheduler.units import fmt_duration
    return fmt_duration(seconds) if seconds else "0s"


@click.command()
@click.option("--since", help="Jobs that ended (entries written) from this date (YYYY-MM-DD) or this long ago (30d).")
@click.option("--until", help="... up to this date or this long ago (default: now).")
@click.option("--format", "fmt", default="csv", help="csv (default) or json.")
@click.option("--what", default="jobs", help="jobs (default: acct's columns) or ledger (the budgets' entries).")
@pass_ctx
def export(ctx, since, until, fmt, what):
    """Every ended job (or ledger entry) of a window, archived or not, one row each (jobs: acct's
    columns; times in epoch seconds, money in the currency), streamed as CSV or a JSON array for the
    lab's own tools."""
    from labq.scheduler.money.report import committed_by_job

    from .report import _since
    if fmt not in FORMATS:
        raise UsageError(f"--format: expected csv or json, got {fmt!r}")
    if what not in ("jobs", "ledger"):
        raise UsageError(f"--what: expected jobs or ledger, got {what!r}")
    if not since:
        raise UsageError("--since: expected a date (YYYY-MM-DD) or how long ago (30d): the window to export")
    lo, hi = _since(since, "--since"), _since(until, "--until")
    c = ctx.client
    if what == "ledger":
        entries = (_entry(i, f) for i, f in c.read.ledger_stream(lo, hi if hi is not None else float("inf")))
        return (_ledger_csv if fmt == "csv" else _ledger_json)(entries, sys.stdout)
    models = {g.uuid: g.model for n in c.nodes() for g in n.gpus}
    rows = c.read.acct_stream(lo, hi if hi is not None else float("inf"),
                              lambda jobs: committed_by_job(jobs, models, ctx.cfg))
    (_csv if fmt == "csv" else _json)(rows, sys.stdout)


_SKIP = {"attempts"}            # the attempts' detail: `labq show ID`, `labq acct --json`


def _columns():
    from labq.scheduler.store import acctrows
    keep = [i for i, n in enumerate(acctrows.NAMES) if n not in _SKIP]
    return [acctrows.NAMES[i] for i in keep], keep


def _values(v, keep, money, tags) -> list:
    out = [v[i] for i in keep]
    for i in money:
        out[i] = out[i] / MICRO if out[i] is not None else None
    out[tags] = dict(json.loads(out[tags] or "[]"))
    return out


def _csv(rows, out) -> None:
    import csv
    names, keep = _columns()
    money, tags = [names.index("cost"), names.index("committed")], names.index("tags")
    w = csv.writer(out)
    w.writerow(names)
    for v in rows:
        vals = _values(v, keep, money, tags)
        vals[tags] = ";".join(f"{k}={x}" for k, x in vals[tags].items())
        w.writerow(["" if x is None else x for x in vals])


def _json(rows, out) -> None:
    names, keep = _columns()
    money, tags = [names.index("cost"), names.index("committed")], names.index("tags")
    out.write("[")
    sep = "\n"
    for v in rows:
        out.write(sep + json.dumps(dict(zip(names, _values(v, keep, money, tags))), separators=(",", ":")))
        sep = ",\n"
    out.write("\n]\n")


# -- --what ledger ------------------------------------------------------------------------------------
# A ledger entry's fields depend on its type (a charge: budget, unit, amount, job, attempt, period; an
# override or an import: their own): these columns first, the others as one JSON object.
LEDGER_COLUMNS = ("id", "time", "type", "key", "budget", "unit", "amount", "job", "attempt", "period")


def _entry(sid: str, fields: dict) -> dict:
    """One entry as exported: its stream id, `time` (epoch seconds it was written: the `ts` field,
    else the stream id's), `amount` in its unit (the currency, GPU- or CPU-hours), job and attempt
    as numbers; the rest as Redis holds it (text)."""
    f = dict(fields)
    ts = f.pop("ts", None)
    out = {"id": sid, "time": _number(ts) if ts not in (None, "") else int(sid.split("-")[0]) / 1000}
    for name in LEDGER_COLUMNS[2:]:
        if name in f:
            out[name] = f.pop(name)
    if "amount" in out:
        amount = _number(out["amount"])
        out["amount"] = amount / MICRO if isinstance(amount, (int, float)) else amount
    for name in ("job", "attempt"):
        if name in out:
            out[name] = _number(out[name])
    out.update(f)
    return out


def _number(text):
    if isinstance(text, (int, float)):
        return text
    try:
        return int(text)
    except (TypeError, ValueError):
        try:
            return float(text)
        except (TypeError, ValueError):
            return text


def _ledger_csv(entries, out) -> None:
    import csv
    w = csv.writer(out)
    w.writerow([*LEDGER_COLUMNS, "other"])
    for e in entries:
        rest = {k: v for k, v in e.items() if k not in LEDGER_COLUMNS}
        w.writerow([*("" if e.get(c) is None else e[c] for c in LEDGER_COLUMNS),
                    json.dumps(rest, sort_keys=True, separators=(",", ":")) if rest else ""])


def _ledger_json(entries, out) -> None:
    out.write("[")
    sep = "\n"
    for e in entries:
        out.write(sep + json.dumps(e, separators=(",", ":")))
        sep = ",\n"
    out.write("\n]\n")


@click.group("history")
def history():
    """The accounting archive itself (admins, on the scheduler's host)."""


@history.command()
@click.option("--to", "to", required=True, help="The new archive: postgresql://USER@HOST/DB or sqlite:///PATH.")
@pass_ctx
def migrate(ctx, to):
    """Copy the archive (history.url, else the scheduler's state directory) into an empty database,
    row for row, hash chain and cluster id included. Stop the scheduler first; then set
    history.url = TO and start it again."""
    from labq.scheduler.store.history import default_path, path_of
    from labq.scheduler.store.migrate import migrate as run
    leader, published = ctx.client.read.leader_and_archive()
    if leader:
        raise UsageError("a scheduler is leading: stop it first (systemctl stop labq-scheduler); it is the "
                         "archive's one writer")
    source = default_path(ctx.cfg.history["url"]) if ctx.cfg.history["url"] else \
        (published or default_path(""))
    if "://" not in source and not os.path.exists(source):
        raise UsageError(f"no archive at {source} (nothing archived yet, or set history.url)")
    got = run(source, path_of(to))
    # The scheduler started on the new history.url publishes the archive's new place in Redis.
    click.echo(f"copied {got['jobs']} jobs and {got['ledger']} ledger entries from {source}; now set history.url "
               "to the --to URL in every machine's labq.toml and start the scheduler")
