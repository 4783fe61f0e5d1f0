"""The published ranking patched with one user's own changes (issue 39 item 4): a user whose jobs
changed since the leader's last ranking (daemon/ranking.py) gets that ranking with their changed jobs
moved to where they now rank, as of its time, instead of ranking 10,000 rows themselves (~3x a
`labq sub`); everyone else's lines are printed as published.

The leader publishes beside the text an index (`render`, Keys.ranking_index): its parameters (the
QoS priorities, each account's fair-share factor, the weights, how many cells of each column are as
wide as the column), each line's sort key (-score, submit time, id: of its first and last job) and,
per user, their pending jobs in burst order (submit time, id) with each one's line and burst flag,
and an array's task's display id ("+" where it rests). The commits after it list each user's changed
job ids and changed rests (store/ranking.py). `patch` then takes the user's jobs out of that order
and puts the changed ones back as their `stat` rows now say; an array's tasks share lines, so where
one of its tasks or its rest changed, every pending task of it is taken out and put back (its rest's
as the rest's row now spreads them, its records as their rows or lines say). It finds which of their
other jobs' burst flags flip (the tail of a burst is a user's own), renders those rows with the very
code and floats multifactor.ranked and priotable use, an array's tasks alike once and in one line
where priotable.lines would join them, and puts each line at its sort key among the published
lines. The result is the text the leader would have rendered at its time had the user's jobs been as
they are now (tests/property/test_prio_patch.py).

It declines (None: `prio` ranks the rows) where a line taken out leaves two lines of one array that
would merge, where a new key falls inside another array's line, where another's line falls between
two of an array's tasks that would share a line, and where a flip reaches a third array: each rare.
No index is published where the short-job term is on or the age weight is negative
(multifactor.ranked declines those: the order is then Python's per job).

Needs no model: the thin client imports it."""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter, namedtuple
from collections.abc import Container, Mapping, Sequence
from itertools import compress, groupby, repeat
from operator import attrgetter, is_not, itemgetter, lt, not_, sub

from . import cjson, priotable  # cjson: `json` imports `re` and `enum` (cjson.py)
from .tables import columns, compact_tasks, widen

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .settings.config import Config

HEAD = ""           # the index's field of the parameters and the lines' keys (no user is named "")
Row = namedtuple("Row", "id array_id display_id user account qos submit_time")
Factors = namedtuple("Factors", "job_id qos age fairshare burst priority short")   # multifactor.Factors' fields


def render(pending: Sequence[Any], now: float, usage: Mapping[str, float], cfg: Config,
           resting: Container[int] = ()) -> tuple[str, dict[str, str]]:
    """(priotable.text of `pending` at `now`, the index's fields: {} where multifactor.ranked declined;
    an empty queue's too, so that the first submits after it are patched in). `resting`: the ids of
    those of them that are a rest's tasks (daemon/ranking.spread), not records."""
    keys: list = []
    order, f = priotable.rank(pending, now, usage, cfg, None, keys)
    w = priotable.weights_of(cfg)
    ids, cols, headers, members = priotable.lines(order, f, w, False)
    text = priotable.weights_line(w) + "\n" + columns([ids, *cols], headers)
    from .multifactor import by_columns
    if not keys and (pending or not by_columns(cfg)):     # ranked declined (the short-job term, a negative
        return text, {}         # age weight): the patch cannot render those terms
    return text, index(order, f, keys, [ids, *cols], headers, members, cfg, usage, now, resting)


def index(order, f, keys: list, cols: list[list[str]], headers: Sequence[str], members, cfg: Config,
          usage: Mapping[str, float], now: float, resting: Container[int] = ()) -> dict[str, str]:
    """The index's fields (above) of the table `cols` of `order`: `keys` multifactor.ranked's sort
    keys in that order, `members` priotable.lines'. A user's entry is "submit id line flag", an
    array's task's "submit id line A_i flag" ("A_i+" where it rests): an older client reads the line
    and flag where they were."""
    from .money import fairshare
    p = cfg.priority
    head = {"at": repr(now), "qos": {q.name: float(q.priority) for q in cfg.qos},
            "fs": fairshare.factors(dict(usage), {a.name: a.share for a in cfg.accounts}) if p.fairshare_weight else {},
            "w": {k: getattr(p, k) for k in priotable.WEIGHTS + priotable.SCALES + ("burst_jobs", "burst_window")},
            "lens": [dict(Counter(map(len, c))) for c in cols[:len(headers) - 1]]}
    key = "%r %r %d %d".__mod__
    if members is None:
        lines = list(map(key, keys))
        line_of: Sequence[int] = range(len(order))
    else:
        lines = [key(keys[m[0]]) + ("" if len(m) == 1 else " " + key(keys[m[-1]])) for m in members]
        line_of = [i for i, m in enumerate(members) for _ in m]
    bursts = [int(f[i].burst) for i in map(itemgetter(2), keys)]
    tasks: Any = repeat("")
    if any(map(attrgetter("array_id"), order)):
        tasks = [j.array_id and f" {j.display_id}{'+' if j.id in resting else ''}" or "" for j in order]
    by_user = sorted(zip(map(_user, order), map(_submit, order), map(itemgetter(2), keys), line_of, tasks, bursts))
    out = {HEAD: cjson.dumps(head) + "\n" + "\n".join(lines)}
    for user, jobs in groupby(by_user, itemgetter(0)):
        out[user] = "\n".join(map("%r %d %d%s %d".__mod__, map(itemgetter(1, 2, 3, 4, 5), jobs)))
    return out


_user, _submit, _id = attrgetter("user"), attrgetter("submit_time"), attrgetter("id")


def patch(text: str, head: str, entries: str, changed: Sequence[tuple[int, float]], rows: Sequence[Any], user: str,
          arrays: Sequence[tuple[int, float]] = ()) -> str | None:
    """The published `text` (weights line, table) with `user`'s jobs as they are now: `head` the
    index's HEAD field, `entries` the user's field, `changed` the (id, submit time) of each job of
    theirs the commits since listed, `arrays` the (array id, submit time) of each rest of theirs they
    changed, `rows` the pending ones of those jobs as their `stat` rows give them now and the tasks
    of those rests as their rows spread them (cli/prio). None where it declines (above)."""
    meta, _, keytext = head.partition("\n")
    h = cjson.loads(meta)
    w = priotable.Weights(h["w"])
    if w["short_job_weight"] or w["age_weight"] < 0:
        return None         # an index published with those terms on (by 797fe82's leader): not patched
    weights, header, *lines = text.split("\n")
    keys = keytext.split("\n") if keytext else []
    if len(keys) != len(lines):
        return None
    names = header.split()
    starts = [0]
    for name in names[1:]:
        starts.append(header.index(name, starts[-1] + len(names[len(starts) - 1])))
    widths = [b - a - 2 for a, b in zip(starts, starts[1:])]
    es = entries.split("\n") if entries else []
    got = _moved(es, changed, {r.id: r for r in rows if r.user == user}, dict(arrays), lines, widths[0], w)
    if got is None:
        return None
    taken, news = got
    cells = {t: _cells(lines[t], widths[0]) for t in taken}
    if _merges(lines, taken, widths[0]):
        return None
    made = _lines(news, h, w, float(h["at"]))
    if made is None:
        return None
    lens = [Counter({int(n): c for n, c in x.items()}) for x in h["lens"]]
    for c in cells.values():
        lens = [x - Counter({len(v): 1}) for x, v in zip(lens, c)]
    for _, _, cs in made:
        lens = [x + Counter({len(v): 1}) for x, v in zip(lens, cs)]
    wide = [max(max(x, default=0), len(name)) for x, name in zip(lens, names)]
    gone = set(taken)
    if wide != widths:
        lines, header = widen(lines, starts, widths, wide), widen([header], starts, widths, wide)[0]
    out: list[str | None] = list(lines)
    for t in taken:
        out[t] = None
    inserts = []
    fmt = "  ".join([*(f"%-{x}s" for x in wide), "%s"])
    for first, last, cs in made:
        at = bisect_right(keys, first, key=_key)
        if at and at - 1 not in gone and keys[at - 1].count(" ") > 3 and _last(keys[at - 1]) > first:
            return None     # inside an array's line
        if first != last and not gone.issuperset(range(at, bisect_left(keys, last, key=_key))):
            return None     # another's line between two of an array's tasks: not one line
        inserts.append((at, first, (fmt % cs).rstrip()))
    for at, _, line in sorted(inserts, reverse=True):
        out.insert(at, line)
    return "\n".join([weights, header, *filter(None, out)])


def _cells(line: str, w0: int) -> list[str]:
    """A published line's cells: its JOBID (`w0` wide: an array's may hold ", ") and the rest."""
    return [line[:w0].rstrip(), *line[w0 + 2:].split()]


def _array(e: str) -> int | None:
    """The array of an index entry's job (its fourth field "A_i", "A_i+" where it rested), or None."""
    f = e.split(" ")
    return int(f[3].partition("_")[0]) if len(f) == 5 else None


def _moved(es: list[str], changed: Sequence[tuple[int, float]], mine: dict[int, Any], arrays: dict[int, float],
           lines: list[str], w0: int, w) -> tuple[list[int], list[tuple[Any, int]]] | None:
    """(the lines of the user's jobs that move, (Row, burst flag) of each job to put back): their
    changed jobs, every pending task of each array of theirs that changed (a rest's change, a task's:
    its tasks share lines, so all of them are taken out and put back), and the others whose burst
    flag flips; None where it declines. A flip of another array's task adds that array, once round."""
    n = len(es)
    ids = {i for i, _ in changed}
    gone: dict[int, int] = {}     # entry -> the end of its run (one past): a changed single's, an array's
    touched = dict(arrays)
    for i, s in changed:
        k = bisect_left(es, (s, i), key=_entry)
        if k < n and _entry(es[k]) == (s, i):
            gone[k] = k + 1
            a = _array(es[k])
            if a is not None:
                touched[a] = s
    touched.update({r.array_id: r.submit_time for r in mine.values() if r.array_id is not None})
    news: dict[int | None, list[Any]] = {None: [r for r in mine.values() if r.array_id is None]}
    runs: dict[int, tuple[int, int]] = {}
    used: set[int] = set()      # the lines of the arrays' runs
    singles = {k: end for k, end in gone.items() if _array(es[k]) is None}    # a task's: in its array's run
    for _ in range(3):
        for a, s in touched.items():
            if a not in runs:
                runs[a] = _run(es, a, s)
                news[a], lines_of = _array_now(es, *runs[a], a, ids, mine, lines, w0, a in arrays)
                used |= lines_of
        gone = {**singles, **{lo: hi for lo, hi in runs.values() if hi > lo}}
        flagged, flips = _flag(es, gone, news, {a: lo for a, (lo, _) in runs.items()}, w)
        more = {a: _entry(es[j])[0] for j, _ in flips if (a := _array(es[j])) is not None}
        if not more:
            break
        touched.update(more)
    else:
        return None
    taken = used | {int(es[k].split(" ", 3)[2]) for k in singles}
    for j, flag in flips:
        line = int(es[j].split(" ")[2])
        taken.add(line)
        s, i = _entry(es[j])
        flagged.append((_row(i, s, _cells(lines[line], w0)), flag))
    return sorted(taken), flagged


def _run(es: list[str], a: int, s: float) -> tuple[int, int]:
    """The entries of array `a`'s tasks (submitted at `s`): one run in burst order, its ids in a row."""
    lo = bisect_left(es, (s, a), key=_entry)
    return lo, bisect_left(es, True, lo, len(es), key=lambda e: _array(e) != a)


def _array_now(es: list[str], lo: int, hi: int, a: int, ids: set[int], mine: dict[int, Any], lines: list[str],
               w0: int, rest_changed: bool) -> tuple[list[Any], set[int]]:
    """(array `a`'s pending tasks now, the lines of its run): those its rows give (the changed
    records', its rest's where it changed), and the others not changed since (`ids`), as the index
    and their published lines have them: its records, and its resting tasks where the rest did not
    change. A rest's run is its every task (10,000 at the live bench): where it changed and holds no
    record, nothing of it is split. Its tasks are alike but for the burst flag, which in burst order
    goes from 0 to 1 once at most (each looks back `burst_jobs` places, to jobs no later than the one
    before's), and no other job's sort key falls among theirs (their ids are in a row): its first
    task's line and its last's are all its lines."""
    out = [r for r in mine.values() if r.array_id == a]
    if hi == lo:
        return out, set()
    if rest_changed and all(map(str.endswith, es[lo:hi], repeat(("+ 0", "+ 1")))):
        return out, {int(es[lo].split(" ")[2]), int(es[hi - 1].split(" ")[2])}
    fields = list(map(str.split, es[lo:hi]))
    used = set(map(int, set(map(itemgetter(2), fields))))
    if rest_changed:
        fields = list(compress(fields, map(not_, map(str.endswith, map(itemgetter(3), fields), repeat("+")))))
    have = {r.id for r in out} | ids
    for s, i, line, d, _ in fields:
        if int(i) not in have:
            c = _cells(lines[int(line)], w0)
            out.append(Row(int(i), a, d.rstrip("+"), c[1], c[2], c[3], float(s)))
    return out, used


def _flag(es: list[str], gone: dict[int, int], news: dict[int | None, list[Any]], place: dict[int, int], w
          ) -> tuple[list[tuple[Any, int]], list[tuple[int, int]]]:
    """(each of `news` (single jobs under None, each array's tasks under its id) with its burst flag,
    (entry, flag) of each entry kept whose flag flips): the user's jobs in burst order with the runs
    `gone` taken out and `news` put in. Only the entries about each change are read: a job's flag
    depends on the job `burst_jobs` before it in burst order, so a change moves the flags of the
    jobs up to that far after it alone (nearby changes are taken together)."""
    n, a = len(es), int(w["burst_jobs"])
    reach = a + 2 if w["burst_penalty"] and a > 0 else 1   # flags that can flip: none without a burst rule
    at: dict[int, list[Any]] = {}
    for r in news[None]:
        at.setdefault(bisect_left(es, (r.submit_time, r.id), key=_entry), []).append(r)
    for x, rs in news.items():      # an array's tasks: where its run was (a submit time, ids in a row)
        if x is not None and rs:
            at.setdefault(place[x], []).extend(rs)
    changes = sorted([(k, end) for k, end in gone.items()] + [(p, p) for p in at])
    spans: list[list[int]] = []
    for lo, hi in changes:
        if spans and lo - reach <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], hi + reach)
        else:
            spans.append([max(lo - reach, 0), hi + reach])
    out: list[tuple[Any, int]] = []
    flips: list[tuple[int, int]] = []
    for lo, hi in spans:
        hi = min(hi, n)
        local = []
        j = lo
        while j < hi:
            if j in gone:
                j = gone[j]
                continue
            local.append((*_entry(es[j]), j, None))
            j += 1
        for p in at:
            if lo <= p <= hi:
                local += zip(map(_submit, at[p]), map(_id, at[p]), repeat(-1), at[p])
        local.sort(key=itemgetter(0, 1))
        flags = _flags(list(map(itemgetter(0), local)), w)
        rows = list(map(itemgetter(3), local))
        added = list(map(is_not, rows, repeat(None)))
        out += zip(compress(rows, added), compress(flags, added))
        for m in compress(range(len(local)), map(not_, added)):
            j = local[m][2]
            if (lo == 0 or m >= a) and flags[m] != int(es[j].rsplit(" ", 1)[1]):
                flips.append((j, flags[m]))
    return out, flips


def _lines(news: list[tuple[Any, int]], h: dict, w, at: float
           ) -> list[tuple[tuple[float, float, int], tuple[float, float, int], tuple[str, ...]]]:
    """(first and last sort key, cells) of each line of `news` ((Row, burst flag)) at `at`, as
    priotable.lines makes them of the jobs in their order (an array's tasks with the same cells one
    after another share one): multifactor.ranked's factors and sort keys, the same floats in the same
    order, once for each (QoS, account, submit time, flag) (an array's tasks share theirs)."""
    if not news:
        return []
    qw, aw, fw, bw, sw = (w[k] for k in priotable.WEIGHTS)
    age_max = w["age_max"] or 1
    per_s = aw / age_max
    qos, fs = h["qos"], h["fs"]
    qos_o, fs_o = {q: p * qw for q, p in qos.items()}, {a: fw * v for a, v in fs.items()}
    rows = list(map(itemgetter(0), news))
    combos = list(zip(map(attrgetter("qos"), rows), map(attrgetter("account"), rows), map(_submit, rows),
                      map(itemgetter(1), news), map(_user, rows)))
    made = {}
    for c in set(combos):
        q_name, account, submit, flag, _ = c
        wait = at - submit
        score = qos_o.get(q_name, 0.0) + min(max(wait, 0.0) * per_s, aw) + fs_o.get(account, fw)
        burst = 1.0 if flag else 0.0
        if flag:
            score = score - bw * burst
        q, age, share = qos.get(q_name, 0.0), min(max(wait, 0.0) / age_max, 1.0), fs.get(account, 1.0)
        made[c] = (-score, Factors(0, q, age, share, burst, qw * q + aw * age + fw * share - bw * burst + sw * 0.0, 0.0))
    keyed = sorted(zip(map(itemgetter(0), map(made.__getitem__, combos)), map(_submit, rows), map(_id, rows),
                       range(len(rows))))
    order = list(map(itemgetter(3), keyed))
    cells = {c: tuple(x[0] for x in priotable.cells([rows[i]], {rows[i].id: made[c][1]}, w))
             for c, i in dict(zip(combos, range(len(rows)))).items()}     # a job's cells are its own alone
    out, at = [], 0
    for (a, c), run in groupby(zip(map(attrgetter("array_id"), map(rows.__getitem__, order)),
                                   map(combos.__getitem__, order))):
        n = len(list(run))      # one after another, one array's, alike: priotable.lines' one line
        if a is None:
            out += [(keyed[k][:3], keyed[k][:3], (str(keyed[k][2]), *cells[c])) for k in range(at, at + n)]
        else:
            ds = list(map(attrgetter("display_id"), map(rows.__getitem__, order[at:at + n])))
            out.append((keyed[at][:3], keyed[at + n - 1][:3], (", ".join(compact_tasks(a, ds)), *cells[c])))
        at += n
    return out


def _row(i: int, submit: float, cells: list[str]) -> Row:
    """The Row of single job `i` from its published line's cells (JOBID USER ACCOUNT QOS …)."""
    return Row(i, None, str(i), cells[1], cells[2], cells[3], submit)


def _entry(e: str) -> tuple[float, int]:
    s, i, _ = e.split(" ", 2)
    return float(s), int(i)


def _key(s: str) -> tuple[float, float, int]:
    a, b, c = s.split(" ", 3)[:3]
    return float(a), float(b), int(c)


def _last(s: str) -> tuple[float, float, int]:
    a, b, c = s.split(" ")[4:7]
    return float(a), float(b), int(c)


def _flags(subs: list[float], w) -> list[int]:
    """multifactor.burst_columns' flags of one user's jobs in burst order (their submit times): a job
    is in the tail where the one `burst_jobs` before it is `not` earlier than the window before it."""
    a, window = int(w["burst_jobs"]), w["burst_window"]
    if not w["burst_penalty"]:
        return [0] * len(subs)
    if a <= 0:
        return [1] * len(subs)
    tail = map(not_, map(lt, subs, map(sub, subs[a:], repeat(window))))
    return [0] * min(a, len(subs)) + list(map(int, tail))


def _merges(lines: list[str], taken: list[int], jobid: int) -> bool:
    """Whether the lines on either side of a run of taken ones belong to one array and have the same
    cells: priotable.lines would have made them one."""
    gone = set(taken)
    for t in taken:
        a, b = t - 1, t + 1
        while a in gone:
            a -= 1
        while b in gone:
            b += 1
        if a < 0 or b >= len(lines):
            continue
        x, y = lines[a], lines[b]
        if "_" in x[:jobid] and "_" in y[:jobid] and x[:x.index("_")] == y[:y.index("_")] \
                and x[jobid + 2:] == y[jobid + 2:]:
            return True
    return False
