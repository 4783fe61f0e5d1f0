"""A replay's pass through plan() with the state the daemon keeps between its passes (policy/kept.py's
parts): the request-class Queue, the backfill Tracks and what changed since the last pass (a Seen),
beside the replay's own Standing. No shortcut of the replay's own (easy.py's head, idle.py's budget
idlers) decides anything here: the pass is plan()'s, as the daemon runs it, and plan() gives the
same plan as over the whole queue afresh (tests/property/test_sim_through.py against `skip=False`).

The daemon's snapshot lists its jobs dict in order, a record replaced in place when it changes, ended
ones leaving and new ones coming at the end; the replay keeps `active` the same way, and tells the
Seen which ids it put or took out since the last pass (`Seen.tell`: what `see` would find by comparing
every job, at the cost of the changes)."""
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
        # A job's place in `active`'s order is its id where ids come in rising order, as a replay's do (the
        # trace's line order); `places` holds the others (an id put after a higher one), each past every place
        # given before. A dict of every active id cost ~80 B a job, a whole queue's at 64 GPUs.
        self.places: dict[int, int] = {}
        self.last = 0                       # the highest place given

    def put(self, job: Job) -> None:
        """The job's present record (in its old place, or at the end when new)."""
        i = job.id
        if i not in self.active:
            if i > self.last:
                self.last = i
            else:
                self.last += 1
                self.places[i] = self.last
        self.active[i] = job
        self.touched.add(i)

    def leave(self, job_id: int) -> None:
        if self.active.pop(job_id, None) is not None:
            self.places.pop(job_id, None)
            self.touched.add(job_id)

    def _place(self, job: Job) -> int:
        return self.places.get(job.id, job.id)

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
        sim.tracks.seen = self.seen         # (Tracks.sync reads what changed in the running jobs from it)
        self.touched = set()
        held = sim.budget_idle.known(t, sim.attempts) if sim.budget_idle is not None else None
        p = policy.plan(snap, sim.cfg, held=held, standing=sim.standing, tracks=sim.tracks, queue=self.queue,
                        seen=self.seen, quiet=True)
        # No queued job has an earmark: the runs pended without one change no record (kept.quiet),
        # those of one job included (~950k applier reads at 5k jobs learned on 64 GPUs otherwise).
        return p if any(j.earmark for j in self.queue.marked.values()) else kept.quiet(sim, p, singles=False)

