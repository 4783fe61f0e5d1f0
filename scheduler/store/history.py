"""Where the accounting archive is, and a lazy read-only view of it for the clients.

Kept apart from archive.py so that a client pays for sqlite3 and the job model only when a query
actually reaches archived rows (the hot commands start in tens of milliseconds).
"""
import os

from ..errors import UsageError
from .dialect import PG_PREFIXES  # (dialect imports sqlite3 only to open a database)


def path_of(url: str) -> str:
    """history.url -> where the archive is: a file path ("sqlite:///abs/path" or a plain path), or
    the postgresql:// URL itself."""
    if url.startswith("sqlite:///"):
        return "/" + url[len("sqlite:///"):].lstrip("/")
    if url.startswith(PG_PREFIXES):
        return url
    if "://" in url:
        raise UsageError(f"history.url: expected sqlite:///PATH or postgresql://…, got {url!r}")
    return url


def default_path(url: str = "") -> str:
    """Where the archive is: history.url, else history.db in the scheduler's state directory
    (systemd's $STATE_DIRECTORY, else $LABQ_STATE_DIR, else ~/.local/state/labq: `labq up`'s)."""
    if url:
        return path_of(url)
    from ..settings.statedir import state_dir
    return os.path.join(state_dir(daemon=True), "history.db")


class History:
    """The archive as readers see it: opened read-only on first use; absent = nothing archived yet.
    A database that exists but cannot be opened is an error, not an empty history (answers
    would silently differ)."""

    def __init__(self, path: str | None, ask=None, get=None, keys=None):
        """`ask(op, body) -> reply`: the client's request, where the scheduler can be asked for the
        archive's pages (store/histpages.py) when this user cannot open it. A client also passes
        `get(key) -> str | None` (a Redis GET) and its Keys, and `path` None where history.url is
        unset: it never guesses where the archive is (what the scheduler published in Redis says
        whether and where anything was archived), and an archive it opens must be Redis's cluster's."""
        self.path, self.ask, self.get, self.k = path, ask, get, keys
        self._db = None
        self._absent = False

    def _readable(self) -> bool:
        return os.access(self.path, os.R_OK)

    def _open(self):
        if self._db is None and not self._absent and self.path is None:
            return self._published()
        if self._db is None and not self._absent and self.path.startswith(PG_PREFIXES):
            from .archive import Archive
            self._db = self._checked(Archive(self.path, readonly=True))      # PostgreSQL: its own access rules
            if self._db._version() == 0:                     # no tables yet: nothing archived yet
                self._db.close()
                self._db, self._absent = None, True
        if self._db is None and not self._absent:
            where = os.path.dirname(os.path.abspath(self.path))
            if not os.path.exists(self.path) and (not os.path.isdir(where) or os.access(where, os.X_OK)):
                self._absent = True      # nothing archived yet (or no archive on this host)
                return None
            if not self._readable() and self.ask is not None:
                from .histpages import Remote
                self._db = Remote(self.ask)                  # the scheduler reads it for us, page by page
                return self._db
            if not self._readable():
                raise UsageError(f"history: {self.path} holds the archived jobs and ledger, and you cannot "
                                 "read it (run this on the scheduler's host as an admin, or ask one)")
            from .archive import Archive
            self._db = self._checked(Archive(self.path, readonly=True))
        return self._db

    def _checked(self, db):
        """A client's direct read: the archive must be this Redis's cluster's."""
        if self.get is not None:
            db.check_cluster(self.get(self.k.cluster))
        return db

    def _published(self):
        """No history.url: nothing archived (Redis has no `archive` key) is None; else the archive
        the scheduler published, opened directly where this user can read it, else read through
        the scheduler."""
        published = self.get(self.k.archive) if self.get is not None else None
        if not published:
            self._absent = True
            return None
        if not published.startswith(PG_PREFIXES) and os.access(published, os.R_OK):
            from .archive import Archive
            self._db = self._checked(Archive(published, readonly=True))
        elif self.ask is not None:
            from .histpages import Remote
            self._db = Remote(self.ask)
        else:
            raise UsageError(f"history: cannot read the archive at {published} (ask an admin)")
        return self._db

    def jobs(self, ids) -> dict:
        db = self._open()
        return db.jobs(ids) if db and ids else {}

    def ended(self, since: float, until: float) -> list:
        db = self._open()
        return db.ended(since, until) if db else []

    def acct(self, since: float, until: float, user=None, account=None, columns=None) -> list:
        db = self._open()
        return db.acct(since, until, user, account, columns) if db else []

    def acct_table(self, since: float, until: float, user=None, account=None) -> list:
        db = self._open()
        return db.acct_table(since, until, user, account) if db else []

    def acct_iter(self, since: float, until: float):
        db = self._open()
        return db.acct_iter(since, until) if db else iter(())

    def ledger(self) -> list[tuple[str, dict]]:
        db = self._open()
        return db.ledger() if db else []

    def ledger_window(self, lo_ms: int, hi_ms: int):
        db = self._open()
        if db is None:
            return iter(())
        if hasattr(db, "ledger_window"):
            return db.ledger_window(lo_ms, hi_ms)
        return ((sid, f) for sid, f in db.ledger() if lo_ms <= int(sid.split("-")[0]) <= hi_ms)   # pages: all

    def keys(self) -> set[str]:
        db = self._open()
        return db.keys() if db else set()

    def broken_chain(self, anchor: dict | None = None) -> list[str]:
        db = self._open()
        if db is None:
            return [f"archived ledger: the anchor names entry {anchor.get('sid')}, and there is no archive"] \
                if anchor else []
        return db.broken_chain(anchor)
