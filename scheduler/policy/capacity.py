"""Free capacity per node, and best-fit placement of one job.

A job fits a node when the node is up, has a free slot, enough free CPUs and memory, and enough
free GPUs of the requested model. Among the nodes that fit we take the tightest (fewest GPUs, then
CPUs, left over), so that large holes stay open for large jobs; ties go to the node name, which keeps
the plan deterministic.
"""
from bisect import bisect_left, insort
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Protocol

from ..jobs import states
from ..jobs.model import Gpu, Job, Node

# (GPUs, GPU model, CPUs, memory): a request's shape, as Placer remembers failures and fits.
Shape = tuple[int, str, int, int]
# What Placer.hold set aside: (GPUs, CPUs, memory, slots).
Held = tuple[list[Gpu], int, int, int]


class Room(Protocol):
    """What the fit rule reads of a place: a Free (what a pass has left of a node) or a Node (all of it,
    empty: could_ever_hold)."""
    @property
    def slots(self) -> int: ...
    @property
    def cpus(self) -> int: ...
    @property
    def mem(self) -> int: ...
    @property
    def gpus(self) -> Sequence[Gpu]: ...


def fits(room: Room, job: Job) -> bool:
    """The one fit rule (issue 40 item 2): a free slot, the CPUs, the memory, and enough GPUs of the
    model asked for. The policy and the applier ask it through Free.fits, the submit check through
    could_ever_hold."""
    return (room.slots >= 1 and room.cpus >= job.cpus and room.mem >= job.mem
            and len([g for g in room.gpus if not job.gpu_type or g.model == job.gpu_type]) >= job.gpus)


@dataclass(slots=True, eq=False)
class Free:
    """Mutable working copy of one node's free resources during one plan pass."""
    node: Node
    cpus: int
    mem: int
    slots: int
    gpus: list[Gpu]  # free Gpu objects, in index order

    def copy(self) -> "Free":
        return Free(self.node, self.cpus, self.mem, self.slots, list(self.gpus))

    fits = fits         # the rule itself as the method, not a call more in plan()'s hottest loop

    def matching(self, job: Job) -> list[Gpu]:
        return [g for g in self.gpus if not job.gpu_type or g.model == job.gpu_type]

    def occupy(self, job: Job, uuids: Iterable[str], sign: int = 1) -> None:
        """A running job's own GPUs `uuids` (its allocation here), CPUs, memory and slot taken (`sign` -1:
        given back, the GPUs in index order again)."""
        used = set(uuids)
        if sign > 0:
            self.gpus = [g for g in self.gpus if g.uuid not in used]
        else:
            self.gpus = sorted(self.gpus + [g for g in self.node.gpus if g.uuid in used], key=_index)
        self.cpus -= sign * job.cpus
        self.mem -= sign * job.mem
        self.slots -= sign

    def take(self, job: Job, gpus: int | None = None, prefer: Collection[str] = ()) -> tuple[str, ...]:
        mine = self.matching(job)
        if prefer:   # the GPUs earmarked for it first
            mine = sorted(mine, key=lambda g: g.uuid not in prefer)
        chosen = mine[:job.gpus if gpus is None else gpus]
        taken = {g.uuid for g in chosen}
        self.gpus = [g for g in self.gpus if g.uuid not in taken]
        self.cpus -= job.cpus
        self.mem -= job.mem
        self.slots -= 1
        return tuple(g.uuid for g in chosen)


_index = attrgetter("index")


def avoided(job: Job) -> tuple[str, ...]:
    """The nodes a job's next attempt goes elsewhere than, when another can hold it: those of its
    last attempt if that one was lost with its node (node_failure) or never taken up there
    (withdrawn: no runner claimed it within start_timeout)."""
    a = job.attempts[-1] if job.attempts else None
    if a is None or a.outcome not in ("node_failure", "withdrawn"):
        return ()
    return tuple(n for n, _ in a.parts) or (a.node,)


def node_is_up(node: Node, now: float) -> bool:
    return node.state == "up" and node.lease_expiry > now


def free_capacity(nodes: Iterable[Node], jobs: Iterable[Job], now: float) -> dict[str, Free]:
    """Free resources of every up node after the allocations of jobs already on a node."""
    free = {n.name: Free(n, n.cpus, n.mem, n.slots, sorted(n.gpus, key=_index))
            for n in sorted(nodes, key=lambda n: n.name) if node_is_up(n, now)}
    for j in jobs:
        if j.state not in states.ON_NODE:
            continue
        for node, gpus in j.on_nodes:     # a gang holds its per-node shape on each of its nodes
            f = free.get(node)
            if f is not None:
                f.occupy(j, gpus)
    return free


class Placer:
    """Best fit with memory of failures within one pass.

    Free capacity only shrinks during a pass, so once a request found no node, any request at
    least as large (and no less specific about the GPU model) will not find one either. Keeping
    the minimal failed requests turns the common case — thousands of pending jobs on a full
    cluster — from jobs × nodes fit checks into jobs × a handful of comparisons.

    Nodes are also kept in buckets by free GPU count, the first key of best fit, so that a GPU job
    looks only at nodes with enough free GPUs instead of at every node.
    """

    def __init__(self, free: dict[str, Free]) -> None:
        self.free = free
        self.changes = 0    # takes, holds, unholds: part of the pass state's version (classes.py)
        self.grown = 0      # unholds: room that came back (a "no room" verdict may change)
        self.failed: list[Shape] = []
        self.held: list[Shape] = []   # requests known to fit (for fits_unchanged)
        # free GPU count -> [(free CPUs, node name)] kept sorted, so a scan in order meets the
        # tightest fit first
        self.buckets: dict[int, list[tuple[int, str]]] = {}
        # Names of nodes whose Free this Placer shares with a copy (or the copy with its source):
        # each is copied at its first change here, so a copy costs the nodes a pass changes, not all.
        self.shared: set[str] = set()
        for f in free.values():
            self.buckets.setdefault(len(f.gpus), []).append((f.cpus, f.node.name))
        for bucket in self.buckets.values():
            bucket.sort()

    def copy(self) -> "Placer":
        """A Placer over a copy of this one's free capacity, as it is now (no failures remembered)."""
        other = Placer.__new__(Placer)
        other.free = dict(self.free)
        self.shared, other.shared = set(self.free), set(self.free)
        other.changes = other.grown = 0
        other.failed, other.held = [], []
        other.buckets = {k: list(b) for k, b in self.buckets.items()}
        return other

    def view(self) -> "Placer":
        """A Placer over this one's free capacity itself, for one that never takes (`fits_unchanged`)
        while this one does not change either: no failures remembered, nothing copied."""
        other = Placer.__new__(Placer)
        other.free, other.buckets, other.shared = self.free, self.buckets, self.shared
        other.changes = other.grown = 0
        other.failed, other.held = [], []
        return other

    def occupy(self, job: Job, sign: int = 1) -> int:
        """A running job's own GPUs, CPUs, memory and slot on each of its nodes taken (`sign` -1: given
        back): free capacity kept from one pass to the next (standing.py) as free_capacity has it.
        Returns how many GPUs that was (those on nodes that are not up count nowhere)."""
        counted = 0
        for name, gpus in job.on_nodes:
            spot = self.free.get(name)
            if spot is not None:
                spot = self._own(spot)
                self._unfile(spot)
                spot.occupy(job, gpus, sign)
                self._file(spot)
                counted += len(gpus)
        return counted

    def _own(self, spot: Free) -> Free:
        """This Placer's own Free of the spot's node, to change: copied if it is still shared. A caller
        may hold the Free it had before the copy; its name finds the one to change."""
        name = spot.node.name
        if name in self.shared:
            self.shared.discard(name)
            self.free[name] = self.free[name].copy()
        return self.free[name]

    def _unfile(self, spot: Free) -> None:
        """Take the node out of its bucket before its free room changes (`_file` puts it back)."""
        bucket = self.buckets[len(spot.gpus)]
        del bucket[bisect_left(bucket, (spot.cpus, spot.node.name))]

    def _file(self, spot: Free) -> None:
        insort(self.buckets.setdefault(len(spot.gpus), []), (spot.cpus, spot.node.name))

    def best_fit(self, job: Job, accept: Callable[[Free], bool] | None = None) -> tuple[Free | None, bool]:
        """The tightest node that `accept`s the job: fewest GPUs left over, then fewest CPUs, then the
        name; and whether any node had the room at all (before `accept` was asked)."""
        roomy = False
        for k in sorted(self.buckets):
            if k < job.gpus:
                continue
            bucket = self.buckets[k]
            for cpus, name in bucket[bisect_left(bucket, (job.cpus, "")):]:
                f = self.free[name]
                if f.fits(job):
                    if accept is None or accept(f):
                        return f, True
                    roomy = True
        return None, roomy

    def take(self, spot: Free, job: Job, gpus: int | None = None, prefer: Collection[str] = ()) -> tuple[str, ...]:
        """Allocate the job's request on `spot` (or, for a hold, only `gpus` of its GPUs and the
        part of its CPUs and memory the node has free), the `prefer`red GPUs first."""
        self.changes += 1
        spot = self._own(spot)
        self._unfile(spot)
        taken = spot.take(job, gpus, prefer)
        self._file(spot)
        return taken

    def hold(self, spot: Free, job: Job, only: Collection[str] | None = None) -> Held:
        """Set aside for a preemptor whatever part of its request the node has free now (of the GPUs
        `only`, its earmark, when given), so that the room its victims leave is not short by what
        others took meanwhile. Returns what was held. A gang's hold keeps a slot too: the room of
        every one of its nodes must still be whole when the last of its victims stops."""
        self.changes += 1
        spot = self._own(spot)
        self._unfile(spot)
        keep = [g for g in spot.matching(job) if only is None or g.uuid in only][:job.gpus]
        held: Held = (keep, min(spot.cpus, job.cpus), min(spot.mem, job.mem), 1 if job.nodes > 1 and spot.slots > 0 else 0)
        spot.gpus = [g for g in spot.gpus if g not in keep]
        spot.cpus -= held[1]
        spot.mem -= held[2]
        spot.slots -= held[3]
        self._file(spot)
        return held

    def unhold(self, spot: Free, held: Held) -> None:
        """Give back what `hold` set aside (the preemptor's turn has come: it may take it now)."""
        self.changes += 1
        self.grown += 1
        spot = self._own(spot)
        self._unfile(spot)
        gpus, cpus, mem, slots = held
        spot.gpus = sorted(spot.gpus + list(gpus), key=_index)
        spot.cpus += cpus
        spot.mem += mem
        spot.slots += slots
        self._file(spot)
        # Room came back: requests that failed before may fit now.
        self.failed = []

    def find(self, job: Job, accept: Callable[[Free], bool] | None = None) -> tuple[Free | None, bool]:
        """(spot, roomy): the best node that has room for the job and `accept`s it, and whether any
        node had room. A request that found no room is remembered, so that larger ones skip the scan."""
        req = g, model, c, m = job.gpus, job.gpu_type, job.cpus, job.mem
        for fg, fmodel, fc, fm in self.failed:    # covers(f, req), inline: once per pending job
            if g >= fg and c >= fc and m >= fm and (not fmodel or fmodel == model):
                return None, False
        spot, roomy = self.best_fit(job, accept)
        if not roomy:
            self.failed = [f for f in self.failed if not covers(req, f)] + [req]
        return spot, roomy

    def fits_unchanged(self, job: Job) -> bool:
        """Whether the job fits, for a Placer whose capacity is never taken: then a request no larger
        than one that fitted (and no more specific about the model) fits too."""
        req = g, model, c, m = job.gpus, job.gpu_type, job.cpus, job.mem
        for hg, hmodel, hc, hm in self.held:      # covers(req, h), inline
            if hg >= g and hc >= c and hm >= m and (not model or model == hmodel):
                return True
        if self.find(job)[0] is None:
            return False
        self.held = [h for h in self.held if not covers(h, req)] + [req]
        return True


def shape(job: Job) -> Shape:
    return (job.gpus, job.gpu_type, job.cpus, job.mem)


def covers(small: Shape, big: Shape) -> bool:
    """Whether request `big` is at least as hard to place as `small`: no smaller anywhere, and asking
    for a GPU model whenever `small` does (an untyped request can use any model)."""
    g, model, c, m = small
    bg, bmodel, bc, bm = big
    return bg >= g and bc >= c and bm >= m and (not model or model == bmodel)


def could_ever_hold(job: Job, node: Node) -> bool:
    """Whether the node, empty, could hold the job (the fit rule on all of it): the submit-time
    feasibility check."""
    return fits(node, job)
