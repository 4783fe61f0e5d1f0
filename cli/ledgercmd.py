"""`labq ledger`: import bills to reconcile against (`labq report --reconcile`), verify the ledger,
show its entries."""
import csv
import os
import sys
import time

import click

from labq.scheduler.errors import UsageError
from labq.scheduler.money import ledger as ledger_mod

from . import statview
from .common import pass_ctx
from .out import echo_json

CHUNK = 5000


def read_bill(path: str) -> list[list]:
    """CSV rows `date, account or tag, amount` (a header row is optional). A tag column's values are
    KEY=VALUE; a scope may also be written `tag:KEY=VALUE` in an account column."""
    try:
        with open(path, newline="") as f:
            rows = [r for r in csv.reader(f) if r and any(c.strip() for c in r)]
    except OSError as e:
        raise UsageError(f"{path}: cannot read: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise UsageError(f"{path}: not UTF-8 text (byte {e.start}): save the bill as a UTF-8 CSV file") from None
    except csv.Error as e:          # a field beyond the csv module's limit
        raise UsageError(f"{path}: not a CSV file of date, account or tag, amount: {e}") from None
    tag_col = False
    if rows and rows[0][0].strip().lower() == "date":
        tag_col = len(rows[0]) > 1 and rows[0][1].strip().lower() == "tag"
        rows = rows[1:]
    out = []
    for n, r in enumerate(rows, 1):
        if len(r) != 3:
            raise UsageError(f"{path}: row {n}: expected 3 columns (date, account or tag, amount), got {len(r)}")
        date, scope, amount = (c.strip() for c in r)
        try:
            value = float(amount.lstrip("$€£¥").replace(",", ""))
        except ValueError:
            raise UsageError(f"{path}: row {n}: amount: expected a number, got {amount!r}") from None
        if tag_col and not scope.startswith("tag:"):
            if "=" not in scope:
                raise UsageError(f"{path}: row {n}: tag: expected KEY=VALUE, got {scope!r}")
            scope = f"tag:{scope}"
        out.append([date, scope, value])
    if not out:
        raise UsageError(f"{path}: no rows")
    return out


@click.group()
def ledger():
    """The budget ledger: import bills, verify balances, show entries."""


@ledger.command("import")
@click.argument("path", type=click.Path(dir_okay=False))
@pass_ctx
def import_(ctx, path):
    """Import a bill (CSV: date, account or tag, amount) for `labq report --reconcile` (admins).
    Importing the same rows again adds nothing."""
    rows = read_bill(path)
    done = dup = 0
    for i in range(0, len(rows), CHUNK):
        r = ctx.client.books("ledger_import", {"rows": rows[i:i + CHUNK], "source": os.path.basename(path)})
        done, dup = done + r["imported"], dup + r["duplicates"]
    click.echo(f"imported {done} rows from {path}" + (f" ({dup} already imported)" if dup else ""))


@ledger.command()
@pass_ctx
def verify(ctx):
    """Recompute every balance from the entries and check the idempotency keys; exit 1 on a mismatch."""
    r = ctx.client.read
    entries = r.ledger_all()
    # Archived jobs as acct rows (their attempts' charges), not records: a million is seconds, not minutes.
    problems = ledger_mod.verify(entries, r.spent(), r.ledger_keys(), r.acct_rows() + r.active())
    if r.history is not None:
        problems += r.history.broken_chain(r.ledger_anchor())
    if problems:
        for p in problems:
            click.echo(f"labq: ledger: {p}", err=True)
        sys.exit(1)
    charges = sum(1 for e in entries if e.get("type") == "charge")
    click.echo(f"ledger ok: {len(entries)} entries ({charges} charges), {len(r.spent())} balances match")


@ledger.command()
@click.option("--type", "kind", help="Only entries of this type (charge, override, limit, period, import, …).")
@click.option("-n", "--count", type=int, default=50, help="The newest N (default 50).")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def show(ctx, kind, count, as_json):
    """The newest ledger entries."""
    got = [e for e in ctx.client.read.ledger_all() if not kind or e.get("type") == kind][-count:]
    if as_json:
        return echo_json(got)
    rows = [[time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(e.get("ts") or 0))), e.get("type"),
             e.get("key"), e.get("budget") or e.get("scope", ""), e.get("period", ""), int(e.get("amount", 0)) / 1e6]
            for e in got]
    click.echo(statview.table(rows, ["TIME", "TYPE", "KEY", "BUDGET/SCOPE", "PERIOD", "AMOUNT"]))
