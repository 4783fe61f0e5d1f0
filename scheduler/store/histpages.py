"""The archive through the scheduler, a page at a time: for clients that cannot open the database
(ordinary users on a multi-user lab, where the SQLite file is the scheduler's, mode 0600).

A client sends `history` requests through its inbox (store/inbox.py); the leading scheduler answers
each from its own archive (`answer`) with one page of rows and whether more follow. `Remote` is the
client's side: the read methods of store/history.History's archive, each a loop over pages.

What is served is what those users may read in Redis anyway: job records (never the exported
environment: it is not part of a record), acct rows, ledger entries and keys, and the ledger's
chain check.
"""
import json

from ..errors import UsageError
from . import acctrows, codec

OP = "history"
# Rows per page: a reply is one Redis list element, and the scheduler answers it inside a tick.
PAGE = {"acct": 2000, "ended": 200, "jobs": 200, "ledger": 2000, "keys": 5000}
_ENDED = "SELECT record FROM jobs WHERE end_time >= ? AND end_time <= ? ORDER BY end_time, id"


def _window(body) -> tuple[float, float]:
    try:
        since, until = float(body.get("since", 0)), float(body.get("until", 1e300))
    except (TypeError, ValueError):
        raise UsageError("history: since and until: expected epoch seconds") from None
    return since, min(until, 1e300)


def answer(archive, body: dict) -> dict:
    """One page of `body["what"]` from `archive` (store/archive.Archive): {rows, more}."""
    what = body.get("what")
    if what == "verify":
        return {"ok": True, "rows": archive.broken_chain(), "more": False}
    if what not in PAGE:
        raise UsageError(f"history: what: expected one of {', '.join([*PAGE, 'verify'])}, got {str(what)[:40]!r}")
    offset, limit = body.get("offset", 0), PAGE[what]
    if not isinstance(offset, int) or offset < 0:
        raise UsageError("history: offset: expected a whole number ≥ 0")
    page = f" LIMIT {limit + 1} OFFSET {offset}"
    if what == "acct":
        cols = body.get("columns")
        q, args = acctrows.select(*_window(body), body.get("user") or None, body.get("account") or None,
                                  columns=set(cols) if isinstance(cols, list) else None)
        rows = [list(v) for v in archive.db.execute(q + ", id" + page, args)]
    elif what == "ended":
        rows = [rec for (rec,) in archive.db.execute(_ENDED + page, _window(body))]
    elif what == "jobs":
        ids = [int(i) for i in body.get("ids", [])[:limit] if isinstance(i, int)]
        marks = ",".join("?" * len(ids))
        rows = [rec for (rec,) in archive.db.execute(f"SELECT record FROM jobs WHERE id IN ({marks})", ids)] \
            if ids else []
        return {"ok": True, "rows": rows, "more": False}
    elif what == "ledger":
        rows = [[sid, f] for sid, f in archive.db.execute("SELECT stream_id, fields FROM ledger ORDER BY seq" + page)]
    else:
        rows = [k for (k,) in archive.db.execute("SELECT DISTINCT key FROM ledger WHERE key != '' ORDER BY key" + page)]
    return {"ok": True, "rows": rows[:limit], "more": len(rows) > limit}


class Remote:
    """The archive read through the scheduler: `ask(op, body) -> reply` sends one request (the
    client's `request`, checked: an error reply raises)."""

    def __init__(self, ask):
        self.ask = ask

    def _pages(self, what: str, **body):
        offset = 0
        while True:
            got = self.ask(OP, {"what": what, "offset": offset, **body})
            yield from got["rows"]
            if not got.get("more"):
                return
            offset += len(got["rows"])

    def jobs(self, ids) -> dict:
        ids, out = [int(i) for i in ids], {}
        for i in range(0, len(ids), PAGE["jobs"]):
            for rec in self.ask(OP, {"what": "jobs", "ids": ids[i:i + PAGE["jobs"]]})["rows"]:
                j = codec.loads(rec)
                out[j.id] = j
        return out

    def ended(self, since: float, until: float) -> list:
        return [codec.loads(rec) for rec in self._pages("ended", since=since, until=min(until, 1e300))]

    def acct(self, since: float, until: float, user=None, account=None, columns=None) -> list:
        return [acctrows.AcctJob._make(v) for v in self.acct_iter(since, until, user, account, columns)]

    def acct_iter(self, since: float, until: float, user=None, account=None, columns=None):
        cols = sorted(columns) if columns is not None else None
        pages = self._pages("acct", since=since, until=min(until, 1e300), user=user, account=account, columns=cols)
        return (tuple(v) for v in pages)      # rows as the database gives them (JSON made them lists)

    def ledger(self) -> list[tuple[str, dict]]:
        return [(sid, json.loads(f)) for sid, f in self._pages("ledger")]

    def keys(self) -> set[str]:
        return set(self._pages("keys"))

    def broken_chain(self) -> list[str]:
        return self.ask(OP, {"what": "verify"})["rows"]
