"""Dependencies (`-d afterok:12:13,singleton`): may a pending job start, as far as other jobs go?

For each pending job: None (every dependency is satisfied), or (`Dependency`, detail) while a
target is still active, or (`DependencyNeverSatisfied`, detail) once one can never be (an
`afterok` target failed, an `afternotok` target completed). `,` is "all of", as in SLURM, so one
never-satisfiable part makes the whole job never satisfiable.

The states come from the snapshot: active targets from `snap.jobs`, ended ones from `snap.ended`.
A target found in neither is treated as never satisfied: its record is gone, so nothing could
ever say it succeeded. Pure: no Redis, no clock.
"""
from collections.abc import Iterable

from ..jobs import states
from ..jobs.model import Job, Snapshot


def satisfied(kind: str, state: str) -> bool | None:
    """True when a target in `state` satisfies `kind`, False when it never will, None while it may."""
    if state in states.ACTIVE:
        return None
    if kind == "afterok":
        return state == states.COMPLETED
    if kind == "afternotok":
        return state in states.TERMINAL and state != states.COMPLETED
    return state in states.TERMINAL       # afterany


class Dependencies:
    """Built once per plan pass; the indexes are made only if some pending job has dependencies."""

    def __init__(self, snap: Snapshot):
        self.snap = snap
        self._state: dict[int, str] | None = None
        self._shown: dict[int, str] | None = None
        self._named: dict[tuple[str, str], list[Job]] | None = None
        # job id (singleton) or deps -> verdict
        self._verdicts: dict[int | tuple[tuple[str, tuple[int, ...]], ...], tuple[str, str] | None] = {}

    def verdict(self, job: Job) -> tuple[str, str] | None:
        if not job.deps:
            return None
        # The tasks of an array share their dependencies: judge each distinct list once. A
        # singleton's verdict depends on the job itself (its name, its place in line).
        key = job.id if any(k == "singleton" for k, _ in job.deps) else job.deps
        if key not in self._verdicts:
            self._verdicts[key] = self._judge(job)
        return self._verdicts[key]

    def _judge(self, job: Job) -> tuple[str, str] | None:
        waiting, never = [], []
        for kind, ids in job.deps:
            if kind == "singleton":
                ahead = self._singleton_blocker(job)
                if ahead:
                    waiting.append(ahead)
                continue
            for tid in ids:
                state = self.states().get(tid, "")
                ok = satisfied(kind, state) if state else False
                if ok is None:
                    waiting.append(f"{kind}:{self.shown(tid)} ({state})")
                elif not ok:
                    never.append(f"{kind}:{self.shown(tid)} ({state or 'no record'})")
        if never:
            return states.DEPENDENCY_NEVER, f"can never start: {', '.join(never)}"
        if waiting:
            return states.DEPENDENCY, f"waiting for {', '.join(waiting)}"
        return None

    def _singleton_blocker(self, job: Job) -> str | None:
        """Only one job of a (user, name) runs at a time. A running one blocks; so does an earlier
        pending singleton of the same pair (not held), so that two never start in the same pass and
        they run in submit order."""
        others = self.named().get((job.user, job.name), ())
        for o in others:
            if o.id != job.id and o.state in states.ON_NODE:
                return f"singleton: job {o.display_id} ({job.name!r}) is running"
        for o in others:
            if (o.id < job.id and o.state == states.PENDING and not o.held
                    and any(k == "singleton" for k, _ in o.deps)):
                return f"singleton: job {o.display_id} ({job.name!r}) is ahead of it"
        return None

    def shown(self, jid: int) -> str:
        """The id as users know it: `126_7` for an array task, never the internal task id."""
        if self._shown is None:
            self._shown = dict(self.snap.shown)
            self._shown.update((j.id, j.display_id) for j in self.snap.jobs if j.array_id is not None)
        return self._shown.get(jid, str(jid))

    def states(self) -> dict[int, str]:
        if self._state is None:
            self._state = dict(self.snap.ended)
            self._state.update((j.id, j.state) for j in self.snap.jobs)
        return self._state

    def named(self) -> dict[tuple[str, str], list[Job]]:
        if self._named is None:
            self._named = {}
            for j in sorted(self.snap.jobs, key=lambda j: j.id):
                self._named.setdefault((j.user, j.name), []).append(j)
        return self._named


def targets(jobs: Iterable[Job]) -> set[int]:
    """Every job id the given jobs depend on (what the daemon must know the state of)."""
    return {t for j in jobs for _, ids in j.deps for t in ids}

