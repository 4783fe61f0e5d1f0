"""backfill.Timelines answers from per-node usage profiles, cached until a node's allocations change
(scheduler/policy/backfill.py). It must answer exactly as the straightforward timelines it replaced
(`Reference` below: every allocation summed at every point): the same reservation (node, time) for
each job, the same `fits_now` for every node, on random nodes (one or two GPU models, GPUs no node
lists), allocations (starting now or later, ending or not, equal times), time limits (none = for
ever), `--begin`s, typed and untyped requests, and with allocations appended from outside (gang.py)."""
from collections import Counter
from dataclasses import replace

from hypothesis import given, settings, strategies as st

from labq.scheduler.jobs.model import Gpu, Job, Node
from labq.scheduler.policy.backfill import _FOREVER, Alloc, Timelines, _expected_end, _limit
from labq.scheduler.settings import config as config_mod
from labq.scheduler.settings.config import Config

G = 1 << 30
NOW = 1000.0


class Reference:
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



def node(i, models, slots):
    gpus = tuple(Gpu(f"G-{i}-{k}", k, m) for k, m in enumerate(models))
    return Node(f"n{i}", 16, 64 * G, slots, gpus)


NODE = st.tuples(st.sampled_from([("A",) * 4, ("A",) * 8, ("A", "A", "B", "B"), (), ("B",) * 2]),
                 st.sampled_from([2, 3, 8]))
TIME = st.sampled_from([0.0, 0.0, 10.0, 50.0, 100.0, 300.0, 1000.0])
ALLOC = st.tuples(st.integers(0, 5), TIME, st.sampled_from([10.0, 50.0, 100.0, 400.0, None]),
                  st.integers(0, 3), st.sampled_from(["A", "B", "?"]), st.sampled_from([0, 2, 8]),
                  st.sampled_from([0, 8 * G, 32 * G]))
REQUEST = st.tuples(st.integers(0, 4), st.sampled_from(["", "", "A", "B"]), st.sampled_from([1, 4, 12]),
                    st.sampled_from([0, 16 * G]), st.sampled_from([0, 10, 50, 100, 1000]),
                    st.sampled_from(["fits", "reserve", "reserve_begin", "place", "outside"]),
                    st.integers(0, 5), st.sampled_from([None, 30.0, 100.0]))


def could_hold(job, n):
    return job.gpus <= len(n.gpus) and job.cpus <= n.cpus and job.mem <= n.mem


def alloc_copy(a):
    return Alloc(a.start, a.end, Counter(a.gpus), a.cpus, a.mem, a.job_id, a.reserved)


def allocs_of(tl):
    return {name: [(a.start, a.end, +Counter(a.gpus), a.cpus, a.mem, a.job_id, a.reserved) for a in lst]
            for name, lst in tl.allocs.items()}


@settings(max_examples=300, deadline=None)
@given(st.lists(NODE, min_size=1, max_size=5), st.lists(ALLOC, max_size=25), st.lists(REQUEST, min_size=1, max_size=25),
       st.booleans())
def test_timelines_answer_as_the_reference(shapes, allocs, requests, learned):
    nodes = [node(i, models, slots) for i, (models, slots) in enumerate(shapes)]
    cfg = config_mod.Config()
    if learned:
        cfg = replace(cfg, estimate=replace(cfg.estimate, backfill=True))
    fast, ref = Timelines(nodes, [], [], NOW, cfg), Reference(nodes, [], [], NOW, cfg)
    for k, (i, start, length, gpus, model, cpus, mem) in enumerate(allocs):
        n = nodes[i % len(nodes)]
        a = Alloc(NOW + start, NOW + start + length if length else _FOREVER, Counter({model if model != "?" else "": gpus}),
                  cpus, mem, 10_000 + k, reserved=start > 0)
        for tl in (fast, ref):
            tl.allocs[n.name].append(alloc_copy(a))
            if start > 0:
                tl.reserved.add(n.name)
    for k, (gpus, gtype, cpus, mem, limit, op, i, extra) in enumerate(requests):
        job = Job(id=k + 1, user="u", account="a", gpus=gpus, gpu_type=gtype, cpus=cpus, mem=mem, time_limit=limit,
                  learned_est=int(extra) if extra else None)
        n = nodes[i % len(nodes)]
        if op == "fits":
            assert [fast.fits_now(job, m.name) for m in nodes] == [ref.fits_now(job, m.name) for m in nodes]
        elif op.startswith("reserve"):
            begin = NOW + extra if op == "reserve_begin" and extra else None
            assert fast.reserve(job, could_hold, begin) == ref.reserve(job, could_hold, begin)
        elif op == "place":
            uuids = tuple(g.uuid for g in n.gpus[:gpus])
            fast.place(job, n.name, uuids)
            ref.place(job, n.name, uuids)
        else:          # as gang.py does: written straight into a node's list
            t = NOW + (extra or 0)
            for tl in (fast, ref):
                tl.allocs[n.name].append(Alloc(t, t + _limit(job), Counter({gtype or "A": gpus}), cpus, mem, job.id,
                                               reserved=True))
                tl.reserved.add(n.name)
        assert allocs_of(fast) == allocs_of(ref)
        for m in nodes:
            for t in (NOW, NOW + 10, NOW + 99.5):
                assert fast._fits(job, m.name, t, t + fast.span(job)) == ref._fits(job, m.name, t, t + ref.span(job))

