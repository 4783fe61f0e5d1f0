"""`labq report`'s kept totals in Redis (money/totals.py says what a contribution and a cell are).

The transaction that ends a job (writes.put_jobs) puts its contribution in Keys.report_new, computed
from the job it has in hand. Each loop the leader folds up to FOLD of them into Keys.report_cells
(fold: read the cells they touch, add, write, in one fenced transaction; the scheduler is their one
writer, and its loop runs the archiver after it) and their sums over all hours into Keys.report_all
(what a report of all time reads), noting in Keys.report_folded what each job put in
its cell: a job's record rewritten after its end is then folded again without counting it twice, and
the archiver takes out what an archived job put in (drop, in the transaction that removes its record).
Split jobs go to Keys.report_split. A new leader rebuilds it all (rebuild: every ended job "?", its
record read by fold), as it does Keys.ran; readers trust the keys only while Keys.report_by leads.

A reader (read) takes the cells of the window's whole hours, corrects them by what report_new holds
and what those jobs' folded parts were, adds the split jobs' parts per hour (their texts in
report_folded), and reads the records of unknown jobs, of split ones with an attempt in the window's
partial first or last hour, and of the jobs that ended in those hours: its cost is the cells' and
split jobs' count and those few records, not the jobs of the window.
"""
from __future__ import annotations

from ..money import totals as tot
from .keys import Keys

FOLD = 500        # jobs a loop: a rebuild folds ~70 us of CPU a job (read as jobview.JobView, priced, written)


def put(p, k: Keys, new: dict[str, str]) -> None:
    """In put_jobs' transaction: the contributions of jobs that ended (those that count: not "")."""
    if new:
        p.hset(k.report_new, mapping=new)


def rebuild(p, k: Keys, ended_ids, leader: str) -> None:
    """In a new leader's rebuild: every ended job in Redis to fold afresh from its record."""
    p.delete(k.report_new, k.report_cells, k.report_all, k.report_folded, k.report_split)
    ids = list(ended_ids)
    for i in range(0, len(ids), 10_000):
        p.hset(k.report_new, mapping=dict.fromkeys(ids[i:i + 10_000], tot.UNKNOWN))
    p.set(k.report_by, leader)


def fold(r, k: Keys, txn, load=None) -> bool:
    """Up to FOLD of report_new into the cells, in one transaction `txn(build)`; `load(ids)` their
    records (for "?"; by default as jobview.JobView: what report reads of one, without the model).
    True where more wait."""
    if load is None:
        from .jobview import loads_many
        load = lambda ids: loads_many([t for t in r.mget([k.job(int(i)) for i in ids]) if t])  # noqa: E731
    n = r.hlen(k.report_new)
    if not n:
        return False
    # A new leader's rebuild puts every ended job here: a batch at a time, not the whole hash a loop
    pending = (r.hscan(k.report_new, 0, count=FOLD)[1] if n > FOLD else None) or r.hgetall(k.report_new)
    ids = list(pending)[:FOLD]
    scores = dict(zip(ids, r.zmscore(k.history, ids)))
    new = {i: pending[i] for i in ids}
    unknown = [i for i in ids if new[i] == tot.UNKNOWN]
    for j in load(unknown) if unknown else ():
        new[str(j.id)] = tot.contribution(j, scores[str(j.id)]) if scores[str(j.id)] is not None else ""
    for i in ids:
        if new[i] == tot.UNKNOWN or scores[i] is None:      # no record, or no longer ended: nothing
            new[i] = ""
    old = dict(zip(ids, r.hmget(k.report_folded, ids)))
    delta: dict[str, list[int]] = {}
    every: dict[str, list[int]] = {}
    for i in ids:
        for text, sign in ((old[i], -1), (new[i], 1)):
            _delta(text, sign, delta, every)
    cells, alls = _summed(r, k.report_cells, delta), _summed(r, k.report_all, every)

    def build(p):
        _write_cells(p, k.report_cells, cells)
        _write_cells(p, k.report_all, alls)
        keep = {i: v for i, v in new.items() if v}
        if keep:
            p.hset(k.report_folded, mapping=keep)
        gone = [i for i, v in new.items() if not v]
        if gone:
            p.hdel(k.report_folded, *gone)
        split = {i: scores[i] for i, v in new.items() if v.startswith(tot.SPLIT)}
        if split:
            p.zadd(k.report_split, split)
        unsplit = [i for i in ids if (old[i] or "").startswith(tot.SPLIT) and not new[i].startswith(tot.SPLIT)]
        if unsplit:
            p.zrem(k.report_split, *unsplit)
        p.hdel(k.report_new, *ids)
    txn(build)
    return n > len(ids)


def drop(r, k: Keys, p, ids) -> None:
    """In the archiver's transaction that removes `ids`' records: what they put in the cells out."""
    if not ids:
        return
    delta: dict[str, list[int]] = {}
    every: dict[str, list[int]] = {}
    for text in r.hmget(k.report_folded, ids):
        _delta(text, -1, delta, every)
    _write_cells(p, k.report_cells, _summed(r, k.report_cells, delta))
    _write_cells(p, k.report_all, _summed(r, k.report_all, every))
    p.hdel(k.report_folded, *ids)
    p.hdel(k.report_new, *ids)
    p.zrem(k.report_split, *ids)


def _delta(text: str | None, sign: int, cells: dict, every: dict) -> None:
    """A kept text (a job's contribution) times `sign` into the `cells` and the all-hours `every` deltas."""
    got = tot.parse(text) if text else None
    if got:
        tot.add(cells, got[0], got[1], sign)
        tot.add(every, tot.dims_of(got[0]), got[1], sign)
    elif text and text.startswith(tot.SPLIT):
        whole = tot.split(text, -1 << 62, None, ())
        if whole is not None and whole != "raw":
            tot.add(every, whole[0], whole[1], sign)


def _summed(r, key: str, delta: dict[str, list[int]]) -> dict[str, str | None]:
    """The texts of hash `key`'s fields after `delta` (None: to delete)."""
    if not delta:
        return {}
    names = list(delta)
    now: dict[str, list[int]] = {}
    for name, text in zip(names, r.hmget(key, names)):
        now[name] = [int(v) for v in text.split(" ")] if text else [0] * len(delta[name])
        tot.add(now, name, delta[name])
    return {name: tot.dumps(vec) for name, vec in now.items()}


def _write_cells(p, key: str, cells: dict[str, str | None]) -> None:
    keep = {c: v for c, v in cells.items() if v is not None}
    if keep:
        p.hset(key, mapping=keep)
    gone = [c for c, v in cells.items() if v is None]
    if gone:
        p.hdel(key, *gone)


def read(reader, since: float, until: float):
    """ThinReader's side: (cells, ids, oldest) for report.by: the kept cells of [since, until)'s whole
    hours as (DIMS' values, vector), the ids of the ended jobs in Redis whose records must be read and
    the oldest ended job in Redis (for here()); None where the keys are not trusted (another leader
    rebuilt them, or none) or no whole hour is in it."""
    k = reader.k
    first, last = tot.window(since, until)
    if last is not None and last <= first:
        return None
    # As report's full read (acct_rows(since): every job that ended since, its attempts up to until):
    # a job kept whole in an hour past the window's last has no attempt in it, a split one may.
    late = ("ZRANGEBYSCORE", k.history, last * tot.HOUR, f"({(last + 1) * tot.HOUR}") if last is not None else \
        ("ZRANGEBYSCORE", k.history, "+inf", "-inf")
    # Every hour (the default `labq report`): the all-hours sums, split jobs in them (report_all).
    every = since <= 0 and last is None
    got = reader._multi(("GET", k.report_by), ("GET", k.leader), ("HGETALL", k.report_all if every else k.report_cells),
                        ("HGETALL", k.report_new),
                        ("ZRANGEBYSCORE", k.report_split, "+inf" if every else since, "+inf"),
                        ("ZRANGEBYSCORE", k.history, since, f"({first * tot.HOUR}"), late,
                        ("ZRANGE", k.history, 0, 0))
    by, leader, cells, new, split, early, late, oldest = _text(got[0]), _text(got[1]), *got[2:]
    if by is None or by != leader:
        return None
    sums: dict[str, list[int]] = {}      # the whole hours' cells added up by their dims (tot.dims_of)
    for i in range(0, len(cells), 2):
        c = _text(cells[i])
        if every or _whole(c, first, last):
            tot.add(sums, c if every else tot.dims_of(c), list(map(int, _text(cells[i + 1]).split(" "))))
    raw = {int(_text(i)) for i in (*early, *late)}
    new = {_text(new[i]): _text(new[i + 1]) for i in range(0, len(new), 2)}
    texts = _waiting(reader, new, [_text(i) for i in split if _text(i) not in new], sums, raw, since, first, last,
                     every)
    edges = tuple(h for h, partial in ((first - 1, since < first * tot.HOUR),
                                       (last, last is not None and until > last * tot.HOUR)) if partial)
    for i, text in texts:
        if int(i) in raw:       # ended in a partial hour: its record is read (and counted) whole
            continue
        got = tot.split(text, first, last, edges)
        if got == "raw":
            raw.add(int(i))
        elif got is not None:
            tot.add(sums, *got)
    return tot.sums(sums), sorted(raw), oldest


def _waiting(reader, new: dict, split: list, sums: dict, raw: set, since: float, first: int, last: int | None,
             every: bool = False):
    """read()'s second round trip: `new` (report_new) into `sums` (less what those jobs' folded
    parts put there before: with `every`, the all-hours sums, a split job's too), their unknown ones
    (that ended since `since`) into `raw`; returns the (id, text) of the split jobs, `split`'s as
    folded (report_folded) and new ones."""
    if not new and not split:
        return []
    k, ids, texts = reader.k, list(new), []
    replies = reader._pipe([("HMGET", k.report_folded, *ids, *split), *[("ZSCORE", k.history, i) for i in ids]])
    for i, old, score in zip(ids, replies[0], replies[1:]):
        for text, sign in ((_text(old), -1), (new[i], 1)):
            got = tot.parse(text) if text else None
            if got and _whole(got[0], first, last):
                tot.add(sums, tot.dims_of(got[0]), got[1], sign)
        if every and (was := _text(old)) and was.startswith(tot.SPLIT):
            gone = tot.split(was, first, None, ())      # in report_all: out, as its new text comes in
            if gone is not None and gone != "raw":
                tot.add(sums, gone[0], gone[1], -1)
        if score is not None and since <= float(score):      # else it ended before the window
            if new[i] == tot.UNKNOWN:
                raw.add(int(i))
            elif new[i].startswith(tot.SPLIT):
                texts.append((i, new[i]))
    return texts + [(i, _text(t)) for i, t in zip(split, replies[0][len(ids):]) if t]


def here(reader, since: float, until: float, oldest) -> set[int] | None:
    """The ids of the ended jobs in Redis that ended in [since, until] (the archive's rows of jobs
    still there are theirs: counted in the cells), as they were when read() read; None where the
    archiver moved some since (it moves the oldest first: then the oldest is another)."""
    now, ids = reader._multi(("ZRANGE", reader.k.history, 0, 0), ("ZRANGEBYSCORE", reader.k.history, since, until))
    return {int(_text(i)) for i in ids} if list(now) == list(oldest) else None


def _whole(cell: str, first: int, last: int | None) -> bool:
    h = tot.hour_of(cell)
    return first <= h and (last is None or h < last)


def _text(v):
    return v.decode() if isinstance(v, bytes) else v
