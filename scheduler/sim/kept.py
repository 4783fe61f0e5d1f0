"""A backfill-off pass of the replay over the queue kept in order (policy/backlog.py): plan() walks
the jobs up to the blocker and takes every job behind it as one run (policy/strict.py `run_kept`),
so a pass costs what it judges, not the depth of the queue, whatever the priority terms (QoS levels,
fair share, burst tails) make the order. The replay's queue (queue.py) files each job into the Backlog
as it joins, leaves or changes.

Used where no budget is configured (the parked jobs of parked.py stay the window's, strict.py)."""
from dataclasses import replace

from .. import multifactor, policy
from ..jobs.model import Snapshot
from ..jobs.plan import Pendings, pending_runs
from .room import fits_somewhere


def backlog(cfg, parking):
    """A Backlog for the replay, or None where its passes go the other ways."""
    if cfg.backfill_depth != 0 or parking is not None or not policy.strict.applies(cfg):
        return None
    w = cfg.priority
    return policy.Backlog((w.burst_jobs, w.burst_window) if w.burst_penalty else None)


def run(sim, t: float) -> None:
    """The replay's pass at `t`: none where provably nothing starts (counted skipped)."""
    if _stuck_at_head(sim, t):
        sim.skipped += 1
        return
    sim._apply(t, plan(sim, t))


def plan(sim, t: float):
    """The Plan of the whole pass over the queue. The runs of jobs that took a verdict without an
    earmark, where no queued job has one, are left out: applying them changes no record (the replay
    keeps no reasons, engine `_apply`), and reading them would cost the depth of the queue."""
    sim.calls += 1
    snap = Snapshot(now=t, nodes=sim.nodes, jobs=tuple(sim.running.values()), spent=sim.spent_now(t)[1],
                    usage=tuple(sorted(sim._usage(t).items())))
    p = policy.plan(snap, sim.cfg, standing=sim.standing, backlog=sim.queue.backlog)
    if sim.queue.backlog.earmarked:
        return p
    return replace(p, pending=Pendings((), [r for r in pending_runs(p.pending) if len(r[0]) == 1 or r[1][2]]))


def _stuck_at_head(sim, t: float) -> bool:
    """Whether plan()'s first job provably fits nowhere and holds every other: the first job is
    the head of some group (backlog.py), and where no gate but capacity applies, nothing is
    timed, draining or preemptible and no room is earmarked for a preemptor (which takes it past
    any blocker) (engine `_strict`'s conditions, any order; a gang that has no node with its
    per-node shape free cannot start either),
    a first job that fits no node's room blocks the pass and nothing starts."""
    q = sim.queue
    if (not sim.budget_gated_only or q.timed or sim.draining or sim.queue.backlog.earmarked
            or sim.cfg.preemption and sim.preemptible_running):
        return False
    heads = [g.jobs[0] for g in sim.queue.backlog.groups.values()]
    if fits_somewhere(sim.standing.placer.free, heads):
        heads = [min(heads, key=multifactor.scorer(t, sim._usage(t), sim.cfg, sim.queue.backlog.bursting))]
    return not fits_somewhere(sim.standing.placer.free, heads)
