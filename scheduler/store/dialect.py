"""One schema for SQLite and PostgreSQL: the archive's SQL is written once — `?` marks, `ON CONFLICT`
upserts, types both read alike (DOUBLE PRECISION, BIGINT, TEXT) — and this module opens either
database and maps the few differences (the parameter mark, the ledger's sequence, a DDL script,
whether a table exists, the driver's errors).

SQLite is the default (stdlib `sqlite3`, WAL mode). PostgreSQL (`history.url = "postgresql://…"`)
needs psycopg 3 (the `postgres` extra), imported only then.
"""
from ..errors import UsageError

PG_PREFIXES = ("postgresql://", "postgres://")

# The ledger's own order: rows are appended and chained in it.
SERIAL = {"sqlite": "INTEGER PRIMARY KEY AUTOINCREMENT", "postgres": "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY"}


def is_pg(where: str) -> bool:
    return where.startswith(PG_PREFIXES)


def upsert(table: str, cols, key: str = "id") -> str:
    """INSERT … ON CONFLICT (key) DO UPDATE: what a row written twice (a crash between the archive's
    two steps) needs, in the SQL both databases accept."""
    sets = ", ".join(f"{c} = excluded.{c}" for c in cols if c != key)
    return f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))}) " \
           f"ON CONFLICT ({key}) DO UPDATE SET {sets}"


class Db:
    """A connection with the archive's few needs; `execute` returns the driver's cursor (iterable,
    fetchone, fetchall, rowcount)."""

    def __init__(self, where: str, readonly: bool):
        self.where = where
        if is_pg(where):
            self.kind, self._mark = "postgres", "%s"
            try:
                import psycopg
            except ImportError:
                raise UsageError("history.url: PostgreSQL needs psycopg 3 (pip install 'labq[postgres]')") from None
            self.errors: tuple = (psycopg.Error,)
            self.conn = psycopg.connect(where)
            self.conn.read_only = readonly
        else:
            import sqlite3  # here, not at the top: store/history.py (every client) reads PG_PREFIXES
            self.kind, self._mark, self.errors = "sqlite", "?", (sqlite3.Error,)
            if readonly:
                self.conn = sqlite3.connect(f"file:{where}?mode=ro", uri=True, timeout=30)
            else:
                self.conn = sqlite3.connect(where, timeout=30)
                self.conn.execute("PRAGMA journal_mode=WAL")

    def _sql(self, sql: str) -> str:
        return sql if self._mark == "?" else sql.replace("?", self._mark)

    def execute(self, sql: str, args=()):
        if self.kind == "sqlite":
            return self.conn.execute(sql, args)
        # No parameters: None, so that a literal % (LIKE '%x%') is not read as a placeholder.
        return self.conn.cursor().execute(self._sql(sql), args or None)

    def executemany(self, sql: str, rows) -> None:
        rows = list(rows)
        if rows:
            self.conn.cursor().executemany(self._sql(sql), rows)

    def script(self, text: str) -> None:
        """Several DDL statements, in the current transaction (committed with the rest)."""
        for stmt in (s.strip() for s in text.split(";")):
            if stmt:
                self.execute(stmt.replace("{serial}", SERIAL[self.kind]))

    def has_table(self, name: str) -> bool:
        if self.kind == "sqlite":
            q = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
        else:
            q = "SELECT 1 FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = ?"
        return self.execute(q, (name,)).fetchone() is not None

    def commit(self) -> None:
        self.conn.commit()

    def close(self) -> None:
        self.conn.close()
