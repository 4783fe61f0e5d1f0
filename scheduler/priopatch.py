"""The published ranking patched with one user's own changes (issue 39 item 4): a user whose jobs
changed since the leader's last ranking (daemon/ranking.py) gets that ranking with their changed jobs
moved to where they now rank, as of its time, instead of ranking 10,000 rows themselves (~3x a
`labq sub`); everyone else's lines are printed as published.

The leader publishes beside the text an index (`render`, Keys.ranking_index): its parameters (the
QoS priorities, each account's fair-share factor, the weights, how many cells of each column are as
wide as the column), each line's sort key (-score, submit time, id: of its first and last job) and,
per user, their pending jobs in burst order (submit time, id) with each one's line and burst flag.
The commits after it list each user's changed job ids (store/ranking.py). `patch` then takes the
user's jobs out of that order and puts the changed ones back as their `stat` rows now say, finds
which of their other jobs' burst flags flip (the tail of a burst is a user's own), renders those
rows with the very code and floats multifactor.ranked and priotable use, and puts each line at its
sort key among the published lines. The result is the text the leader would have rendered at its
time had the user's jobs been as they are now (tests/property/test_prio_patch.py).

It declines (None: `prio` ranks the rows) where a line of the user's that moves belongs to an array
(its tasks share lines), where a line taken out leaves two lines of one array that would merge, where
a new key falls inside an array's line, and where a column's width would change: each rare for a
user's own submits and cancels of single jobs. No index is published where the short-job term is on
or the age weight is negative (multifactor.ranked declines those: the order is then Python's per job).

Needs no model: the thin client imports it."""
from __future__ import annotations

import json
from bisect import bisect_left, bisect_right
from collections import Counter, namedtuple
from collections.abc import Mapping, Sequence
from itertools import groupby, repeat
from operator import attrgetter, itemgetter, lt, not_, sub

from . import priotable
from .tables import columns

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from .settings.config import Config

HEAD = ""           # the index's field of the parameters and the lines' keys (no user is named "")
Row = namedtuple("Row", "id array_id display_id user account qos submit_time")
Factors = namedtuple("Factors", "job_id qos age fairshare burst priority short")   # multifactor.Factors' fields


def render(pending: Sequence[Any], now: float, usage: Mapping[str, float], cfg: Config) -> tuple[str, dict[str, str]]:
    """(priotable.text of `pending` at `now`, the index's fields: {} where multifactor.ranked declined;
    an empty queue's too, so that the first submits after it are patched in)."""
    keys: list = []
    order, f = priotable.rank(pending, now, usage, cfg, None, keys)
    w = priotable.weights_of(cfg)
    ids, cols, headers, members = priotable.lines(order, f, w, False)
    text = priotable.weights_line(w) + "\n" + columns([ids, *cols], headers)
    from .multifactor import by_columns
    if not keys and (pending or not by_columns(cfg)):     # ranked declined (the short-job term, a negative
        return text, {}         # age weight): the patch cannot render those terms
    return text, index(order, f, keys, [ids, *cols], headers, members, cfg, usage, now)


def index(order, f, keys: list, cols: list[list[str]], headers: Sequence[str], members, cfg: Config,
          usage: Mapping[str, float], now: float) -> dict[str, str]:
    """The index's fields (above) of the table `cols` of `order`: `keys` multifactor.ranked's sort
    keys in that order, `members` priotable.lines'."""
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
    by_user = sorted(zip(map(_user, order), map(_submit, order), map(itemgetter(2), keys), line_of, bursts))
    out = {HEAD: json.dumps(head) + "\n" + "\n".join(lines)}
    for user, jobs in groupby(by_user, itemgetter(0)):
        out[user] = "\n".join(map("%r %d %d %d".__mod__, map(itemgetter(1, 2, 3, 4), jobs)))
    return out


_user, _submit = attrgetter("user"), attrgetter("submit_time")


def patch(text: str, head: str, entries: str, changed: Sequence[tuple[int, float]], rows: Sequence[Any], user: str
          ) -> str | None:
    """The published `text` (weights line, table) with `user`'s jobs as they are now: `head` the
    index's HEAD field, `entries` the user's field, `changed` the (id, submit time) of each job of theirs the commits since listed, `rows`
    the pending ones of those as their `stat` rows give them now (cli/prio.Pending). None where it
    declines (above)."""
    meta, _, keytext = head.partition("\n")
    h = json.loads(meta)
    w = priotable.Weights(h["w"])
    if w["short_job_weight"] or w["age_weight"] < 0:
        return None         # an index published with those terms on (by 797fe82's leader): not patched
    weights, header, *lines = text.split("\n")
    keys = keytext.split("\n") if keytext else []
    mine = [r for r in rows if r.user == user]
    if len(keys) != len(lines) or any(r.array_id is not None for r in mine):
        return None
    names = header.split()
    starts = [0]
    for name in names[1:]:
        starts.append(header.index(name, starts[-1] + len(names[len(starts) - 1])))
    widths = [b - a - 2 for a, b in zip(starts, starts[1:])]
    taken, news = _moved(entries, changed, mine, w)
    cells: dict[int, list[str]] = {t: lines[t].split() for t in taken}
    if any("_" in c[0] for c in cells.values()) or _merges(lines, taken, widths[0]):
        return None
    rows_: list[tuple[Any, int]] = [(r if r is not None else _row(i, s, cells[line or 0]), flag)
                                    for i, s, line, r, flag in news]
    lens = [Counter({int(n): c for n, c in x.items()}) for x in h["lens"]]
    for c in cells.values():
        lens = [x - Counter({len(v): 1}) for x, v in zip(lens, c)]
    made = _lines(rows_, h, w, float(h["at"]))
    for _, cs in made:
        lens = [x + Counter({len(v): 1}) for x, v in zip(lens, cs)]
    wide = [max(max(x, default=0), len(name)) for x, name in zip(lens, names)]
    out: list[str | None] = list(lines)
    for t in taken:
        out[t] = None
    inserts = []
    fmt = "  ".join([*(f"%-{x}s" for x in wide), "%s"])
    for key, cs in made:
        at = bisect_right(keys, key, key=_key)
        if at and keys[at - 1].count(" ") > 3 and _last(keys[at - 1]) > key:
            return None     # inside an array's line
        inserts.append((at, key, (fmt % cs).rstrip()))
    if wide != widths:
        out, header = _widen(out, starts, widths, wide), _widen([header], starts, widths, wide)[0]
    for at, _, line in sorted(inserts, reverse=True):
        out.insert(at, line)
    return "\n".join([weights, header, *filter(None, out)])


def _moved(entries: str, changed: Sequence[tuple[int, float]], mine: list[Any], w: Mapping[str, Any]
           ) -> tuple[list[int], list[tuple[int, float, int | None, Any, int]]]:
    """(the lines of the user's jobs that move, (id, submit, the line its cells are taken from or
    None, the Row or None, burst flag) of each job to put back): their changed jobs (`changed`: (id, submit
    time)), and the others whose burst flag flips. Only the entries about each change are read: a
    job's flag depends on the job `burst_jobs` before it in burst order, so a change moves the flags
    of the jobs up to that far after it alone (nearby changes are taken together)."""
    es = entries.split("\n") if entries else []
    n, a = len(es), int(w["burst_jobs"])
    at = [bisect_left(es, (s, i), key=_entry) for i, s in changed]
    gone = {k for k, (i, s) in zip(at, changed) if k < n and _entry(es[k]) == (s, i)}
    new = sorted(((r.submit_time, r.id), r) for r in mine)
    points = sorted(gone | {bisect_left(es, k, key=_entry) for k, _ in new})
    reach = a + 2 if w["burst_penalty"] and a > 0 else 1   # flags that can flip: none without a burst rule
    spans: list[list[int]] = []
    for c in points:
        if spans and c - reach <= spans[-1][1]:
            spans[-1][1] = c + reach
        else:
            spans.append([max(c - reach, 0), c + reach])
    taken: list[int] = []
    news: list[tuple[int, float, int | None, Any, int]] = []
    for lo, hi in spans:
        hi = min(hi, n)
        olds = [(*_entry(es[j]), j) for j in range(lo, hi) if j not in gone]
        adds = [(k[0], k[1], r) for k, r in new if lo <= bisect_left(es, k, key=_entry) <= hi]
        local = sorted([(s, i, j, None) for s, i, j in olds] + [(s, i, -1, r) for s, i, r in adds],
                       key=itemgetter(0, 1))
        flags = _flags(list(map(itemgetter(0), local)), w)
        for m, ((s, i, j, r), flag) in enumerate(zip(local, flags)):
            if r is not None:
                news.append((i, s, None, Row(r.id, None, str(r.id), r.user, r.account, r.qos, r.submit_time), flag))
            elif (lo == 0 or m >= a) and flag != int(es[j].rsplit(" ", 1)[1]):
                line = int(es[j].split(" ")[2])
                taken.append(line)
                news.append((i, s, line, None, flag))
    for k in gone:
        taken.append(int(es[k].split(" ")[2]))
    return sorted(set(taken)), news


def _widen(lines: list, starts: list[int], widths: list[int], wide: list[int]) -> list:
    """`lines` laid out again from `widths` to `wide`: each column that changes gains or loses spaces
    at its end, the last first (the earlier columns' places stay), by C loops over the lines."""
    for c in reversed(range(len(widths))):
        d = wide[c] - widths[c]
        if not d:
            continue
        end = starts[c] + widths[c]
        if d > 0:
            pad = " " * d
            lines = [x and x[:end] + pad + x[end:] for x in lines]
        else:
            lines = [x and x[:end + d] + x[end:] for x in lines]
    return lines


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


def _lines(news, h: dict, w, at: float) -> list[tuple[tuple[float, float, int], tuple[str, ...]]]:
    """(sort key, cells) of each of `news` ((Row, burst flag)) at `at`: multifactor.ranked's
    factors and sort key, the same floats in the same order, and priotable's cells."""
    if not news:
        return []
    qw, aw, fw, bw, sw = (w[k] for k in priotable.WEIGHTS)
    age_max = w["age_max"] or 1
    per_s = aw / age_max
    qos, fs = h["qos"], h["fs"]
    qos_o, fs_o = {q: p * qw for q, p in qos.items()}, {a: fw * v for a, v in fs.items()}
    f, keys = {}, []
    for r, flag in news:
        wait = at - r.submit_time
        score = qos_o.get(r.qos, 0.0) + min(max(wait, 0.0) * per_s, aw) + fs_o.get(r.account, fw)
        burst = 1.0 if flag else 0.0
        if flag:
            score = score - bw * burst
        q, age, share = qos.get(r.qos, 0.0), min(max(wait, 0.0) / age_max, 1.0), fs.get(r.account, 1.0)
        f[r.id] = Factors(r.id, q, age, share, burst, qw * q + aw * age + fw * share - bw * burst + sw * 0.0, 0.0)
        keys.append((-score, r.submit_time, r.id))
    cols = priotable.cells([r for r, _ in news], f, w)
    return [(key, (r.display_id, *c)) for key, (r, _), c in zip(keys, news, zip(*cols))]


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
