"""`labq acct --duplicates` (sacct's -D): each attempt of a job is its own row, with its own times,
exit code and cost, as sacct shows each record of a requeued job. The last attempt's row carries the
job's state; an earlier one how it ended (NODE_FAIL, PREEMPTED, ... or REQUEUED where its end
decided nothing: a checkpoint exit, an attempt no runner took)."""
from dataclasses import replace

from labq.scheduler.jobs import states
from labq.scheduler.jobs.model import Job

REQUEUED = "RQ"
LONG = {REQUEUED: "REQUEUED"}     # sacct's name of the state only an earlier attempt's row has

_ENDED = {"completed": states.COMPLETED, "exit": states.FAILED, "error": states.FAILED, "oom": states.OOM,
          "timeout": states.TIMEOUT, "cancelled": states.CANCELLED, "node_failure": states.NODE_FAIL,
          "preempted": states.PREEMPTING}


def attempt_state(j: Job, n: int) -> str:
    """The state shown on the row of attempt `n` (1-based) of ended job `j`."""
    if n == len(j.attempts):
        return j.state
    return _ENDED.get(j.attempts[n - 1].outcome or "", REQUEUED)


def views(jobs) -> list[Job]:
    """One job per row: each attempt as a job of that one attempt (start, end, exit code and cost
    its own, `restart_count` the restarts before it); a job that never ran, as itself."""
    out = []
    for j in jobs:
        if not j.attempts:
            out.append(j)
            continue
        for n, a in enumerate(j.attempts, 1):
            out.append(replace(j, state=attempt_state(j, n), start_time=a.start_time or a.dispatch_time,
                               end_time=a.end_time, exit_code=j.exit_code if n == len(j.attempts) else a.exit_code,
                               attempts=(a,), restart_count=n - 1))
    return out


def table_rows(rows: list[Job], committed: list[int]) -> list[tuple]:
    """`views` as the acct table's tuples (store/acctrows.TABLE_ORDER), ATTEMPTS holding the
    attempt's number; `committed`: each row's commitment."""
    from . import render
    return [(v.id, v.array_id, v.array_index, v.name, v.user, v.account, v.state, v.exit_code, v.start_time,
             v.end_time, render.elapsed(v, v.end_time or 0), v.gpus * (v.nodes or 1), v.restart_count + 1 if v.attempts else 0, c,
             v.cost) for v, c in zip(rows, committed)]
