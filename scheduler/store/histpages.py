"""The archive through the scheduler, a page at a time: for clients that cannot open the database
(ordinary users on a multi-user lab, where the SQLite file is the scheduler's, mode 0600).

A client sends `history` requests through its inbox (store/inbox.py); the leading scheduler answers
each from its own archive (`answer`) with one page of rows and whether more follow. `Remote` is the
client's side: the read methods of store/history.History's archive, each a loop over pages.

What is served is what those users may read in Redis anyway: job records (never the exported
environment: it is not part of a record; nor the script an archived record holds: `public`), acct
rows, ledger entries and keys, and the ledger's chain check. An owner reads an archived job's
script through the scheduler too (scheduler/security/private.py).
"""
import json
from operator import itemgetter

from ..errors import UsageError
from . import acctrows, codec

OP = "history"
# Rows per page: a reply is one Redis list element, and the scheduler answers it inside a tick.
PAGE = {"acct": 2000, "ended": 200, "jobs": 200, "ledger": 2000, "keys": 5000}


def _window(body) -> tuple[float, float]:
    try:
        since, until = float(body.get("since", 0)), float(body.get("until", 1e300))
    except (TypeError, ValueError):
        raise UsageError("history: since and until: expected epoch seconds") from None
    return since, min(until, 1e300)


def answer(archive, body: dict) -> dict:
    """One page of `body["what"]` from `archive` (store/archive.Archive), after the cursor `after`
    (keyset paging: rows archived meanwhile neither shift nor repeat a page): {rows, more, next}."""
    what = body.get("what")
    if what == "verify":
        anchor = body.get("anchor")
        return {"ok": True, "rows": archive.broken_chain(anchor if isinstance(anchor, dict) else None), "more": False}
    if what not in PAGE:
        raise UsageError(f"history: what: expected one of {', '.join([*PAGE, 'verify'])}, got {str(what)[:40]!r}")
    limit, after = PAGE[what], body.get("after")
    if what == "jobs":
        ids = [int(i) for i in body.get("ids", [])[:limit] if isinstance(i, int)]
        marks = ",".join("?" * len(ids))
        rows = [public(rec) for (rec,) in archive.db.execute(f"SELECT record FROM jobs WHERE id IN ({marks})", ids)] \
            if ids else []
        return {"ok": True, "rows": rows, "more": False}
    try:
        q, args, cursor = _query(what, body, after)
    except (TypeError, ValueError, IndexError):
        raise UsageError(f"history: after: not a cursor of {what}: {str(after)[:60]!r}") from None
    got = [list(v) for v in archive.db.execute(f"{q} LIMIT {limit + 1}", args)]
    rows = got[:limit]
    shown = {"ended": lambda v: public(v[-1]), "keys": lambda v: v[0]}.get(what, lambda v: v)    # the record; the key
    return {"ok": True, "rows": [shown(v) for v in rows], "more": len(got) > limit, "next": cursor(rows[-1]) if rows else after}


def public(record: str) -> str:
    """An archived record as Redis would hold it: without its script (codec.dumps share=False keeps
    it), which the client role may not read."""
    if '"script":' not in record:
        return record
    d = json.loads(record)
    if d.pop("script", None):
        d["scripted"] = True
    return json.dumps(d, separators=(",", ":"))


def _query(what: str, body: dict, after):
    """(SQL, args, row -> cursor) of one kind of page."""
    if what == "acct":
        cols = body.get("columns")
        q, args = acctrows.select(*_window(body), body.get("user") or None, body.get("account") or None,
                                  columns={"id", "end_time", *cols} if isinstance(cols, list) else None,
                                  after=(float(after[0]), int(after[1])) if after else None)
        return q, args, lambda v: [v[1], v[0]]
    if what == "ended":
        since, until = _window(body)
        cond, args = "", [since, until]
        if after:
            cond, args = " AND (end_time > ? OR (end_time = ? AND id > ?))", \
                args + [float(after[0]), float(after[0]), int(after[1])]
        return (f"SELECT end_time, id, record FROM jobs WHERE end_time >= ? AND end_time <= ?{cond} "
                "ORDER BY end_time, id", args, lambda v: [v[0], v[1]])
    if what == "ledger":
        return ("SELECT seq, stream_id, fields FROM ledger WHERE seq > ? ORDER BY seq", [int(after or 0)],
                lambda v: v[0])
    return ("SELECT DISTINCT key FROM ledger WHERE key != '' AND key > ? ORDER BY key", [str(after or "")],
            lambda v: v[0])


class Remote:
    """The archive read through the scheduler: `ask(op, body) -> reply` sends one request (the
    client's `request`, checked: an error reply raises)."""

    def __init__(self, ask):
        self.ask = ask

    def _pages(self, what: str, **body):
        after = None
        while True:
            got = self.ask(OP, {"what": what, "after": after, **body})
            yield from got["rows"]
            if not got.get("more"):
                return
            after = got["next"]

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

    def acct_table(self, since: float, until: float, user=None, account=None) -> list:
        pick = itemgetter(*(acctrows.NAMES.index(n) for n in acctrows.TABLE_ORDER))
        g, n = acctrows.NAMES.index("gpus"), acctrows.NAMES.index("nodes")
        out = []
        for v in self.acct_iter(since, until, user, account, {*acctrows.TABLE, "nodes"}):
            v = list(v)
            v[g] = (v[g] or 0) * (v[n] or 1)         # the table's GPUS: a gang's total, as the database gives it
            out.append(pick(v))
        return out

    def acct_iter(self, since: float, until: float, user=None, account=None, columns=None):
        cols = sorted(columns) if columns is not None else None
        pages = self._pages("acct", since=since, until=min(until, 1e300), user=user, account=account, columns=cols)
        return (tuple(v) for v in pages)      # rows as the database gives them (JSON made them lists)

    def ledger(self) -> list[tuple[str, dict]]:
        return [(sid, json.loads(f)) for _, sid, f in self._pages("ledger")]

    def keys(self) -> set[str]:
        return set(self._pages("keys"))

    def broken_chain(self, anchor: dict | None = None) -> list[str]:
        return self.ask(OP, {"what": "verify", "anchor": anchor})["rows"]
