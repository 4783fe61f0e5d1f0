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
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..jobs import states
from ..jobs.model import Job, Node
from ..settings.config import Config

if TYPE_CHECKING:       # tracks.py builds on this module
    from .tracks import Tracks

_FOREVER = float("inf")

# One segment's usage: (jobs, CPUs, memory, GPUs, GPUs per model or None: one model on the node).
Usage = tuple[int, int, int, int, dict[str, int] | None]
# A node's profile (Timelines._profile): (breakpoints, usage per segment, sorted finite ends, its one model).
Profile = tuple[list[float], list[Usage], list[float], str | None]


@dataclass(slots=True)
class Alloc:
    start: float
    end: float
    gpus: dict[str, int]   # model -> count (a Counter or a plain dict)
    cpus: int
    mem: int
    job_id: int = 0
    reserved: bool = False


class Timelines:
    """Each node's allocations, and on demand its usage profile: the breakpoints (every start and
    finite end, sorted) and the usage on each segment between them, rebuilt only once the node's
    allocations changed. A query reads the segments its window covers instead of summing every
    allocation at every point (the same answers: tests/property/test_backfill_timelines.py)."""

    def __init__(self, nodes: Sequence[Node], running: Sequence[Job],
                 placed: Iterable[tuple[Job, str, tuple[str, ...]]], now: float, cfg: Config,
                 tracks: "Tracks | None" = None) -> None:
        self.now = now
        self.learned = bool(cfg.estimate.backfill)
        self.reserved: set[str] = set()      # nodes holding a reservation
        self._profiles: dict[str, tuple[int, Profile]] = {}
        # `tracks` (tracks.py): the running jobs' allocations kept from the last pass, repaired; this
        # pass copies a node's list (and profiles it itself) only once it writes on it.
        self._tracks = tracks
        self._own: set[str] = set()
        self.nodes: dict[str, Node]
        self.allocs: dict[str, list[Alloc]]
        self._models: dict[str, dict[str, str]]     # node -> {uuid: model}
        self._names: list[str] | None
        if tracks is not None:
            tracks.sync(nodes, running, now, cfg)
            self.nodes, self.allocs, self._models = tracks.nodes, dict(tracks.allocs), tracks.models
            self._names = tracks.names
        else:
            self.nodes = {n.name: n for n in nodes}
            self.allocs = {n.name: [] for n in nodes}
            self._models = {}                # built when first needed
            self._names = None
            allocs = self.allocs
            for j in running:
                end = None
                for node, gpus in j.on_nodes:
                    if node in allocs:
                        if end is None:
                            end = _expected_end(j, now, cfg)
                        allocs[node].append(Alloc(now, end, self._gpus(node, gpus), j.cpus, j.mem, j.id))
        for job, node, gpus in placed:
            self.place(job, node, gpus)

    def add(self, node: str, alloc: Alloc) -> None:
        """Write `alloc` on the node's timeline (this pass's own copy of it)."""
        mine = self.allocs[node]
        if self._tracks is not None and node not in self._own:
            mine = self.allocs[node] = list(mine)
            self._own.add(node)
        mine.append(alloc)

    @property
    def models(self) -> dict[str, dict[str, str]]:
        """node -> {GPU uuid: model}."""
        for name in self.nodes:
            self._model_of(name)
        return self._models

    def _model_of(self, node: str) -> dict[str, str]:
        m = self._models.get(node)
        if m is None:
            m = self._models[node] = {g.uuid: g.model for g in self.nodes[node].gpus}
        return m

    def _gpus(self, node: str, uuids: Iterable[str]) -> dict[str, int]:
        return gpus_by_model(self._model_of(node), uuids)

    def _alloc(self, job: Job, node: str, uuids: Iterable[str], end: float, start: float | None = None) -> Alloc:
        return Alloc(self.now if start is None else start, end, self._gpus(node, uuids), job.cpus, job.mem, job.id)

    def place(self, job: Job, node: str, gpus: Iterable[str]) -> None:
        if node in self.allocs:
            self.add(node, self._alloc(job, node, gpus, self.now + self.span(job)))

    def span(self, job: Job) -> float:
        return span(job, self.learned)

    def fits_now(self, job: Job, node: str) -> bool:
        """Whether starting `job` now on `node` leaves every reservation there whole."""
        if node not in self.reserved:
            return True
        return self._fits(job, node, self.now, self.now + self.span(job))

    def room_until(self, job: Job, node: str) -> float:
        """When the node's room for the job's request, from now on, first falls short (inf: never):
        `fits_now` holds exactly for a job of that request whose now + span is no later (the first
        segment without room is the one `_fits` stops at, or, starting past the window, never reads)."""
        points, usage, _, only = self._profile(node)
        bad = self._first_fail(job, self.nodes[node], points, usage, only, self.now, _FOREVER)
        return _FOREVER if bad is None else points[bad]

    def reserve(self, job: Job, could_hold: Callable[[Job, Node], bool],
                not_before: float | None = None) -> tuple[str, float] | None:
        """Reserve the earliest (time, node) that holds the job for its time limit, or None: of equal
        times, the first node by name."""
        best: tuple[str, float] | None = None
        after = not_before or self.now
        if self._tracks is not None:
            best = self._kept_first(self._tracks, job, could_hold, after)
        else:
            if self._names is None or len(self._names) != len(self.allocs):
                self._names = sorted(self.allocs)
            for name in self._names:
                if not could_hold(job, self.nodes[name]):
                    continue
                t = self._earliest(job, name, after)
                if t is not None and (best is None or t < best[1]):
                    best = (name, t)
                    if t <= after:
                        break     # no node can do better than `after`, and ties go to the first by name
        if best is None:
            return None
        name, t = best
        self.add(name, Alloc(t, t + self.span(job), self._pick_models(job, name, t), job.cpus, job.mem, job.id,
                             reserved=True))
        self.reserved.add(name)
        return best

    def _kept_first(self, tracks: "Tracks", job: Job, could_hold: Callable[[Job, Node], bool],
                    after: float) -> tuple[str, float] | None:
        """reserve's (node, time) from each node's earliest start kept with the tracks (earliest.py),
        asked again only where a node's kept timeline changed or the clock passed it; the nodes this
        pass wrote on are asked on its own copies."""
        def ask(name: str) -> float | None:       # on the kept timeline
            return self._earliest(job, name, after, kept=True) if could_hold(job, self.nodes[name]) else None
        kept = tracks.earliest_for((job.cpus, job.mem, job.gpus, job.gpu_type, self.span(job)), could_hold,
                                         after, ask).first(self._own)
        for name in self._own:
            if could_hold(job, self.nodes[name]):
                t = self._earliest(job, name, after)
                if t is not None and (kept is None or (t, name) < kept):
                    kept = (t, name)
        return None if kept is None else (kept[1], kept[0])

    # -- the arithmetic ----------------------------------------------------------------------------
    def _profile(self, node: str, kept: bool = False) -> Profile:
        """(breakpoints, usage per segment, sorted finite ends, GPU models used) of the node: segment
        i is [breakpoints[i], breakpoints[i+1]) and its usage (jobs, CPUs, memory, GPUs, GPUs per
        model or None); breakpoint 0 is -inf (nothing allocated before the first start). Cached
        until the node's allocation list grows (it is only ever appended to, here and in gang.py)."""
        tracks = self._tracks     # a node not written on this pass (or `kept`) reads the profile kept there
        if tracks is not None and (kept or node not in self._own):
            allocs, cache = tracks.allocs[node], tracks.profiles
        else:
            allocs, cache = self.allocs[node], self._profiles
        got = cache.get(node)
        if got is not None and got[0] == len(allocs):
            return got[1]
        n = self.nodes[node]
        only = n.gpus[0].model if n.gpus else None
        per_model = False
        # time -> [jobs, CPUs, memory, GPUs, the allocations that start then] changing there
        delta: dict[float, list[Any]] = {}
        ends = set()
        for a in allocs:
            g = 0
            for m, c in a.gpus.items():
                g += c
                if c and m != only:
                    per_model = True
            d = delta.get(a.start)
            if d is None:
                delta[a.start] = [1, a.cpus, a.mem, g, [a]]
            else:
                d[0] += 1
                d[1] += a.cpus
                d[2] += a.mem
                d[3] += g
                d[4].append(a)
            if a.end != _FOREVER:
                ends.add(a.end)
                d = delta.get(a.end)
                if d is None:
                    delta[a.end] = [-1, -a.cpus, -a.mem, -g, []]
                else:
                    d[0] -= 1
                    d[1] -= a.cpus
                    d[2] -= a.mem
                    d[3] -= g
        if not per_model and n.gpus and any(g.model != only for g in n.gpus):
            per_model = True
        points = [-_FOREVER]
        usage: list[Usage] = [(0, 0, 0, 0, {} if per_model else None)]
        jobs = cpus = mem = gpus = 0
        for t in sorted(delta):
            d = delta[t]
            jobs += d[0]
            cpus += d[1]
            mem += d[2]
            gpus += d[3]
            points.append(t)
            usage.append((jobs, cpus, mem, gpus, _models_at(allocs, t) if per_model else None))
        prof: Profile = (points, usage, sorted(ends), only)
        cache[node] = (len(allocs), prof)
        return prof

    def _earliest(self, job: Job, node: str, after: float, kept: bool = False) -> float | None:
        """The first of `after` and each allocation's finite end past it at which the job fits on the
        node for its span. A candidate that fails on some segment is followed by the first candidate
        past that segment: every one before would cover it too."""
        points, usage, ends, only = self._profile(node, kept)
        span = self.span(job)
        n = self.nodes[node]
        t = after
        k = bisect_right(ends, after)
        while True:
            bad = self._first_fail(job, n, points, usage, only, t, t + span)
            if bad is None:
                return t
            if bad + 1 >= len(points):
                return None
            nxt = points[bad + 1]
            while k < len(ends) and ends[k] < nxt:
                k += 1
            if k >= len(ends):
                return None
            t = ends[k]
            k += 1

    def _fits(self, job: Job, node: str, t0: float, t1: float) -> bool:
        """Whether `job` fits on `node` at every instant of [t0, t1): every segment the window
        covers has room (the usage only grows where an allocation starts, so this is the check at
        t0 and at each start inside the window)."""
        points, usage, _, only = self._profile(node)
        return self._first_fail(job, self.nodes[node], points, usage, only, t0, t1) is None

    @staticmethod
    def _first_fail(job: Job, n: Node, points: list[float], usage: list[Usage], only: str | None, t0: float,
                    t1: float) -> int | None:
        """The first segment of [t0, t1) without room for the job, or None."""
        slots, cpus, mem = n.slots - 1, n.cpus - job.cpus, n.mem - job.mem
        want, typed = job.gpus, job.gpu_type
        per_model = usage[0][4] is not None
        if want:
            if not typed:
                room = len(n.gpus) - want
            elif per_model:
                room = sum(1 for g in n.gpus if g.model == typed) - want
            else:      # one model on the node and in every allocation
                room = (len(n.gpus) if typed == only else 0) - want
        i = bisect_right(points, t0) - 1          # the segment holding t0
        last = len(points)
        while True:
            u = usage[i]
            if u[0] > slots or u[1] > cpus or u[2] > mem:
                return i
            if want:
                if not typed:
                    used = u[3]
                elif (models := u[4]) is not None:     # per_model: every segment has its counts per model
                    used = models.get(typed, 0)
                else:
                    used = u[3] if typed == only else 0
                if used > room:
                    return i
            i += 1
            if i >= last or points[i] >= t1:
                return None

    def _pick_models(self, job: Job, node: str, t: float) -> Counter[str]:
        if not job.gpus:
            return Counter()
        if job.gpu_type:
            return Counter({job.gpu_type: job.gpus})
        n = self.nodes[node]
        used: Counter[str] = Counter()
        for a in self.allocs[node]:
            if a.start <= t < a.end:
                used.update(a.gpus)
        free = Counter(g.model for g in n.gpus)
        free.subtract(used)
        out: Counter[str] = Counter()
        need = job.gpus
        for model in sorted(free):
            take = min(max(free[model], 0), need)
            if take:
                out[model] = take
                need -= take
        return out


def gpus_by_model(models: dict[str, str], uuids: Iterable[str]) -> dict[str, int]:
    """model -> count of these GPUs, by the node's {uuid: model} (a GPU it does not list counts as
    model "")."""
    if not uuids:
        return {}
    out: dict[str, int] = {}
    for u in uuids:
        m = models.get(u, "")
        out[m] = out.get(m, 0) + 1
    return out


def _models_at(allocs: Iterable[Alloc], t: float) -> dict[str, int]:
    """GPUs in use per model at t (a node with several models, or GPUs it does not list)."""
    models: dict[str, int] = {}
    for a in allocs:
        if a.start <= t < a.end:
            for m, c in a.gpus.items():
                models[m] = models.get(m, 0) + c
    return models


def span(job: Job, learned: bool) -> float:
    """How long the job is planned to hold its allocation: its learned run time (`learned`:
    estimate.backfill), else its limit."""
    if learned and job.learned_est:
        return float(min(job.learned_est, _limit(job)))
    return _limit(job)


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


def _valid_until(job: Job, now: float, cfg: Config, end: float) -> float | None:
    """Until when `_expected_end` gives `end` again as the clock moves on (tracks.py): until it is
    no later than `now` + 1 (an overdue end moves with the clock), and until the clock passes an
    estimate it counted. None: for ever."""
    until = end - 1.0 if end != _FOREVER else None
    a = job.current
    began = (a.start_time or a.dispatch_time) if a else None
    if began and job.learned_est and cfg.estimate.backfill and began + job.learned_est > now:
        until = began + job.learned_est if until is None else min(until, began + job.learned_est)
    return until
