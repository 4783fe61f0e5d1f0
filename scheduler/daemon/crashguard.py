"""The crash-cascade guard: a user whose attempts fail `crash_guard_failures` times within
`crash_guard_window` has every pending job held (reason `CrashCascade`) and an alert raised, so a
broken script or environment does not burn through a whole sweep. `labq release` lets them run.

Pure: the daemon feeds it attempt ends and writes what it returns. Once it trips, the user's count
starts again from zero, so a released sweep gets a fresh allowance instead of tripping at the next
failure.
"""
import bisect
import json
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from ..jobs import states
from ..jobs.model import Job
from ..settings.config import Config

# Outcomes that are the job's own failure. Timeouts, preemption, cancels and node failures are not.
FAILURES = frozenset({"exit", "oom", "error"})
# The newest ended jobs a new leader reads back to rebuild the counts: its reload stays bounded
# however many jobs ended within the window (issue 35: 200k of them outlasted the leader lease).
REBUILD_JOBS = 20_000


class CrashGuard:
    def __init__(self, failures: int, window: float):
        self.failures, self.window = failures, window
        self.recent: dict[str, list[float]] = {}   # user -> failure times in the window

    @classmethod
    def from_config(cls, cfg: Config) -> "CrashGuard":
        return cls(cfg.crash_guard_failures, cfg.crash_guard_window)

    @property
    def on(self) -> bool:
        return self.failures > 0 and self.window > 0

    def count(self, user: str, outcome: str | None, at: float) -> int:
        """What `record` would return for this end, counting nothing (the decider asks; the state
        records the end once its change is committed: state.apply)."""
        if not self.on or outcome not in FAILURES:
            return 0
        times = sorted([*self.recent.get(user, ()), at])
        while times and times[0] <= times[-1] - self.window:
            times.pop(0)
        return len(times) if len(times) >= self.failures else 0

    def record(self, user: str, outcome: str | None, at: float) -> int:
        """Count one attempt end; the number of failures in the window when this one trips the
        guard, else 0."""
        if not self.on or outcome not in FAILURES:
            return 0
        times = self.recent.setdefault(user, [])
        bisect.insort(times, at)          # events from several nodes may arrive out of order
        while times and times[0] <= times[-1] - self.window:
            times.pop(0)
        if len(times) < self.failures:
            return 0
        n = len(times)
        del self.recent[user]
        return n

    def rebuild(self, jobs: Iterable[Job], now: float) -> None:
        """After a restart: count the failed attempts that ended within the window (jobs from the
        active set and the recent history), oldest first."""
        self.rebuild_ends([(a.end_time, j.user, a.outcome) for j in jobs for a in j.attempts], now)

    def rebuild_ends(self, ends: Iterable[tuple[float | None, str, str | None]], now: float) -> None:
        """`rebuild` from (end time, user, outcome) of attempts, as the store reads them without
        decoding whole records."""
        recent = sorted((at, user, outcome) for at, user, outcome in ends
                        if at and at > now - self.window and outcome in FAILURES)
        self.recent.clear()
        for at, user, outcome in recent:
            self.record(user, outcome, at or 0.0)     # `at` is set: only ends within the window are kept

    def detail(self, count: int) -> str:
        return (f"held by the crash guard: {count} failed attempts within {_span(self.window)} "
                f"(labq release ID to let it run)")


def hold(jobs: Iterable[Job], user: str, detail: str) -> list[Job]:
    """The user's pending jobs, held with reason CrashCascade."""
    return [replace(j, held=True, reason=states.CRASH_GUARD, detail=detail)
            for j in jobs if j.user == user and j.state == states.PENDING]


def alert(user: str, count: int, window: float, held_ids: Iterable[int], now: float) -> dict[str, Any]:
    """The `crash_cascade` entry for the alerts stream (Keys.alerts: kind, scope, level, message, ts, data)."""
    held_ids = sorted(held_ids)
    return {"kind": "crash_cascade", "scope": f"user:{user}", "level": "warn",
            "message": (f"user {user}: {count} failed attempts within {_span(window)}; "
                        f"{len(held_ids)} pending job(s) held (labq release to let them run)"),
            "ts": now,
            "data": json.dumps({"user": user, "failures": count, "window_s": window, "held": held_ids},
                               separators=(",", ":"))}


def _span(seconds: float) -> str:
    """10m, 2h, 90s: the window as the config spells it."""
    s = int(seconds)
    for unit, size in (("h", 3600), ("m", 60)):
        if s >= size and s % size == 0:
            return f"{s // size}{unit}"
    return f"{s}s"
