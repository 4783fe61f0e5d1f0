"""A backfill-off pass (backfill_depth 0) walks its queue only up to the job that blocks it.

With backfill off, the first job in priority order that finds no room becomes the pass's blocker
(`_Pass._blocked`), and every later single-node job without an earmark that passes the gates (hold,
--begin, retry backoff, dependencies, caps) is pended "behind" it: that verdict reads nothing of
the job, and judging it changes nothing of the pass. So once the blocker is known and no later job
could change the pass's state (an earmarked job may take its own room, a gang is judged by
gang.py), the rest need no order and no turn: the jobs that pass the gates take the blocker's
verdict as one run, the others (few) are judged on their own, each from the same unchanging state.

The order up to the blocker is drawn lazily. Without the short-job term a job's priority differs
from another's of the same QoS, fair-share account and burst flag only by its age term, which never
decreases with the wait, so within such a group multifactor.ordered's order is (submit time, id); a
merge of the groups by multifactor.ordered's own key gives its order one job at a time (the key is
classes._scorer, the same sum term by term). A deep queue then costs a few cheap walks over its
jobs (grouping, the burst tail), not a sorted key and a verdict per job at every pass.

A job its budget would not admit pends for it before the blocker (fit or not) and changes nothing. A
caller that keeps no reasons' figures (the simulator) gives its Backlog budget floors (budget.Floors):
the walk then passes over a group's next jobs that a budget has no room for by their floors, in O(1)
for a whole group or a scan in C, and pends those before the blocker unquoted (detail UNQUOTED), not
one quote each: a spent budget's deep queue costs a look per group, not a quote per job.

The plan is the one of the whole pass (tests/property/test_plan_strict.py against plan_per_job).
"""
import heapq
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import fields
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from .. import multifactor
from ..jobs import states
from ..jobs.model import Job
from ..jobs.plan import Pending, Place, Verdict
from ..multifactor import Score
from ..settings.config import Config
from . import classes
from .backlog import Backlog, Behind
from .floors import Floors
from .queue import Group, Key

if TYPE_CHECKING:       # the pass is policy/__init__'s, which imports this module
    from . import _Pass

_ID, _SUBMIT_TIME = attrgetter("id"), attrgetter("submit_time")
_DEFAULTS: tuple[Any, ...] = tuple(f.default for f in fields(Pending))


def applies(cfg: Config) -> bool:
    """Whether `run` may decide this pass: backfill off, and no short-job term (which breaks
    submit order within a group)."""
    return cfg.backfill_depth == 0 and not cfg.priority.short_job_weight


def run(p: "_Pass", waiting: list[Job], cfg: Config) -> bool:
    """Consider `waiting` on the pass `p` (a policy._Pass) as the per-job pass would, given
    `applies`; False (and nothing considered) when a waiting job's turn after the blocker could
    change the pass (an earmark: its room is held until its turn; a gang)."""
    w = cfg.priority
    bursting = multifactor.burst_tail(waiting, w.burst_jobs, w.burst_window) if w.burst_penalty else ()
    by_account = bool(w.fairshare_weight)
    # Gated: a job that may meet a gate (hold, --begin, retry backoff, dependencies, a cap) before
    # the blocker's verdict; the rest take that verdict at once (_behind).
    u = p.usage
    capped = u.capped if not u.user_caps else None
    groups: dict[Key, list[Job]] = {}
    for j in waiting:
        if j.earmark or j.nodes > 1:
            return False
        gated = bool(j.held or j.deps or j.begin is not None or j.eligible_time is not None or j.array_throttle
                     or capped is None or j.account in capped)
        k = (j.qos, j.account if by_account else None, j.id in bursting, gated)
        mine = groups.get(k)
        if mine is None:
            groups[k] = [j]
        else:
            mine.append(j)
    keys = list(groups)
    lists = list(groups.values())
    for jobs in lists:
        jobs.sort(key=_ID)              # then stably by submit time: (submit time, id)
        jobs.sort(key=_SUBMIT_TIME)
    score = classes._scorer(p, cfg, bursting)
    at = [0] * len(lists)
    heads = [(score(jobs[0]), i) for i, jobs in enumerate(lists)]
    heapq.heapify(heads)
    while heads and p.blocker is None:
        _, i = heapq.heappop(heads)
        jobs = lists[i]
        p.consider(jobs[at[i]])
        at[i] += 1
        if at[i] < len(jobs):
            heapq.heappush(heads, (score(jobs[at[i]]), i))
    if p.blocker is not None:
        _behind(p, [j for i, jobs in enumerate(lists) if keys[i][3] for j in jobs[at[i]:]],
                [j for i, jobs in enumerate(lists) if not keys[i][3] for j in jobs[at[i]:]])
    return True


def run_kept(p: "_Pass", backlog: Backlog, cfg: Config) -> bool:
    """`run` over the caller's kept Backlog (backlog.py), whose groups are already in order: the
    pass costs the jobs up to the blocker, the gated ones after it, and one slice of ids per group.
    False (nothing considered) where a turn after the blocker could change the pass (an earmark), or
    a short-job term breaks the order. A gang without an earmark is judged on its own, among the
    gated (backlog.gated): past the gates, gang.verdict gives it the blocker's verdict too."""
    if backlog.earmarked or not applies(cfg):
        return False
    now = backlog.jobs          # a group may hold an older record of a job (Backlog.swap): the score
    u = p.usage                 # reads only what both share, a verdict the current one
    capped = u.capped if not u.user_caps else None
    groups = list(backlog.groups.values())
    score = classes._scorer(p, cfg, backlog.bursting)
    at = [0] * len(groups)
    heads = [(score(g.jobs[0]), i) for i, g in enumerate(groups)]
    heapq.heapify(heads)
    _walk(p, groups, at, heads, score, now, _floors(p, backlog, cfg, capped))
    if p.blocker is None:
        return True
    # Nothing is admitted after the blocker, so the usage stays as it is: an account that no job
    # of the backlog could take to a cap now (Usage.tight with the largest needs) caps none of them.
    most = (max(g for g, _ in backlog.needs), max(c for _, c in backlog.needs))
    capping = {a for a in capped if u.tight(a, "", *most)} if capped is not None else None
    gated, plain = [], []
    for i, g in enumerate(groups):
        if at[i] < len(g.jobs):
            if g.key[3] or capping is None or g.key[1] in capping:
                gated += [now[k] for k in g.ids[at[i]:]]
            else:
                plain.append((g, at[i]))
    for j in gated:
        p.consider(j)
    if not plain:
        return True
    g, first = plain[0]
    got = p.judge(now[g.ids[first]])
    if isinstance(got, Place) or got[0] != states.PRIORITY:     # not past a blocker after all: each judged
        if isinstance(got, Place):
            p.places.append(got)
        else:
            p.pending.append(Pending(g.ids[first], *got))
        for i in [i for g, k in plain for i in g.ids[k:]][1:]:
            p.consider(now[i])
        return True
    # The ids behind the blocker, read (slice by slice, in C) only by a caller that asks for them.
    p.runs.append((Behind(backlog, plain), tuple(got) + _DEFAULTS[1 + len(got):]))
    return True


def _walk(p: "_Pass", groups: list[Group], at: list[int], heads: list[tuple[Score, int]], score: Callable[[Job], Score],
          now: dict[int, Job], floors: tuple[Floors, set[Key]] | None) -> None:
    """Judge the groups' jobs in order (a merge of their heads) up to the blocker, and move `at` past
    them. With budget floors (`_floors`), the jobs of a group from its head on that a budget has no
    room for by their floors (Floors.skip) are passed over at once: each pends for that budget at
    its turn if it comes before the blocker (scored before it), and otherwise takes the blocker's
    verdict like any other (budgets and what they leave only shrink along a pass)."""
    out: list[tuple[int, int, int, str]] = []      # (group, first, end, budget reason) passed over
    while heads and p.blocker is None:
        _, i = heapq.heappop(heads)
        g = groups[i]
        if floors is not None and g.key in floors[1]:
            end, why = floors[0].skip(g.key, at[i], p.book)
            if end > at[i]:
                out.append((i, at[i], end, why))
                at[i] = end
                if end < len(g.jobs):
                    heapq.heappush(heads, (score(g.jobs[end]), i))
                continue
        p.consider(now[g.ids[at[i]]])
        at[i] += 1
        if at[i] < len(g.jobs):
            heapq.heappush(heads, (score(g.jobs[at[i]]), i))
    last = score(p.blocker) if p.blocker is not None else None
    for i, first, end, why in out:
        g = groups[i]
        cut = end if last is None else bisect_left(g.jobs, last, first, end, key=score)
        if cut > first:
            p.runs.append((g.ids[first:cut], _priced(why)))
        if cut < end:       # past the blocker: its last stretch, whose end never came up
            at[i] = cut


def _floors(p: "_Pass", backlog: Backlog, cfg: Config, capped: set[str] | None) -> tuple[Floors, set[Key]] | None:
    """The backlog's budget floors and the groups whose jobs they may pend unquoted: a job of such a
    group meets no gate, cap, protected capacity or victims of its own before the budget quote, and
    a budget reason is all a quote that breaks gives it before the blocker (`_Pass._admit`,
    `_blocked`: backfill off, a job its budgets would not admit waits on them, fit or not). None
    where the backlog keeps none (the daemon: its reasons carry each job's figures) or for another
    config or cluster."""
    floors = backlog.floors
    if floors is None or not cfg.budgets or capped is None or p.usage.protected or not floors.fits(cfg, p.snap.nodes):
        return None
    mine = {backlog.where[i] for i in p.draining if i in backlog.where}
    return floors, {k for k in backlog.groups if not k[3] and k[1] not in capped and k not in mine}


# The detail of the jobs pended for a budget by their floors: no quote, so no figures (a caller that
# keeps budget floors, the simulator, keeps no reasons).
UNQUOTED = "a budget of theirs has no room for their forecast now (not quoted: no figures)"


def _priced(why: str) -> Verdict:
    return (why, UNQUOTED, "", ())


def _behind(p: "_Pass", gated: list[Job], plain: list[Job]) -> None:
    """The jobs after the blocker, in any order: nothing they are judged by changes any more.
    `plain`: those that meet no gate, which all take the blocker's verdict."""
    for j in gated:
        p.consider(j)
    if not plain:
        return
    got = p.judge(plain[0])
    if isinstance(got, Place) or got[0] != states.PRIORITY:     # not past a blocker after all: each judged
        if isinstance(got, Place):
            p.places.append(got)
        else:
            p.pending.append(Pending(plain[0].id, *got))
        for j in plain[1:]:
            p.consider(j)
        return
    p.runs.append(([j.id for j in plain], tuple(got) + _DEFAULTS[1 + len(got):]))
