"""`labq prio`: each pending job's priority factors and their weights, sprio-style, without click: from
the fast path (fast.py) or click's (faircmd.py)."""
import gc
import time
from collections import namedtuple
from functools import partial
from itertools import repeat
from operator import attrgetter, itemgetter, mul
from types import SimpleNamespace

from labq.scheduler import priotable  # the planner's own formulas, without importing the planner
from labq.scheduler.jobs import codes  # not states: its StrEnum imports `enum` (codes.py)
from labq.scheduler.priotable import Weights
from labq.scheduler.store import statrows as R

from .out import echo

# A published ranking older than this is not shown: no scheduler refreshes it (one redoes a queue's
# every ranking.REFRESH seconds at the latest), and ages have moved since.
STALE = 120.0


class Books:
    """What multifactor.py reads of a config.Config (priority, qos, accounts, qos_named), from the
    client settings cache: neither TOML nor the config's ~20 ms once it holds them (issue 39 item 4)."""

    def __init__(self, books: dict):
        self.priority = Weights(books["priority"])
        self.qos = [SimpleNamespace(name=n, priority=p) for n, p in books["qos"].items()]
        self.accounts = [SimpleNamespace(name=n, share=s) for n, s in books["shares"].items()]
        self._qos = {q.name: q for q in self.qos}

    def qos_named(self, name: str):
        return self._qos.get(name)


class Pending(namedtuple("Pending", "id array_id array_index user account qos submit_time time_limit learned_est est")):
    """A pending job as its `stat` row gives it (store/statrows.py): what multifactor.py and the table
    read of a job, without decoding its record (issue 39 item 4). The row's expected run time stands
    in as the time limit, which multifactor.expected_runtime falls back to. A tuple made in C
    (_make over columns): a Python __init__ per job was a tenth of `labq prio` at 10,000 jobs."""
    __slots__ = ()
    state = codes.PENDING

    @property
    def display_id(self) -> str:
        return str(self.id) if self.array_id is None else f"{self.array_id}_{self.array_index}"


def ranked(c, now: float, cfg) -> tuple[list, dict, dict]:
    """(the pending jobs in the order a pass considers them, their factors by id, each account's
    usage, running jobs included): the jobs from the `stat` rows (ThinReader.pending_rows), or from
    the records (active_views) where the index lacks rows; multifactor.ranked over the rows' columns
    where it can (no Python code per job), else multifactor.ordered and factors over the jobs."""
    got = c.read.pending_rows()
    if got is None:
        jobs = c.read.active_views()
        pending, running = [j for j in jobs if j.state == codes.PENDING], [j for j in jobs if j.state in codes.ON_NODE]
        cols = None
    else:
        rows, running = got
        cols = _columns(rows)
        pending = _pending(cols)
        cols = (cols[0], cols[3], cols[4], cols[5], cols[6])
    usage = dict(c.fairshare(now, running, cfg.priority.fairshare_half_life))
    order, f = priotable.rank(pending, now, usage, cfg, cols)
    return order, f, usage


def published(c, now: float) -> str | None:
    """The scheduler's last ranking (daemon/ranking.py), its weights line saying how old it is and how
    many changes to others' jobs were committed since; with this user's own changed jobs patched in
    where some changed since (their own submit, start or cancel shows at once: priopatch.py). None
    where there is none, it is older than STALE (no scheduler has refreshed it), or the patch
    declines (`prio` ranks the rows)."""
    got, mine, others = c.read.ranking(c.user)
    if not got:
        return None
    at, _, text = got.partition("\n")
    age = now - float(at)
    if age > STALE:
        return None
    if mine:
        text = _patched(c, at, text)
        if text is None:
            return None
    head, _, rest = text.partition("\n")
    others -= mine
    return f"{head}; as of {max(age, 0):.0f} s ago" + (f", {others} job changes since" if others else "") + "\n" + rest


def _patched(c, at: str, text: str) -> str | None:
    """`text` with this user's jobs as they are now (priopatch.patch), or None."""
    got = c.read.ranking_patch(c.user)
    if got is None:
        return None
    head, entries, ids, rows, arrays, rests = got
    if not head.startswith(f'{{"at": "{at}"'):
        return None         # another ranking since the first read
    from labq.scheduler import priopatch
    return priopatch.patch(text, head, entries, ids, pending_of([r for r in rows if r[R.PRIO]]) + spread(rests),
                           c.user, arrays)


def spread(rests) -> list:
    """The pending tasks of rests (their rows in Keys.rests: store/rests.row's JSON, None where gone) as
    Pending, as statrows.rest_texts spreads them (task at position p: id A + p, index lo + p·step),
    made in C over the positions rather than a row text each."""
    from itertools import chain

    from labq.scheduler import cjson
    out: list = []
    for value in filter(None, rests):
        d = cjson.loads(value)
        t = pending_of([r for r in R.parse([d["row"]]) if r[R.PRIO]])
        if not t:
            continue        # not pending (its tasks are not in the ranking)
        a, lo, step = t[0].id, d["lo"], d["step"]
        pos = list(chain.from_iterable(range(x, y + 1) for x, y in d["runs"]))
        out += map(partial(tuple.__new__, Pending), zip(map(a.__add__, pos), repeat(a),
                                                        map(lo.__add__, map(step.__mul__, pos)), *map(repeat, t[0][3:])))
    return out


def pending_of(rows) -> list:
    """The jobs of pending jobs' `stat` rows (statrows.parse's, each with its `prio` field) as Pending."""
    return _pending(_columns(rows))


def _columns(rows) -> tuple:
    """(ids, array ids, task indices, users, accounts, QoS names, submit times, expected run times) of
    pending jobs' `stat` rows, column by column in C loops; the array columns are None where no row
    is an array's task. The `prio` fields (statrows.dumps: "submit time,expected run time,attempts")
    are joined and split once, not split row by row (a list per row: ~4.6 of ~10 ms at 10,000 jobs)."""
    tails = {t: R.cells(t) for t in set(map(itemgetter(R.TAIL), rows))}    # a user's jobs share theirs: split once
    cells = list(map(tails.__getitem__, map(itemgetter(R.TAIL), rows)))
    prio = list(map(itemgetter(R.PRIO), rows))
    parts = ",".join(prio).split(",")
    if len(parts) == 3 * len(prio) and "".join(parts[2::3]).isdigit():
        submits, limits = parts[0::3], parts[1::3]
    else:           # not three fields each: split row by row
        split = list(map(str.split, prio, repeat(",")))
        submits, limits = list(map(itemgetter(0), split)), list(map(itemgetter(1), split))
    aids = idxs = None
    if any(map(itemgetter(R.ARRAY_ID), rows)):
        aids = [int(a) if a else None for a in map(itemgetter(R.ARRAY_ID), rows)]
        idxs = [int(x) if x else None for x in map(itemgetter(R.ARRAY_INDEX), rows)]
    return (list(map(int, map(itemgetter(R.ID), rows))), aids, idxs, list(map(itemgetter(R.USER), cells)),
            list(map(itemgetter(R.ACCOUNT), cells)), list(map(itemgetter(R.QOS), cells)),
            list(map(float, submits)), list(map(float, limits)))


def _pending(cols) -> list:
    """The columns' jobs as Pending, made in C (tuple.__new__, not _make's Python call per job)."""
    ids, aids, idxs, users, accounts, qoses, submits, limits = cols
    return list(map(partial(tuple.__new__, Pending), zip(
        ids, aids or repeat(None), idxs or repeat(None), users, accounts, qoses, submits, limits, repeat(None),
        repeat(None))))


def run(ctx, user, account, expand, as_json) -> None:
    """Pending jobs in the order the scheduler considers them, with each factor's weighted part.

    priority = qos_weight × QoS + age_weight × age (0..1 over age_max) + fairshare_weight × fair share
    (0..1, 2^(−usage share ÷ account share)) − burst_penalty × burst (0 or 1)
    + short_job_weight × short (0..1, fading with the wait; off by default).
    The cyclic collector is off meanwhile, as for `stat` (hot.py): a job's tuples hold no cycle, and
    its passes over the ~100k made so far were ~a tenth of `labq prio` at 10,000 pending jobs."""
    was = gc.isenabled()
    gc.disable()
    try:
        _run(ctx, user, account, expand, as_json)
    finally:
        if was:
            gc.enable()


def _run(ctx, user, account, expand, as_json) -> None:
    # The thin client, not redis-py (~150 ms to import, issue 39 item 4); the weights from the client
    # settings cache; the jobs from their `stat` rows, not the records (pending_jobs)
    cfg, c, now = Books(ctx.books), ctx.thin, time.time()
    if not (expand or as_json) and (text := published(c, now)) is not None:
        if user or account:     # its lines of theirs (priofilter.py), else ranked below
            from labq.scheduler.priofilter import only
            text = only(text, user, account)
        if text is not None:
            return echo(text)
    order, f, usage = ranked(c, now, cfg)
    shown = [j for j in order if (not user or j.user == user) and (not account or j.account == account)] \
        if user or account else order
    w = cfg.priority
    if as_json:
        return echo(json_text(shown, f, w, usage))
    echo(priotable.weights_line(w))
    echo(priotable.table(shown, f, w, expand))


def json_text(shown, f, w, usage: dict) -> str:
    """`prio --json`: json.dumps(…, indent=2) of {weights, usage, jobs: [{id, job_id, user, account,
    qos, **Factors.as_json}]}, the jobs laid out by one %-format each of their values' JSON texts
    (repr of each float, as json writes them; each distinct string escaped once) rather than by
    json's Python encoder, which indent= takes (~30 µs a job: 372 ms at 10,000, load ~9). Where a
    value has no such text (nan, inf: json writes NaN, Infinity) json.dumps writes the whole."""
    import json
    weights = {k: w[k] for k in ("qos_weight", "age_weight", "fairshare_weight", "burst_penalty", "short_job_weight")}
    whole = {"weights": weights, "usage": dict(sorted(usage.items())), "jobs": []}
    if not shown:
        return json.dumps(whole, indent=2)
    qw, aw, fw, bp, sw = weights.values()
    xs = list(map(f.__getitem__, map(attrgetter("id"), shown)))
    col = {a: list(map(attrgetter(a), xs)) for a in ("qos", "age", "fairshare", "burst", "short", "priority")}
    text = json.encoder.encode_basestring_ascii

    def js(values, fmt=repr) -> list:      # numbers: repr each; strings: each distinct one escaped once
        if fmt is repr:
            return list(map(repr, values))
        values = list(values)
        d = {v: fmt(v) for v in set(values)}
        return list(map(d.__getitem__, values))
    r4 = partial(map, round)
    cols = [js(map(attrgetter("display_id"), shown), text), js(map(attrgetter("id"), shown)),
            js(map(attrgetter("user"), shown), text), js(map(attrgetter("account"), shown), text),
            js(map(attrgetter("qos"), shown), text), js(r4(col["priority"], repeat(4))),
            js(col["qos"]), js(r4(col["age"], repeat(4))), js(r4(col["fairshare"], repeat(4))), js(col["burst"]),
            js(r4(col["short"], repeat(4))), js(map(mul, repeat(qw), col["qos"])),
            js(r4(map(mul, repeat(aw), col["age"]), repeat(4))), js(r4(map(mul, repeat(fw), col["fairshare"]), repeat(4))),
            js(map(mul, repeat(-bp), col["burst"])), js(r4(map(mul, repeat(sw), col["short"]), repeat(4)))]
    jobs = ",\n".join(map(_JOB.__mod__, zip(*cols)))
    if "nan" in jobs or "inf" in jobs:      # maybe a float json spells otherwise (or a name holding it)
        whole["jobs"] = [{"id": j.display_id, "job_id": j.id, "user": j.user, "account": j.account, "qos": j.qos,
                          **f[j.id].as_json(w)} for j in shown]
        return json.dumps(whole, indent=2)
    head = json.dumps(whole, indent=2)
    return head[:-len("[]\n}")] + "[\n" + jobs + "\n  ]\n}"


_JOB = """    {
      "id": %s,
      "job_id": %s,
      "user": %s,
      "account": %s,
      "qos": %s,
      "priority": %s,
      "factors": {
        "qos": %s,
        "age": %s,
        "fairshare": %s,
        "burst": %s,
        "short": %s
      },
      "weighted": {
        "qos": %s,
        "age": %s,
        "fairshare": %s,
        "burst": %s,
        "short": %s
      }
    }"""

