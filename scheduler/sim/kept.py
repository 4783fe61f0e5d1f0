"""A backfill-off pass of the replay over the queue kept in order (policy/backlog.py): plan() walks
the jobs up to the blocker and takes every job behind it as one run (policy/strict.py `run_kept`),
so a pass costs what it judges, not the depth of the queue, whatever the priority terms (QoS levels,
fair share, burst tails) make the order. The replay's queue (queue.py) files each job into the Backlog
as it joins, leaves or changes.

With budgets the Backlog keeps each group's least budget floors (policy/budget.py `Floors`): a group
(or a job) whose budget has no room for even its floor is pended for it unquoted, so a spent budget's
queue costs a look per group, not a quote per job. The replay reads of those verdicts only that a
budget held the job (engine `_apply`), never their figures."""
from dataclasses import replace

from .. import multifactor, policy
from ..jobs.model import Snapshot
from ..jobs.plan import Pendings, pending_runs
from ..policy.budget import BudgetBook
from ..policy.floors import Floors
from .result import BUDGET_REASONS
from .room import fits_somewhere


def backlog(cfg, nodes):
    """A Backlog for the replay, or None where its passes go the other ways (backfill on, short
    jobs first)."""
    if not policy.strict.applies(cfg):
        return None
    w = cfg.priority
    return policy.Backlog((w.burst_jobs, w.burst_window) if w.burst_penalty else None,
                          Floors(cfg, nodes) if cfg.budgets else None)


def run(sim, t: float) -> None:
    """The replay's pass at `t`: none where provably nothing starts (counted skipped)."""
    if _stuck_at_head(sim, t):
        sim.skipped += 1
        return
    sim._apply(t, plan(sim, t))


def plan(sim, t: float):
    """The Plan of the whole pass over the queue. Where no queued job has an earmark, the runs of
    jobs that took a verdict without one are left out: applying them changes no record (the replay
    keeps no reasons, engine `_apply`), and reading them would cost the depth of the queue; of a
    budget reason the replay keeps only who got it (engine `held`)."""
    sim.calls += 1
    snap = Snapshot(now=t, nodes=sim.nodes, jobs=tuple(sim.running.values()), spent=sim.spent_now(t)[1],
                    usage=tuple(sorted(sim._usage(t).items())))
    p = policy.plan(snap, sim.cfg, standing=sim.standing, backlog=sim.queue.backlog)
    return p if sim.queue.backlog.earmarked else quiet(sim, p)


def quiet(sim, p, singles: bool = True):
    """Plan `p` without the runs of jobs pended without an earmark, where no queued job has one:
    applying them changes no record (the replay keeps no reasons, engine `_apply`) and reading them
    would cost the depth of the queue, every pass; of a budget reason the replay keeps only who got
    it (engine `held`). `singles` False: the runs of one job go too (sim/through.py: every class
    judged one by one has one, each then read by the applier to change nothing)."""
    kept = []
    for ids, verdict in pending_runs(p.pending):
        if verdict[0] in BUDGET_REASONS:
            sim.held(ids)
        elif (singles and len(ids) == 1) or verdict[2]:
            kept.append((ids, verdict))
    return replace(p, pending=Pendings((), kept))


def _stuck_at_head(sim, t: float) -> bool:
    """Whether plan()'s first job provably fits nowhere and holds every other: the first job is
    the head of some group (backlog.py), and where no gate but capacity applies, nothing is
    timed, draining or preemptible and no room is earmarked for a preemptor (which takes it past
    any blocker), a first job that fits no node's room and is charged to no budget (which might
    pend it and go on), or one its budgets provably admit, blocks the pass: nothing starts. With
    budgets the walk first passes over whole groups a budget has no room for by their floors
    (budget floors, policy/strict.py), which change nothing where every job of theirs was counted
    held already: the first job is then the head of the groups after those."""
    q = sim.queue
    if (not sim.budget_gated_only or q.timed or sim.draining or q.backlog.earmarked
            or sim.cfg.preemption and sim.preemptible_running):
        return False
    free, backlog = sim.standing.placer.free, q.backlog
    heads = [g.jobs[0] for g in backlog.groups.values()]
    if not q.budgeted:
        if fits_somewhere(free, heads):
            heads = [min(heads, key=multifactor.scorer(t, sim._usage(t), sim.cfg, backlog.bursting))]
        return not fits_somewhere(free, heads)
    book = None
    passed: set[tuple] = set()
    score = multifactor.scorer(t, sim._usage(t), sim.cfg, backlog.bursting)
    for head in sorted(heads, key=score):
        if fits_somewhere(free, [head]):
            return False
        if not q.charged(head) or backlog.floors.admitted([head], book := book or _book(sim, t)):
            # the blocker: the jobs passed over before it (scored before it) pend for their budget
            return not _fresh_before(sim, passed, score, score(head))
        g = backlog.groups[backlog.where[head.id]]
        if g.key[3] or backlog.floors.skip(g.key, 0, book)[0] < len(g.jobs):
            return False
        passed.add(g.key)
    return not _fresh_before(sim, passed, score, None)     # every group passed over


def _fresh_before(sim, passed: set, score, last) -> bool:
    """Whether a job of the groups `passed` over, scored before `last` (any, None), was never counted held."""
    where, jobs = sim.queue.backlog.where, sim.queue.jobs
    return any(where.get(i) in passed and (last is None or score(jobs[i]) < last) for i in sim.fresh)


def _book(sim, t: float) -> BudgetBook:
    return BudgetBook(sim.cfg, sim.spent_now(t)[0], list(sim.running.values()), t)


def admitted(sim, t: float, jobs) -> bool:
    """Whether the budgets provably admit every one of these pending jobs at `t` (budget.Floors.admitted):
    no pass now gives any of them a budget reason."""
    return sim.queue.backlog.floors.admitted(jobs, _book(sim, t))
