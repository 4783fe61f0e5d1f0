"""`labq prio`'s text: the weights line and the table of pending jobs in the order a pass considers
them, with each factor's weighted part. The client renders it (cli/prio.py) from the `stat` rows; the
scheduler renders the same text from its own table on a quiet pass and publishes it (`Keys.ranking`,
daemon/ranking.py), which a plain `labq prio` then prints instead of ranking 10,000 jobs itself
(issue 39 item 4; docs/internals.md "The published ranking").

Needs no model: the thin client imports it. The jobs are anything with id, array_id, display_id,
user, account, qos and submit_time (model.Job, cli/prio.Pending)."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from itertools import compress, repeat
from math import copysign
from operator import attrgetter, lt, mul, not_

from .tables import columns, compact_ids

TYPE_CHECKING = False   # typing's import costs `labq prio` ~3-4 ms (multifactor.py); mypy reads the name alike
if TYPE_CHECKING:
    from typing import Any

    from . import multifactor
    from .settings.config import Config

HEADERS = ("JOBID", "USER", "ACCOUNT", "QOS", "PRIORITY", "QOS", "AGE", "FAIRSHARE", "BURST")
SHORT = "SHORT"      # the short-job factor's part: a column only where priority.short_job_weight is set
WEIGHTS = ("qos_weight", "age_weight", "fairshare_weight", "burst_penalty", "short_job_weight")
# what the weights line names beyond WEIGHTS
SCALES = ("age_max", "short_job_scale")
_id, _user, _account, _qos, _submit = map(attrgetter, ("id", "user", "account", "qos", "submit_time"))


class Weights(dict):  # type: ignore[type-arg]
    """The config's [priority] table as the client settings cache keeps it (clientcache.books): its
    values by name and as attributes, as sections.Priority gives them. The attributes are the dict
    itself (its __dict__), not a __getattr__: multifactor.factors reads five of them per pending job,
    and a Python-level __getattr__ was a fifth of `labq prio` at 10,000 jobs."""

    def __init__(self, table: Mapping[str, Any]):
        super().__init__(table)
        self.__dict__ = self


def weights_line(w: Mapping[str, Any]) -> str:
    return (f"weights: qos {w['qos_weight']:g}, age {w['age_weight']:g} (age_max {w['age_max']:.0f}s), "
            f"fairshare {w['fairshare_weight']:g}, burst penalty {w['burst_penalty']:g}"
            + (f", short jobs {w['short_job_weight']:g} (scale {w['short_job_scale']:.0f}s)"
               if w["short_job_weight"] else ""))


def rank(pending: Sequence[Any], now: float, usage: Mapping[str, float], cfg: Config,
         cols: tuple[Sequence[int], Sequence[str], Sequence[str], Sequence[str], Sequence[float]] | None = None,
         keys: list[Any] | None = None) -> tuple[list[Any], dict[int, multifactor.Factors]]:
    """(`pending` in the order a pass considers them, their factors by id): multifactor.ranked over
    their columns (ids, users, accounts, QoS names, submit times: `cols`, else taken from the jobs),
    no Python code per job; multifactor.ordered and factors where it declines (the short-job term).
    `keys`: multifactor.ranked's sort keys, where it ranked (left empty where it declined)."""
    from . import multifactor  # here: a published ranking's `labq prio` ranks nothing (~0.6 ms of imports)
    if cols is None:
        cols = (list(map(_id, pending)), list(map(_user, pending)), list(map(_account, pending)),
                list(map(_qos, pending)), list(map(_submit, pending)))
    ids, users, accounts, qoses, submits = cols
    fast = multifactor.ranked(ids, users, accounts, qoses, submits, now, dict(usage), cfg, keys) if pending else None
    if fast:
        order, f = fast
        return list(map(pending.__getitem__, order)), f
    return (multifactor.ordered(pending, now, dict(usage), cfg), multifactor.factors(pending, now, dict(usage), cfg))


def text(pending: Sequence[Any], now: float, usage: Mapping[str, float], cfg: Config) -> str:
    """What a plain `labq prio` prints of `pending` at `now` (`usage`: each account's decayed usage,
    running jobs included): the weights line and the table."""
    order, f = rank(pending, now, usage, cfg)
    w = weights_of(cfg)
    return weights_line(w) + "\n" + table(order, f, w, False)


def weights_of(cfg: Config) -> Weights:
    return Weights({k: getattr(cfg.priority, k) for k in WEIGHTS + SCALES})


def table(shown: Sequence[Any], f: Mapping[int, multifactor.Factors], w: Mapping[str, Any], expand: bool) -> str:
    """The rows of `shown` (`f`: their factors) laid out (lines)."""
    ids, cols, headers, _ = lines(shown, f, w, expand)
    return columns([ids, *cols], headers)


def lines(shown: Sequence[Any], f: Mapping[int, multifactor.Factors], w: Mapping[str, Any], expand: bool
          ) -> tuple[list[str], list[list[str]], tuple[str, ...], list[list[int]] | None]:
    """(the JOBID cells, the other columns' cells, the headers, the places in `shown` of each line's
    jobs, None where each line is one job): one line a job but for an array's tasks with the same
    factors one after another, which share one `42_[5-9000]` line (-r: each its own). At 10,000
    pending jobs every line is formatted, column by column in C: a float's text costs ~0.5 µs, so the
    columns with few distinct values (QoS, fair share, burst) format each value once."""
    cols = cells(shown, f, w)
    headers = HEADERS + ((SHORT,) if w["short_job_weight"] else ())
    if not any(map(attrgetter("array_id"), shown)):
        return list(map(str, map(attrgetter("id"), shown))), cols, headers, None
    rows: list[tuple[Any, tuple[str, ...]]] = []
    members: list[list[int]] = []
    for k, (j, row) in enumerate(zip(shown, zip(*cols))):
        if j.array_id is None:
            rows.append((str(j.id), row))
            members.append([k])
        elif not expand and rows and rows[-1][1] == row and type(rows[-1][0]) is list \
                and rows[-1][0][-1].startswith(f"{j.array_id}_"):
            rows[-1][0].append(j.display_id)
            members[-1].append(k)
        else:
            rows.append(([j.display_id], row))
            members.append([k])
    ids = [i if type(i) is str else ", ".join(compact_ids(i)) for i, _ in rows]
    return ids, [list(c) for c in zip(*(r for _, r in rows))] if rows else [[] for _ in cols], headers, members


def cells(shown: Sequence[Any], f: Mapping[int, Any], w: Mapping[str, Any]) -> list[list[str]]:
    """The cells of `shown` but JOBID, column by column (each job's row alike whatever the others are)."""
    qw, aw, fw, bp, sw = (w[k] for k in WEIGHTS)
    xs = list(map(f.__getitem__, map(attrgetter("id"), shown)))
    two = "{:.2f}".format

    def part(weight: float, name: str) -> list[float]:     # weight × each job's factor `name`, by map
        return list(map(mul, repeat(weight), map(attrgetter(name), xs)))
    cols = [list(map(attrgetter(a), shown)) for a in ("user", "account", "qos")] + [
        list(map(two, map(attrgetter("priority"), xs))), each(part(qw, "qos"), two),
        list(map(two, part(aw, "age"))), each(part(fw, "fairshare"), two),
        each(list(map(attrgetter("burst"), xs)), lambda b: f"-{bp * b:.2f}" if b else "0")]
    if sw:
        cols.append(list(map(two, part(sw, "short"))))
    return cols


def each(values: list[Any], fmt: Callable[[Any], str]) -> list[str]:
    """fmt of each value, each distinct value formatted once; a zero each time where some zero is
    -0.0 (0.0 and -0.0 are one key of a dict, and may print apart)."""
    d = {v: fmt(v) for v in set(values)}
    if 0.0 in d and fmt(0.0) != fmt(-0.0) and any(map(lt, map(copysign, repeat(1.0),
                                                                  compress(values, map(not_, values))), repeat(0.0))):
        return [d[v] if v else fmt(v) for v in values]
    if 0.0 in d:
        d[0.0] = fmt(0.0)       # the key may be a -0.0 that fmt prints alike
    return list(map(d.__getitem__, values))

