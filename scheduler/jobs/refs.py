"""Job references as users write them: `42` (a job, or every task of array 42), `42_3`, `42_[1-3,7]`.

Apart from jobspec.py, which imports the job model and dataclasses (~14 ms of CPU), so that `labq show`
resolves an id without them (issue 39 item 4); jobspec.py re-exports these names.
"""
from __future__ import annotations

from ..errors import UsageError
from .bounds import DEFAULT_MAX_ARRAY

TYPE_CHECKING = False
if TYPE_CHECKING:     # annotations only: the client resolves to job views (store/jobview.py) as well
    import re
    from collections.abc import Callable, Collection

    from .model import Job

_MAX_ARRAY = DEFAULT_MAX_ARRAY    # job-id ranges like 42_[1-9] (no config at hand there)
_TASKS = r"^(\d+)_(?:(\d+)|\[([\d,\-]+)\])$"


def _tasks(text: str) -> re.Match[str] | None:
    """_TASKS's match of `text`; None without `re` where it holds no "_" (`labq show 42` imports
    neither `re` nor the `enum` it imports: issue 39 item 4)."""
    if "_" not in text:
        return None
    import re
    return re.match(_TASKS, text)


def tasks_named(text: str) -> int:
    """How many tasks `text` names (1 for a plain id), counted without building the set: what a
    request may name is bounded before anything is parsed (handlers.MAX_TASKS_NAMED)."""
    m = _tasks(text)
    if not m or m.group(3) is None:
        return 1
    n = 0
    for part in m.group(3).split(","):
        lo, _, hi = part.partition("-")
        if lo.isdigit() and len(lo) < 16 and (not hi or (hi.isdigit() and len(hi) < 16)):
            n += max(1, int(hi or lo) - int(lo) + 1)
    return n


def parse_task_ids(text: str) -> tuple[int, set[int]] | None:
    """`42_3` or `42_[1-3,7]` → (42, {1, 2, 3, 7}); None when `text` names no array task."""
    m = _tasks(text)
    if not m:
        return None
    if m.group(2) is not None:
        return int(m.group(1)), {int(m.group(2))}
    tasks: set[int] = set()
    for part in m.group(3).split(","):
        lo, dash, hi = part.partition("-")
        if not lo or (dash and not hi) or int(hi or lo) < int(lo) or int(hi or lo) - int(lo) > _MAX_ARRAY:
            raise UsageError(f"job id: expected 42_[1-3,7], got {text!r}")
        tasks.update(range(int(lo), int(hi or lo) + 1))
    return int(m.group(1)), tasks


def wanted_of(job: Job, wanted: Collection[int]) -> list[Job]:
    """`job` if its index is wanted; of one record standing for many ended tasks (`A_[i-j]`), each
    wanted task it names, as its own (`show A_5` after `del A`: issue 39 item 1)."""
    if not job.array_runs:
        return [job] if job.array_index in wanted else []
    return [t for i in sorted(wanted) if (t := job.task_at(i)) is not None]


def resolve_ref(text: str | int, job_of: Callable[[int], Job | None], tasks_of: Callable[[int], list[Job]],
                task_of: Callable[[int, int], Job | None] | None = None) -> list[Job]:
    """The jobs `text` names: `42` (a job, or the tasks of array 42) or `42_3`/`42_[1-3]` (tasks),
    looked up through `job_of(id)` and `tasks_of(array id)`. One rule for the client (which reads
    Redis) and the scheduler's handlers (which look in memory first); [] when nothing matches.
    `task_of(array id, index)`, where given, finds a few tasks without a walk over the array."""
    try:
        tasks = parse_task_ids(str(text))
        if tasks:
            a, wanted = tasks
            if task_of is not None and len(wanted) < 64:
                return [t for i in sorted(wanted) if (t := task_of(a, i)) is not None]
            return [t for j in tasks_of(a) for t in wanted_of(j, wanted)]
        jid = int(text)
    except ValueError:
        raise UsageError(f"job id: expected 42 or 42_3, got {text!r}") from None
    job = job_of(jid)
    if job is None:
        return []
    if job.array_id == jid:
        return tasks_of(jid) or [job]
    return [job]
