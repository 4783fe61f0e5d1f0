"""Log file patterns (`-o`/`-e`): %j job id, %A array job id, %a task index, %x name, %u user,
%r restart count, %n node rank (a gang's part; 0 on one node), %N node name, %% a literal percent.
Relative paths are relative to the job's working directory. A gang's parts share one file unless
the pattern has %n or %N."""
from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:     # annotations only: `labq show` passes a job view (store/jobview.py), without the model
    from .model import Job

DEFAULT_OUT = "labq-%j.out"
PATTERN = r"%([jAaxurnN%])"


def expand(job: Job, pattern: str, rank: int = 0, node: str = "") -> str:
    values = {
        "j": str(job.array_id if job.array_id is not None else job.id) + (
            f"_{job.array_index}" if job.array_id is not None else ""),
        "A": str(job.array_id if job.array_id is not None else job.id),
        "a": str(job.array_index if job.array_index is not None else ""),
        "x": job.name,
        "u": job.user,
        "r": str(job.restart_count),
        "n": str(rank),
        "N": node or job.node,
        "%": "%",
    }
    path = _sub(pattern or DEFAULT_OUT, values)
    return path if os.path.isabs(path) else os.path.join(job.workdir, path)


def _sub(pattern: str, values: dict[str, str]) -> str:
    """re.sub(PATTERN, values of each %X, pattern) by hand, left to right as re.sub: `labq show` prints
    the log paths, and `re` (with the `enum` it imports) was ~a fifth of its instructions (issue 39 item 4)."""
    out: list[str] = []
    i = 0
    while (j := pattern.find("%", i)) >= 0 and j + 1 < len(pattern):
        c = pattern[j + 1]
        if c in values:
            out += (pattern[i:j], values[c])
            i = j + 2
        else:
            out.append(pattern[i:j + 1])
            i = j + 1
    out.append(pattern[i:])
    return "".join(out)


def out_path(job: Job, rank: int = 0, node: str = "") -> str:
    return expand(job, job.out or DEFAULT_OUT, rank, node)


def err_path(job: Job, rank: int = 0, node: str = "") -> str:
    """Where stderr goes: its own pattern, else the same file as stdout."""
    return expand(job, job.err, rank, node) if job.err else out_path(job, rank, node)
