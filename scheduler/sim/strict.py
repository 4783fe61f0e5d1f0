"""A strict-order pass (backfill off, engine `_strict`) given only the part of the queue that decides it.

With `backfill_depth = 0`, no gate but capacity and budgets, nothing preemptible and nothing timed,
plan() starts jobs in its order and nothing past the first that does not fit: that job holds every
later one (a job pended for its budget holds nobody). Each account's jobs are then in submit order
(queue.py), so plan()'s first job is one of the accounts' first jobs. If it does not fit (and is
charged to no budget, or its budget provably admits it: parked.py `admits`) nothing starts;
otherwise a pass over a window that holds the first n jobs decides the same as the whole pass as
soon as fewer than n start or pend for a budget: one of the n stayed pending on capacity, and
nothing after it starts.

Jobs a budget has no room for (parked.py: idle at the start of the pass, or, in one order, priced
out by the window's first admissions) are left out of the window: at their turn they are pended for
their budget and do nothing else. Each would have had its budget reason up to the blocker. So are
the jobs a window's pass pended for their budget (the jobs before them are the same in a wider
window); a wider window with no job the last one lacked is not asked for.
"""
from .. import states
from .room import shape

WINDOW = 4      # pending jobs in the first window; widened ×4 while every one starts or is held by a budget
BUDGET_REASONS = frozenset({states.BUDGET_RESERVED, states.BUDGET_EXHAUSTED})


def plan(sim, t: float):
    """The Plan of the whole pass, or None when provably nothing starts (no pass: counted skipped)."""
    q, idle = sim.queue, sim.idle
    one = q.one_order()
    heads = q.heads(idle)          # (the idle jobs do nothing: the first of the others decides)
    if not sim.room.fits_somewhere([shape(j) for j in heads]) and not any(_may_be_held(sim, j) for j in heads):
        return None          # the first job is one of these, and none fits: it holds every other
    usage = sim._usage(t)
    ranked = q.ranked(heads, t, usage)
    if not sim.room.fits_somewhere([shape(ranked[0])]) and not _may_be_held(sim, ranked[0]):
        return None
    n = WINDOW
    # jobs that do nothing in this pass: those idle for their budget and, in one order, those the
    # budget has no room for after the window's first admissions or that its pass pended for it
    spent: set[int] = set()
    while True:
        window = q.window(n, ranked, idle, spent)
        p = sim._call(t, window, usage)
        held = [pd.job_id for pd in p.pending if pd.reason in BUDGET_REASONS]
        if len(p.places) + len(held) < n or len(window) + len(idle) + len(spent) == len(q):
            break
        n *= 4
        if held and sim.parking is not None and one:
            # Those do nothing in the wider pass either (pended for their budget at their turn, the
            # jobs before them being the same): the next window is the first n of the others.
            placed = {pl.job_id for pl in p.places}
            spent = sim.parking.held_after(p.places).union(held).difference(placed)
            if len(q) - len(idle) - len(spent) == sum(1 for j in window if j.id not in spent):
                break        # and every other job was in this window: its pass decides
    if spent:
        _held_before_blocker(sim, p, window, spent)
    return p


def _may_be_held(sim, job) -> bool:
    """Whether a budget might not admit the job (then, fitting nowhere, it would not hold the queue):
    it is charged to one and its budget's room does not provably cover it (parked.Parking.admits)."""
    return sim.queue.charged(job) and not (sim.parking is not None and sim.parking.admits(job))


def _held_before_blocker(sim, p, window, spent: set[int]) -> None:
    """The jobs left out for their budget would each have been pended for it in the whole pass, up
    to the blocker (the first job of the window neither started nor held by a budget), after which
    every job pends behind it."""
    settled = {pl.job_id for pl in p.places} | {pd.job_id for pd in p.pending if pd.reason in BUDGET_REASONS}
    blocker = next((j.id for j in window if j.id not in settled), None)
    sim.budget_held.update(before(spent, sim.queue.jobs, blocker))


def before(ids, jobs, job_id, key=None) -> list:
    """Those of `ids` that come before the job `job_id` in submit order, or in the order whose sort
    key `key` gives (order.py); all of them without one."""
    if job_id is None:
        return list(ids)
    key = key or (lambda j: (j.submit_time, j.id))
    at = key(jobs[job_id])
    return [i for i in ids if key(jobs[i]) < at]
