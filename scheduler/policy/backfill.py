"""Backfill: reservations for the top blocked jobs, and the check that a job starting now delays none.

Each node gets a timeline of allocations: running jobs until their expected end (start + time limit;
a preempted job until its grace runs out), this pass's admissions, and reservations. A blocked job's
reservation is the earliest time some node can hold it for its whole time limit; a lower job may start
now on a node only if the node can still hold every reservation there with the job added. Time limits
are upper bounds, so reservations only ever move earlier.

With `estimate.backfill = true` a job's span is its learned run time (`Job.learned_est`, estimate.py)
where it has one, as SLURM plans with predicted run times: a running job is expected to end at its
start + estimate (once it has run past that, at its time limit again), a blocked job is reserved for
its estimate, and a job may start now if its estimate fits before a reservation. The time limit
still kills. The no-delay check is then only as good as the estimates: a backfilled job that runs
longer than its estimate can delay a reservation (the reserved job starts later than it was told), and a running
job that overruns makes a reservation slip. An estimate that is too long only gives up backfill
chances, as a time limit does.

Built lazily: a pass that never blocks a job on capacity never pays for timelines.
"""
from collections import Counter
from dataclasses import dataclass

from .. import states
from ..config import Config
from ..model import Job, Node

_FOREVER = float("inf")


@dataclass(slots=True)
class Alloc:
    start: float
    end: float
    gpus: Counter      # model -> count
    cpus: int
    mem: int
    job_id: int = 0
    reserved: bool = False


class Timelines:
    def __init__(self, nodes, running, placed, now: float, cfg: Config):
        self.now = now
        self.learned = bool(cfg.estimate.backfill)
        self.nodes: dict[str, Node] = {n.name: n for n in nodes}
        self.models = {n.name: {g.uuid: g.model for g in n.gpus} for n in nodes}
        self.allocs: dict[str, list[Alloc]] = {n.name: [] for n in nodes}
        self.reserved: set[str] = set()      # nodes holding a reservation
        for j in running:
            for node, gpus in j.on_nodes:
                if node in self.allocs:
                    self.allocs[node].append(self._alloc(j, node, gpus, _expected_end(j, now, cfg)))
        for job, node, gpus in placed:
            self.place(job, node, gpus)

    def _alloc(self, job: Job, node: str, uuids, end: float, start: float | None = None) -> Alloc:
        models = self.models[node]
        return Alloc(self.now if start is None else start, end, Counter(models.get(u, "") for u in uuids),
                     job.cpus, job.mem, job.id)

    def place(self, job: Job, node: str, gpus) -> None:
        if node in self.allocs:
            self.allocs[node].append(self._alloc(job, node, gpus, self.now + self.span(job)))

    def span(self, job: Job) -> float:
        """How long the job is planned to hold its allocation: its learned run time, else its limit."""
        if self.learned and job.learned_est:
            return float(min(job.learned_est, _limit(job)))
        return _limit(job)

    def fits_now(self, job: Job, node: str) -> bool:
        """Whether starting `job` now on `node` leaves every reservation there whole."""
        if node not in self.reserved:
            return True
        return self._fits(job, node, self.now, self.now + self.span(job))

    def reserve(self, job: Job, could_hold, not_before: float | None = None) -> tuple[str, float] | None:
        """Reserve the earliest (time, node) that holds the job for its time limit, or None."""
        best = None
        for name in sorted(self.allocs):
            node = self.nodes[name]
            if not could_hold(job, node):
                continue
            t = self._earliest(job, name, not_before or self.now)
            if t is not None and (best is None or t < best[1]):
                best = (name, t)
        if best is None:
            return None
        name, t = best
        self.allocs[name].append(Alloc(t, t + self.span(job), self._pick_models(job, name, t), job.cpus, job.mem,
                                       job.id, reserved=True))
        self.reserved.add(name)
        return best

    # -- the arithmetic ----------------------------------------------------------------------------
    def _earliest(self, job: Job, node: str, after: float) -> float | None:
        ends = sorted({a.end for a in self.allocs[node] if a.end > after and a.end != _FOREVER})
        for t in [after] + ends:
            if self._fits(job, node, t, t + self.span(job)):
                return t
        return None

    def _fits(self, job: Job, node: str, t0: float, t1: float) -> bool:
        """Whether `job` fits on `node` at every instant of [t0, t1): free capacity only drops when an
        allocation starts, so checking t0 and each start inside the window is enough."""
        allocs = self.allocs[node]
        points = [t0] + [a.start for a in allocs if t0 < a.start < t1]
        return all(self._free_covers(job, node, t) for t in points)

    def _free_covers(self, job: Job, node: str, t: float) -> bool:
        n = self.nodes[node]
        active = [a for a in self.allocs[node] if a.start <= t < a.end]
        if len(active) + 1 > n.slots:
            return False
        if sum(a.cpus for a in active) + job.cpus > n.cpus or sum(a.mem for a in active) + job.mem > n.mem:
            return False
        if not job.gpus:
            return True
        used: Counter = Counter()
        for a in active:
            used.update(a.gpus)
        cap = Counter(g.model for g in n.gpus)
        if job.gpu_type:
            return cap[job.gpu_type] - used[job.gpu_type] >= job.gpus
        return sum(cap.values()) - sum(used.values()) >= job.gpus

    def _pick_models(self, job: Job, node: str, t: float) -> Counter:
        if not job.gpus:
            return Counter()
        if job.gpu_type:
            return Counter({job.gpu_type: job.gpus})
        n = self.nodes[node]
        used: Counter = Counter()
        for a in self.allocs[node]:
            if a.start <= t < a.end:
                used.update(a.gpus)
        free = Counter(g.model for g in n.gpus)
        free.subtract(used)
        out: Counter = Counter()
        need = job.gpus
        for model in sorted(free):
            take = min(max(free[model], 0), need)
            if take:
                out[model] = take
                need -= take
        return out


def _limit(job: Job) -> float:
    return job.time_limit if job.time_limit > 0 else _FOREVER


def _expected_end(job: Job, now: float, cfg: Config) -> float:
    """When a running job will have let go of its allocation at the latest."""
    a = job.current
    began = (a.start_time or a.dispatch_time) if a else None
    end = (began + job.time_limit + cfg.kill_wait) if (began and job.time_limit > 0) else _FOREVER
    if began and job.learned_est and cfg.estimate.backfill and began + job.learned_est > now:
        # Expected to end at its estimate; one that has overrun it is bounded by its limit alone.
        end = min(end, began + job.learned_est)
    if job.state == states.PREEMPTING and job.preempt_time is not None:
        q = cfg.qos_named(job.qos)
        end = min(end, job.preempt_time + (q.grace if q else 0) + cfg.kill_wait)
    # An overdue job is being killed right now; it will be gone in a moment, not in the past.
    return max(end, now + 1.0)
