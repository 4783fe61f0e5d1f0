"""What one pass of the policy (or the budgets' stop policy) decided, as plain data. `applier.apply_plan`
applies it, for the daemon, the bookkeeper and the simulator alike."""
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True, slots=True)
class Place:
    """Start `job_id` on `node` with these GPUs, encumbering each budget by `commit`."""
    job_id: int
    node: str
    gpus: tuple[str, ...]
    commit: tuple[tuple[str, int], ...]
    rates: tuple[tuple[str, int], ...]
    cost_rate: int
    borrowed: bool = False     # beyond the account's guarantee: preemptible, reclaimed by lenders
    parts: tuple[tuple[str, tuple[str, ...]], ...] = ()   # a gang: (node, GPUs) per part; node/gpus: the first


@dataclass(frozen=True, slots=True)
class Expire:
    """The pending job ends without running, never charged: `EX` (waited past --max-wait), `DL` (could
    no longer finish before --deadline) or `CA` (a dependency can never be satisfied, with --kill)."""
    job_id: int
    detail: str
    state: str = "EX"


@dataclass(frozen=True, slots=True)
class Preempt:
    """Send the running `job_id` the preempt control for `for_job`: checkpoint signal, `grace`
    seconds, then kill; it is requeued with the same id."""
    job_id: int
    for_job: int | None      # None: the budget's on_exhaust = "preempt"
    grace: int
    detail: str


@dataclass(frozen=True, slots=True)
class Cancel:
    """Cancel the running `job_id` (the budgets' stop policy, on_exhaust = "cancel"): its runner
    sees the control, stops the job and reports `cancelled`."""
    job_id: int
    detail: str


@dataclass(frozen=True, slots=True)
class Start:
    """Backfill's reservation: the blocked `job_id` is expected to start at `at` on `node`."""
    job_id: int
    at: float
    node: str


@dataclass(frozen=True, slots=True)
class Pending:
    """The job stays pending for exactly this reason; `detail` gives the numbers. `earmark`: the node
    whose room (`earmark_gpus` there) is kept for the job while it waits for its victims
    (PreemptingFor) and until it starts; "" gives it up."""
    job_id: int
    reason: str
    detail: str
    earmark: str = ""
    earmark_gpus: tuple[str, ...] = ()


Verdict = tuple[str, str, str, tuple[str, ...]]    # a Pending's fields after job_id: reason, detail, earmark, GPUs
# Why a pass leaves a job pending, as a verdict is first made: (reason, detail), or a whole Verdict.
Why = tuple[str, str] | Verdict


class Pendings(Sequence[Pending]):
    """`Plan.pending` as plan() returns it: the jobs judged one by one (`Pending`s) and the runs of
    a request class that took one verdict (ids, verdict), so that a pass over 100,000 alike-judged
    jobs builds a few thousand runs, not 100,000 objects. It reads as a sequence of Pending (made
    on first use); `runs()` gives (ids, verdict) without them (the applier's and the daemon's
    walk). The order is not the priority order."""
    __slots__ = ("_one", "_runs", "_all")

    def __init__(self, one: Iterable[Pending] = (), runs: Iterable[tuple[Sequence[int], Verdict]] = ()) -> None:
        self._one, self._runs = tuple(one), tuple(runs)
        self._all: tuple[Pending, ...] | None = None

    def runs(self) -> Iterator[tuple[Sequence[int], Verdict]]:
        for pd in self._one:
            yield (pd.job_id,), (pd.reason, pd.detail, pd.earmark, pd.earmark_gpus)
        yield from self._runs

    def _pendings(self) -> tuple[Pending, ...]:
        if self._all is None:
            out = list(self._one)
            new, put = object.__new__, _SETTERS
            for ids, verdict in self._runs:
                for i in ids:     # Pending(i, *verdict) without the frozen __init__'s setattr per field
                    x = new(Pending)
                    put[0](x, i)
                    put[1](x, verdict[0])
                    put[2](x, verdict[1])
                    put[3](x, verdict[2])
                    put[4](x, verdict[3])
                    out.append(x)
            self._all = tuple(out)
        return self._all

    def __len__(self) -> int:
        return len(self._one) + sum(len(ids) for ids, _ in self._runs)

    def __iter__(self) -> Iterator[Pending]:
        return iter(self._pendings())

    def __getitem__(self, k: Any) -> Any:
        return self._pendings()[k]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    def __hash__(self) -> int:
        return hash(self._pendings())

    def __repr__(self) -> str:
        return f"Pendings({self._pendings()!r})"


_SETTERS = tuple(getattr(Pending, f.name).__set__ for f in fields(Pending))


def pending_runs(pending: Sequence[Pending]) -> Iterable[tuple[Sequence[int], Verdict]]:
    """(ids, verdict) of each run of `Plan.pending`, a Pendings or a plain sequence of Pending."""
    if isinstance(pending, Pendings):
        return pending.runs()
    return (((pd.job_id,), (pd.reason, pd.detail, pd.earmark, pd.earmark_gpus)) for pd in pending)


@dataclass(frozen=True, slots=True)
class Plan:
    places: tuple[Place, ...] = ()
    expires: tuple[Expire, ...] = ()
    pending: Sequence[Pending] = ()       # a Pendings from plan(); any sequence of Pending is applied alike
    preempts: tuple[Preempt, ...] = ()
    starts: tuple[Start, ...] = ()       # expected starts of reserved jobs (labq stat --start)
    cancels: tuple[Cancel, ...] = ()     # the stop policy's; policy.plan() gives none
    blocker: int | None = None           # backfill off: the job every job behind which waits (their detail,
                                         # codes.BEHIND_BLOCKER, does not name it); None: none this pass
