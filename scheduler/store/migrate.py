"""`labq admin history migrate --to URL`: the archive moved to another database (SQLite ->
PostgreSQL, or another SQLite file), row for row: the records, the acct rows, the ledger with its
hash chain as it is (the chain and its anchor in Redis verify the same after the move), and the
cluster id. The scheduler must be stopped (it is the archive's one writer); an existing target that
holds rows, or belongs to another cluster, is refused."""
from ..errors import RefusedError, UsageError
from . import acctrows, dialect
from .archive import _JOBS, Archive, _shown

PAGE = 5000
_LEDGER = ("seq", "stream_id", "ms", "key", "fields", "hash")


def migrate(source: str, target: str) -> dict:
    """Copy the archive at `source` into `target` (created with the current schema); {jobs, ledger}."""
    if source == target:
        raise UsageError(f"--to: {_shown(target)} is the archive itself")
    src = Archive(source)             # opened for writing: an older schema is brought up to date first
    dst = Archive(target)
    try:
        mine, theirs = src.cluster(), dst.cluster()
        if theirs and mine and theirs != mine:
            raise RefusedError(f"{_shown(target)} is the archive of cluster {theirs}, not {mine}'s")
        if dst.db.execute("SELECT COUNT(*) FROM jobs").fetchone()[0] or \
                dst.db.execute("SELECT COUNT(*) FROM ledger").fetchone()[0]:
            raise RefusedError(f"{_shown(target)} already holds archived rows: migrate into an empty database")
        counts = {"jobs": _copy(src, dst, "jobs", _JOBS, "id"),
                  "acct": _copy(src, dst, "acct", acctrows.SQL_NAMES, "id"),
                  "ledger": _copy(src, dst, "ledger", _LEDGER, "seq")}
        if mine:
            dst.claim_cluster(mine)
        if dst.db.kind == "postgres":     # the serial goes on after the copied seqs
            dst.db.execute("SELECT setval(pg_get_serial_sequence('ledger', 'seq'), "
                           "(SELECT COALESCE(MAX(seq), 1) FROM ledger))")
        dst.db.commit()
        if dst.broken_chain(src.head()):
            raise RefusedError(f"{_shown(target)}: the copied ledger chain does not verify; the source is unchanged")
        return counts
    finally:
        src.close()
        dst.close()


def _copy(src: Archive, dst: Archive, table: str, cols, key: str) -> int:
    """Every row of `table`, a page at a time in `key` order, one transaction at the end."""
    names = ", ".join(cols)
    sql = dialect.upsert(table, cols, key)
    if dst.db.kind == "postgres" and key == "seq":    # an identity column: the copied seqs kept as they are
        sql = sql.replace(") VALUES (", ") OVERRIDING SYSTEM VALUE VALUES (", 1)
    n, last = 0, None
    while True:
        cond, args = (f" WHERE {key} > ?", (last,)) if last is not None else ("", ())
        rows = src.db.execute(f"SELECT {names} FROM {table}{cond} ORDER BY {key} LIMIT {PAGE}", args).fetchall()
        if not rows:
            return n
        dst.db.executemany(sql, rows)
        n, last = n + len(rows), rows[-1][cols.index(key)]
