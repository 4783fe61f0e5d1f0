"""What the running jobs hold on each node's backfill timeline (backfill.py), kept from pass to pass
by a caller that plans one changing cluster again and again (the daemon: policy/kept.py).

A pass that reserves builds a Timelines of every running job's allocation on every up node, then
reads each node's usage profile to find the reservation: a walk over all of them for one
reservation, every pass. Given `Tracks`, a pass starts from the allocations and profiles kept here
and copies only the nodes it writes on (its own admissions and reservations, which are not kept);
the profiles of the nodes nothing changed on are read as they were. `sync` repairs what is kept
from the pass's running jobs and nodes, by identity (records are frozen: a changed job is a new
object): a job that ended or was cancelled leaves its nodes, one that started or changed is filed
(again), and a node that changed, came up or went away files every node anew. Given the caller's Seen
(seen.py), whose running jobs the pass's are, those come from what it found left and came since the
snapshot last synced, where that was the one before: a pass costs its changes, not its running jobs. A running job's
expected end can read the clock (an estimate it is about to pass, an end already past that counts
as `now` + 1: backfill._expected_end): each is filed again once the clock reaches the time its end
was good until. A new Config files everything anew.

The plan is the same as from a Timelines built anew (tests/property/test_plan_classes.py). Kept
allocations of running jobs start when they were filed, not at the pass's `now`: every question a
Timelines answers is about `now` or later, where the usage is the same.

Each node whose kept allocations change is logged, so that each node's earliest start for a request
shape, kept here too (earliest.py), is asked again only where it may have moved."""
from collections.abc import Iterable, Sequence
from heapq import heappop, heappush
from itertools import compress, count, filterfalse
from operator import attrgetter, is_not

from ..jobs.model import Job, Node
from ..settings.config import Config
from .backfill import Alloc, Profile, _expected_end, _valid_until, gpus_by_model
from .earliest import Ask, Earliest, Shape
from .seen import Seen

# Request shapes whose earliest starts are kept (the last used; a pass reserves for backfill_depth
# jobs, most of them blocked again at the next pass), and how long the log of changed nodes may grow
# (per node) before it is cleared and every kept answer with it.
SHAPES = 32
_ID = attrgetter("id")
LOG_PER_NODE = 8


def _shape(n: Node) -> tuple[object, ...]:
    """What a Timelines reads of a node (capacity.could_ever_hold too)."""
    return (n.cpus, n.mem, n.slots, n.gpus)


class Tracks:
    def __init__(self, seen: Seen | None = None) -> None:
        # The caller's Seen (kept.py, sim/through.py): where a pass's running jobs are its `running` and the
        # last sync held the snapshot's before, what changed is its `left` and `came` (`_told`).
        self.seen = seen
        self.synced = -1                        # Seen.n of the running jobs held (-1: not a Seen's)
        self.cfg: Config | None = None
        self.nodes: dict[str, Node] = {}
        self.allocs: dict[str, list[Alloc]] = {}
        self.profiles: dict[str, tuple[int, Profile]] = {}    # node -> (len(allocs), Timelines._profile's)
        self.models: dict[str, dict[str, str]] = {}           # node -> {GPU uuid: model}
        self.names: list[str] = []              # the nodes, sorted
        self.jobs: dict[int, Job] = {}          # running job id -> the record as filed
        self.until: list[tuple[float, int, int, Job]] = []   # heap: (when its end reads the clock, n, id, record)
        self._n = count()
        self.gen = 0                            # bumped when all is filed anew: every kept Earliest is void
        self.log: list[str] = []                # the nodes whose allocations changed, in order
        self.earliest: dict[tuple[Shape, object], Earliest] = {}

    def earliest_for(self, shape: Shape, could_hold: object, after: float, ask: Ask) -> Earliest:
        """The kept answers for `shape` (and the `could_hold` rule), valid for `after`: asked again
        where the log says a node changed since, or the clock passed them; asked of every node
        the first time, after all was filed anew, or for an earlier `after` (a --begin)."""
        key = (shape, could_hold)
        e = self.earliest.pop(key, None)
        if e is not None and e.gen == self.gen and after >= e.after:
            e.refresh(self.log[e.pos:], after, ask)
            e.pos = len(self.log)
        else:
            e = Earliest(self.gen, len(self.log), after, {n: ask(n) for n in self.names})
        self.earliest[key] = e          # the last used at the end: the first is the one dropped
        if len(self.earliest) > SHAPES:
            del self.earliest[next(iter(self.earliest))]
        return e

    def sync(self, nodes: Sequence[Node], running: Sequence[Job], now: float, cfg: Config) -> None:
        """Hold exactly the allocations of `running` on `nodes` as at `now`."""
        seen, synced = self.seen, self.synced
        self.synced = seen.n if seen is not None and running is seen.running else -1
        if cfg is not self.cfg or self._moved(nodes):
            return self._refile(nodes, running, now, cfg)
        self._trim()
        known = self.jobs
        changed = self._told(seen) if seen is not None and synced == seen.n - 1 and self.synced >= 0 else None
        if changed is None:
            # The records not filed as they are, compared by identity in C: a comprehension over every running
            # job each pass was ~3 % of a deep replay's CPU on 512 GPUs (hundreds running, a few changed).
            ids = list(map(_ID, running))
            changed = list(compress(running, map(is_not, map(known.get, ids), running)))
            new = sum(1 for j in changed if j.id not in known)
            if len(known) + new != len(running):
                for i in list(filterfalse(set(ids).__contains__, known)):     # (in the order filed)
                    self._drop(known.pop(i))
        for j in changed:
            old = known.get(j.id)
            if old is not None:
                self._drop(old)
            self._add(j, now, cfg)
        # Taken out first, then filed again: a job filed again at `now` may be due again at `now`
        # (an overdue end is now + 1, good until now), and is so only at the next pass.
        until, due = self.until, []
        while until and until[0][0] <= now:
            due.append(heappop(until))
        for _, _, i, j in due:
            if known.get(i) is j:
                self._drop(j)
                self._add(j, now, cfg)

    def _told(self, seen: Seen) -> list[Job] | None:
        """What `sync`'s comparison finds, from what `seen` found changed since the running jobs held (its
        last snapshot's): the records that came, in the running order (Seen.places, kept by `tell`; None where
        that order is not known), after the ids that left (out of their nodes here; their order changes only
        the order of the log). The comparison read every running job each pass: ~5 % of the 200,000-job
        replay on 512 GPUs through plan() (hundreds running, a few changed)."""
        came = seen.came
        if len(came) > 1:
            if seen.at is None:
                return None
            places = seen.places
            came = sorted(came, key=lambda j: places[j.id])
        known, here = self.jobs, {j.id for j in came}
        for j in seen.left:
            if j.id not in here:
                self._drop(known.pop(j.id))
        return came

    def _trim(self) -> None:
        """Keep the log within LOG_PER_NODE entries a node: its older half cut, with the kept answers
        that have not read it yet (not used since)."""
        most = LOG_PER_NODE * len(self.nodes) + 64
        if len(self.log) > most:
            cut = len(self.log) - most // 2
            del self.log[:cut]
            for key, e in list(self.earliest.items()):
                if e.pos < cut:
                    del self.earliest[key]
                else:
                    e.pos -= cut

    def _moved(self, nodes: Sequence[Node]) -> bool:
        """Whether the up nodes or what a Timelines reads of them changed (a node's record changes
        at every heartbeat: those are taken as they are)."""
        if len(nodes) != len(self.nodes):
            return True
        mine = self.nodes
        for n in nodes:
            old = mine.get(n.name)
            if old is not n:
                if old is None or _shape(old) != _shape(n):
                    return True
                mine[n.name] = n
        return False

    def _refile(self, nodes: Iterable[Node], running: Iterable[Job], now: float, cfg: Config) -> None:
        self.cfg = cfg
        self.nodes = {n.name: n for n in nodes}
        self.allocs = {n.name: [] for n in nodes}
        self.profiles, self.jobs, self.until = {}, {}, []
        self.gen, self.log, self.earliest = self.gen + 1, [], {}
        self.models = {n.name: {g.uuid: g.model for g in n.gpus} for n in nodes}
        self.names = sorted(self.allocs)
        for j in running:
            self._add(j, now, cfg)

    def _add(self, j: Job, now: float, cfg: Config) -> None:
        self.jobs[j.id] = j
        end = None
        for node, gpus in j.on_nodes:
            mine = self.allocs.get(node)
            if mine is not None:
                if end is None:
                    end = _expected_end(j, now, cfg)
                mine.append(Alloc(now, end, gpus_by_model(self.models[node], gpus), j.cpus, j.mem, j.id))
                self.profiles.pop(node, None)
                self.log.append(node)
        if end is not None:
            until = _valid_until(j, now, cfg, end)
            if until is not None:
                heappush(self.until, (until, next(self._n), j.id, j))

    def _drop(self, j: Job) -> None:
        for node, _ in j.on_nodes:
            mine = self.allocs.get(node)
            if mine is not None:
                for k, a in enumerate(mine):
                    if a.job_id == j.id and not a.reserved:
                        del mine[k]
                        self.profiles.pop(node, None)
                        self.log.append(node)
                        break
