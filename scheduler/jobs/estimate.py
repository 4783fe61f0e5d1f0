"""Run times learned from ended jobs: what a job will probably take, and what that rests on.

Each attempt that ended on the job's own terms (completed, a nonzero exit, out of memory, its time
limit) is one sample of how long the submitter's work holds its allocation. Attempts cut short from
outside (preempted, cancelled, a node failure, a checkpoint-and-requeue) or that never started say
nothing about that, and are not learned.

A job's estimate comes from the most specific basis that has `min_samples` runs:

    (user, job name)  →  (user, tags)  →  user

and is the `quantile` (nearest rank: always a run time that was really seen) of that basis's last
`window` runs, capped by the job's time limit (the limit kills, so nothing can run longer).

Why a high quantile rather than the mean or the median: the estimate is used as an expected end
(backfill) and as a budget forecast. The mean is dragged by one run that crashed at once or hung for
days; the median is short half the time, and every short estimate lets backfill start a job that may
then delay a reservation. p75 (the default) is short one time in four and ignores up to a quarter of
the window being outliers either way. `min_samples` (3 by default) keeps a user's first one or two
runs from deciding for everything after.

Memory is bounded: `window` samples per basis, at most `max_keys` bases (the least recently used
one is dropped). Pure: no clock, no environment, no Redis — the daemon and the simulator feed it.
"""
from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass
from sys import intern

from .model import Job, evolve

TYPE_CHECKING = False
if TYPE_CHECKING:     # for annotations only: config.py is not this module's to import
    from ..settings.config import Config

Key = tuple[object, ...]     # a basis: ("name", user, name), ("tags", user, tags) or ("user", user)

# Outcomes that end an attempt on the job's own terms: its length is the work's length.
LEARNED_OUTCOMES = frozenset({"completed", "exit", "oom", "timeout"})
_SET_EST = getattr(Job, "learned_est").__set__      # a slot's own setter (Job is frozen), for stamp(own=True)
_SET_BASIS = getattr(Job, "learned_basis").__set__
STAMPS = 1024


@dataclass(frozen=True, slots=True)
class Estimate:
    seconds: int        # expected run time, capped by the job's time limit
    samples: int        # how many runs it rests on
    basis: str          # "user alice, name train" | "user alice, tags k=v" | "user alice"
    quantile: float
    newest: float       # end time of the newest run it rests on (never after the instant it is used)
    capped: bool = False

    def text(self) -> str:
        cap = ", capped at the time limit" if self.capped else ""
        return f"p{round(self.quantile * 100)} of {self.samples} runs of {self.basis}{cap}"


def keys(job: Job) -> list[tuple[Key, str]]:
    """The bases a job is estimated from, most specific first: (key, words for it)."""
    out: list[tuple[Key, str]] = []
    if job.name:
        out.append((("name", job.user, job.name), f"user {job.user}, name {job.name}"))
    if job.tags:
        tags = tuple(sorted(job.tags))
        out.append((("tags", job.user, tags), f"user {job.user}, tags " + ",".join(f"{k}={v}" for k, v in tags)))
    out.append((("user", job.user), f"user {job.user}"))
    return out


def run_seconds(job: Job) -> tuple[float, float] | None:
    """(run time, end time) of the job's last attempt when it ended on the job's own terms, else None."""
    a = job.current
    if a is None or a.outcome not in LEARNED_OUTCOMES or not a.end_time:
        return None
    began = a.start_time or a.dispatch_time
    if not began or a.end_time < began:
        return None
    return a.end_time - began, a.end_time


class Estimator:
    def __init__(self, quantile: float = 0.75, min_samples: int = 3, window: int = 32, max_keys: int = 100_000) -> None:
        if not 0 < quantile <= 1 or min_samples < 1 or window < min_samples or max_keys < 1:
            raise ValueError("estimator: expected 0 < quantile ≤ 1, 1 ≤ min_samples ≤ window, max_keys ≥ 1")
        self.quantile, self.min_samples, self.window, self.max_keys = quantile, min_samples, window, max_keys
        # key -> deque of (end time, seconds), oldest first; a basis seen once holds its one run bare (below)
        self._runs: OrderedDict[Key, deque[tuple[float, float]] | tuple[float, float]] = OrderedDict()
        self._cache: dict[Key, tuple[float, int, float]] = {}                       # key -> (seconds, samples, newest) while unchanged
        # (user, name, tags, time limit) -> what stamp writes, until the next run is learned: a stream of
        # submits from one shell is stamped alike, and its bases' texts, the Estimate and its text were
        # ~2 us of each stamp (issue 39). At most STAMPS kept (a replay's names are mostly one-offs).
        self._stamps: dict[tuple[object, ...], tuple[int | None, str]] = {}
        self.observed = 0

    @classmethod
    def from_config(cls, cfg: Config) -> Estimator:
        e = cfg.estimate
        return cls(e.quantile, e.min_samples, e.window, e.max_keys)

    def observe(self, job: Job, seconds: float, end: float) -> None:
        """Learn one run of `job` that took `seconds` and ended at `end`."""
        self.observed += 1
        self._stamps.clear()
        for key, _ in keys(job):
            runs = self._runs.get(key)
            run = (end, max(0.0, float(seconds)))
            if runs is None:
                # Bare until a second run: most names are seen once (a one-off run; a replayed trace's job
                # ids), and a deque each was ~600 bytes (~60 MB of a 200,000-job replay, issue 41: ≤ 500 MB).
                self._runs[key] = run
                if len(self._runs) > self.max_keys:
                    old, _ = self._runs.popitem(last=False)
                    self._cache.pop(old, None)
            else:
                self._runs.move_to_end(key)
                if isinstance(runs, deque):
                    runs.append(run)
                else:
                    self._runs[key] = deque((runs, run), maxlen=self.window)
            self._cache.pop(key, None)

    def observe_ended(self, job: Job) -> bool:
        """Learn the job's last attempt if it ended on the job's own terms; whether it was learned."""
        got = run_seconds(job)
        if got is None:
            return False
        self.observe(job, *got)
        return True

    def estimate(self, job: Job) -> Estimate | None:
        """The job's expected run time from the most specific basis with enough runs, or None."""
        for key, words in keys(job):
            got = self._value(key)
            if got is None:
                continue
            seconds, samples, newest = got
            capped = job.time_limit > 0 and seconds > job.time_limit
            return Estimate(job.time_limit if capped else max(1, round(seconds)), samples, words, self.quantile,
                            newest, capped)
        return None

    def stamp(self, job: Job, own: bool = False) -> Job:
        """The job with its estimate written into the record (`learned_est`, `learned_basis`). `own`: a
        job the caller alone holds (jobspec.job_from_submit's, numbered in place by the handler after),
        stamped in place: its copy (71 slots) was ~3 µs of the ~6 a stamp cost (issue 39)."""
        alike = (job.user, job.name, job.tags, job.time_limit)      # all that estimate() reads of a job
        got = self._stamps.get(alike)
        if got is None:
            e = self.estimate(job)
            # One text object for every job stamped alike (interned): each job kept its own copy, ~100 bytes
            # a job, ~20 MB of a 200,000-job replay's peak (issue 41: ≤ 500 MB) and of a deep pending queue.
            got = (None, "") if e is None else (e.seconds, intern(e.text()))
            if len(self._stamps) >= STAMPS:
                self._stamps.clear()
            self._stamps[alike] = got
        est, basis = got
        if est is None and job.learned_est is None:
            return job
        if own:
            _SET_EST(job, est)
            _SET_BASIS(job, basis)
            return job
        # evolve, not replace(): this runs once per submit, and replace() was ~15 µs of the ~100 µs a
        # plain submit costs the scheduler (bench/live_bench.py's drain).
        return evolve(job, learned_est=est, learned_basis=basis)

    def _value(self, key: Key) -> tuple[float, int, float] | None:
        if key in self._cache:
            return self._cache[key]
        kept = self._runs.get(key)
        if kept is None:
            return None
        runs = kept if isinstance(kept, deque) else (kept,)
        if len(runs) < self.min_samples:
            return None
        ordered = sorted(s for _, s in runs)
        rank = max(1, -(-len(ordered) * self.quantile // 1))     # nearest rank: ceil(q·n)
        got = (ordered[int(rank) - 1], len(ordered), max(t for t, _ in runs))
        self._cache[key] = got
        return got
