"""A replay's pass through plan() with the state the daemon keeps between its passes (policy/kept.py's
parts): the request-class Queue, the backfill Tracks and what changed since the last pass (a Seen),
beside the replay's own Standing. No shortcut of the replay's own (easy.py's head, idle.py's budget
idlers) decides anything here: the pass is plan()'s, as the daemon runs it, and plan() gives the
same plan as over the whole queue afresh (tests/property/test_sim_through.py against `skip=False`).

The daemon's snapshot lists its jobs dict in order, a record replaced in place when it changes, ended
ones leaving and new ones coming at the end; the replay keeps `active` the same way, and tells the
Seen which ids it put or took out since the last pass (`Seen.tell`: what `see` would find by comparing
every job, at the cost of the changes)."""
from itertools import count
from typing import cast

from .. import policy
from ..jobs.model import Job, Snapshot
from ..policy.queue import Queue
from ..policy.seen import Seen
from . import kept


class Through:
    def __init__(self) -> None:
        self.active: dict[int, Job] = {}      # the queued and running jobs, as the daemon's st.jobs
        self.queue = Queue()
        self.seen = Seen()
        self.touched: set[int] = set()      # ids put or taken out since the last pass
        self.places: dict[int, int] = {}    # id -> its place in `active`'s order (a new id's is the last)
        self.next = count()

    def put(self, job: Job) -> None:
        """The job's present record (in its old place, or at the end when new)."""
        if job.id not in self.active:
            self.places[job.id] = next(self.next)
        self.active[job.id] = job
        self.touched.add(job.id)

    def leave(self, job_id: int) -> None:
        if self.active.pop(job_id, None) is not None:
            del self.places[job_id]
            self.touched.add(job_id)

    def _place(self, job: Job) -> int:
        return self.places[job.id]

    def plan(self, sim, t: float):
        """plan() over every queued and running job, given the kept state."""
        sim.calls += 1
        # A view, not a tuple: the pass reads the jobs one by one only where a pending job has dependencies
        # (depend.py; the Seen is told the changes), and a tuple of a deep queue's ~15,000 jobs a pass was
        # ~6 % of the 20,000-job drain. `active` changes only between passes.
        jobs = cast(tuple[Job, ...], self.active.values())
        snap = Snapshot(now=t, nodes=sim.nodes, jobs=jobs, spent=sim.spent_now(t)[1],
                        usage=tuple(sorted(sim._usage(t).items())))
        self.seen.tell(jobs, self.touched, self.active, self._place)
        self.touched = set()
        held = sim.budget_idle.known(t, sim.attempts) if sim.budget_idle is not None else None
        p = policy.plan(snap, sim.cfg, held=held, standing=sim.standing, tracks=sim.tracks, queue=self.queue,
                        seen=self.seen, quiet=True)
        # No queued job has an earmark: the runs pended without one change no record (kept.quiet),
        # those of one job included (~950k applier reads at 5k jobs learned on 64 GPUs otherwise).
        return p if any(j.earmark for j in self.queue.marked.values()) else kept.quiet(sim, p, singles=False)

