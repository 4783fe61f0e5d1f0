"""What plan() keeps from pass to pass for a caller that plans one changing queue again and again
(the daemon): the last snapshot's jobs (seen.py), to find what changed; the request-class Queue
(queue.py) that the class walk reads, filed from those changes, and, for a pass that
walks only to the blocker (backfill off: strict.py `run_kept`), the Backlog (backlog.py) of the
pending jobs in plan()'s order; the running jobs' free capacity and quota usage (standing.py),
counted from the starts and ends that Seen found, as the simulator counts them; and the running
jobs' backfill timelines (tracks.py), repaired by the pass that reserves. `inputs` files what changed since the last pass and says which of the
first two plan() takes; the plan is the same as without any (tests/property/test_plan_classes.py).

The simulator keeps its Backlog itself, job by job as its queue changes (sim/kept.py); a caller
that holds only snapshots (the daemon) has its changes found here, by identity: a record is
frozen, so a changed job is a new object."""
from collections.abc import Iterable
from typing import TypedDict

from ..jobs.model import Job, Snapshot
from ..settings.config import Config
from . import strict
from .backlog import Backlog
from .queue import Queue
from .seen import Seen, Told
from .standing import Standing
from .tracks import Tracks


class Inputs(TypedDict, total=False):
    """plan()'s keyword arguments that Kept.inputs gives (typed, so that `plan(**inputs)` is checked)."""
    backlog: Backlog
    queue: Queue
    tracks: Tracks
    seen: Seen
    standing: Standing


def _order(j: Job) -> tuple[float, int]:
    return (j.submit_time, j.id)


class Kept:
    def __init__(self) -> None:
        self.queue = Queue()
        self.backlog: Backlog | None = None
        self.seen = Seen()
        self.tracks = Tracks(self.seen)
        self.standing: Standing | None = None
        self.synced = -1        # Seen.n of the snapshot the backlog holds the pending jobs of

    def inputs(self, snap: Snapshot, cfg: Config, told: Told | None = None) -> Inputs:
        """plan()'s keyword arguments for `snap`: `backlog=` where its walk applies, else `queue=`;
        `seen=`, what changed since the last snapshot (seen.py), found, or `told` (Seen.tell's
        arguments but the jobs: the daemon's pass, state.SchedulerState.pass_snapshot)."""
        if told is None:
            self.seen.see(snap.jobs)
        else:
            self.seen.tell(snap.jobs, *told)
        standing = self._standing(snap, cfg)
        if not strict.applies(cfg):
            self.backlog = None         # a later pass that walks to the blocker files it anew
            return {"queue": self.queue, "tracks": self.tracks, "seen": self.seen, "standing": standing}
        w = cfg.priority
        burst = (w.burst_jobs, w.burst_window) if w.burst_penalty else None
        if self.backlog is None or self.backlog.burst != burst:
            self.backlog = Backlog(burst)
            self.synced = -1
        if self.synced == self.seen.n - 1:      # it holds the last snapshot's: what changed since
            refile(self.backlog, self.seen.changed, self.seen.gone)
        elif self.synced != self.seen.n:
            sync(self.backlog, list(self.seen.pending.values()))
        self.synced = self.seen.n
        return {"backlog": self.backlog, "queue": self.queue, "tracks": self.tracks, "seen": self.seen,
                "standing": standing}

    def _standing(self, snap: Snapshot, cfg: Config) -> Standing:
        """The running jobs' count, moved by what ended and started since the last snapshot (ends
        first: a replaced record's old self leaves before its new one comes); counted whole again
        when the nodes or the config changed (Standing.stands)."""
        s = self.standing
        if s is not None and s.stands(snap.nodes, cfg, snap.now):
            for j in self.seen.left:
                s.end(j)
            for j in self.seen.came:
                s.start(j)
            return s
        s = self.standing = Standing(snap.nodes, cfg, snap.now)
        for j in self.seen.running:
            s.start(j)
        return s


def refile(backlog: Backlog, changed: list[Job], gone: Iterable[int]) -> None:
    """`sync` from what changed since the pending jobs `backlog` holds: the records new or replaced
    and the ids gone (a Seen's): a pass costs its changes, not the depth of the queue (a 100,000-job
    backfill-off pass was ~100 ms of this check against every pending job)."""
    known = backlog.jobs
    for i in gone:
        if i in known:
            backlog.remove(i)
    changed = [j for j in changed if known.get(j.id) is not j and not backlog.swap(j)]
    for j in changed:
        if j.id in known:
            backlog.remove(j.id)
    for j in sorted(changed, key=_order):
        backlog.add(j)


def sync(backlog: Backlog, pending: list[Job]) -> None:
    """Make `backlog` hold exactly `pending`: the gone and changed jobs out, the new and changed in
    (in (submit time, id) order, so that each lands at the end of its user's and group's lists)."""
    known = backlog.jobs
    changed = [j for j in pending if known.get(j.id) is not j and not backlog.swap(j)]
    new = sum(1 for j in changed if j.id not in known)
    if len(known) + new != len(pending):
        here = {j.id for j in pending}
        for i in [i for i in known if i not in here]:
            backlog.remove(i)
    for j in changed:
        if j.id in known:
            backlog.remove(j.id)
    for j in sorted(changed, key=_order):
        backlog.add(j)
