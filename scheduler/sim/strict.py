"""A strict-order pass of a replay with budgets (backfill off, engine `_strict`; without budgets the
replay walks the kept queue instead, kept.py) given only the part of the queue that decides it.

With `backfill_depth = 0`, no gate but capacity and budgets, nothing preemptible and nothing timed,
plan() starts jobs in its order and nothing past the first that does not fit: that job holds every
later one (a job pended for its budget holds nobody). Each account's jobs are then in submit order
(queue.py), so plan()'s first job is one of the accounts' first jobs. If it does not fit (and is
charged to no budget, or its budget provably admits it: parked.py `admits`) nothing starts;
otherwise a pass over a window that holds the first n jobs decides the same as the whole pass as
soon as fewer than n start or pend for a budget: one of the n stayed pending on capacity, and
nothing after it starts.

Jobs a budget has no room for (parked.py: idle at the start of the pass, or priced out by the
admissions among a window's first n jobs in plan()'s order, which are every wider window's first n
and decided alike there) are left out of the next window: at their turn they are pended for their
budget and do nothing else. Each would have had its budget reason up to the blocker. So are the
jobs among those n that the window's pass pended for their budget; a wider window with no job the
last one lacked is not asked for. Under fair share an account's first job may be among them: the
next window is drawn from the heads that are left. (Only the first n count: a later admission may
land elsewhere, at another rate, once a wider window puts other jobs before it.)
"""
from itertools import takewhile

from ..jobs import states
from .room import fits_somewhere

WINDOW = 4      # pending jobs in the first window; widened ×4 while every one starts or is held by a budget
# A first job charged to a budget gets a window of its own when that budget is every queued job's and
# its room likely admits this job alone (a spent budget, as each end settles below its forecast:
# Parking.room_for_one): the rest are left out once it is in.
BUDGET_REASONS = frozenset({states.BUDGET_RESERVED, states.BUDGET_EXHAUSTED})


def plan(sim, t: float):
    """The Plan of the whole pass, or None when provably nothing starts (no pass: counted skipped)."""
    q, idle = sim.queue, sim.idle
    one = q.one_order()
    heads = q.heads(idle)          # (the idle jobs do nothing: the first of the others decides)
    free = sim.standing.placer.free
    if not fits_somewhere(free, heads) and not any(_may_be_held(sim, j) for j in heads):
        return None          # the first job is one of these, and none fits: it holds every other
    usage = sim._usage(t)
    ranked = q.ranked(heads, t, usage)
    if not fits_somewhere(free, ranked[:1]) and not _may_be_held(sim, ranked[0]):
        return None
    n = 1 if sim.parking is not None and sim.parking.room_for_one(ranked[0], len(q)) else WINDOW
    # jobs that do nothing in this pass: those idle for their budget and those the budget has no
    # room for after the admissions among a window's first n jobs, or that its pass pended for it
    # (asked after any admission: a window where every job starts may still price out the rest)
    spent: set[int] = set()
    while True:
        window = q.window(n, ranked, idle, spent)
        p = sim._call(t, window, usage)
        held = [pd.job_id for pd in p.pending if pd.reason in BUDGET_REASONS]
        if len(p.places) + len(held) < n or len(window) + len(idle) + len(spent) == len(q):
            break
        if sim.parking is not None and (held or p.places):
            spent |= _held_in_wider(sim, p, window if one else q.ranked(window, t, usage)[:n], held)
            if len(q) - len(idle) - len(spent) == sum(1 for j in window if j.id not in spent):
                break        # and every other job was in this window: its pass decides
            if not one:      # an account's first job may be among them: its next one heads it
                ranked = q.ranked(q.heads(idle, spent), t, usage)
        n *= 4
    if spent:
        _held_before_blocker(sim, p, t, window, spent, None if one else usage)
    return p


def _held_in_wider(sim, p, first, held) -> set[int]:
    """The jobs of a window's pass `p` that do nothing in a pass over any wider window: `first` are
    the window's first n jobs in plan()'s order, the first n of every wider window too, decided
    alike there (a strict pass decides each job from the jobs before it). Their admissions come
    before every other job, so a job the budget has no room for after them (parked.py `held_after`)
    is pended for it at its turn; so are those of them the pass pended for it."""
    ids = {j.id for j in first}
    placed = {pl.job_id for pl in p.places}
    spent = sim.parking.held_after([pl for pl in p.places if pl.job_id in ids])
    spent.update(i for i in held if i in ids)
    return spent.difference(placed)


def _may_be_held(sim, job) -> bool:
    """Whether a budget might not admit the job (then, fitting nowhere, it would not hold the queue):
    it is charged to one and its budget's room does not provably cover it (parked.Parking.admits)."""
    return sim.queue.charged(job) and not (sim.parking is not None and sim.parking.admits(job))


def _held_before_blocker(sim, p, t: float, window, spent: set[int], usage: dict | None) -> None:
    """The jobs left out for their budget would each have been pended for it in the whole pass, up
    to the blocker (the first job of the `window`, in plan()'s order, neither started nor held by a
    budget), after which every job pends behind it. `usage`: fair share's, when plan()'s order is
    not submit order (the window is then ranked here)."""
    spent = spent.difference(sim.budget_held)      # (a set: those counted at an earlier pass are)
    if not spent:
        return
    settled = {pl.job_id for pl in p.places} | {pd.job_id for pd in p.pending if pd.reason in BUDGET_REASONS}
    ordered = window if usage is None else sim.queue.ranked(window, t, usage)
    blocker = next((j.id for j in ordered if j.id not in settled), None)
    jobs = sim.queue.jobs
    if usage is None or blocker is None:
        sim.budget_held.update(before(spent, jobs, blocker))
        return
    order = sim.queue.ranked([jobs[blocker], *(jobs[i] for i in spent)], t, usage)
    sim.budget_held.update(j.id for j in takewhile(lambda j: j.id != blocker, order))


def before(ids, jobs, job_id, key=None) -> list:
    """Those of `ids` that come before the job `job_id` in submit order, or in the order whose sort
    key `key` gives (order.py); all of them without one."""
    if job_id is None:
        return list(ids)
    key = key or (lambda j: (j.submit_time, j.id))
    at = key(jobs[job_id])
    return [i for i in ids if key(jobs[i]) < at]
