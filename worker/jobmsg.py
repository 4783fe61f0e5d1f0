"""The lines labq writes into a job's own output when it ends the job, as SLURM's slurmstepd does:

    labq: error: *** JOB 42 ON gpu1 CANCELLED AT 2026-12-02T16:00:00 DUE TO TIME LIMIT ***
    labq: error: *** JOB 42 ON gpu1 CANCELLED AT 2026-12-02T16:00:00 DUE TO PREEMPTION (SIGUSR1, grace 120s, then SIGTERM; requeued) ***
    labq: error: *** JOB 42 ON gpu1 CANCELLED AT 2026-12-02T16:00:00 ***
    labq: error: Detected 1 oom_kill event in JOB 42. Some of the job's processes were OOM Killed (memory limit 12G).

So a user reading `labq logs 42` learns why it stopped, where they look first. Every text is
here; the runner only decides when (worker/runner.py). Pure.
"""
import time

PREFIX = "labq: error:"
_DUE = {"timeout": "TIME LIMIT", "preempted": "PREEMPTION", "shutdown": "PREEMPTION",
        "orphaned": "NODE FAILURE", "fenced": "NODE FAILURE", "runner_killed": "NODE FAILURE",
        "gpu_lost": "NODE FAILURE", "gang_stop": "ANOTHER NODE OF THE JOB ENDING"}


def _at(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))


def stopped(why: str, job_id: str, node: str, at: float, signal: str = "", grace: float | None = None) -> str | None:
    """The line for a job labq stops for `why` (the runner's stop reasons), None for none."""
    if why == "cancelled":
        return f"{PREFIX} *** JOB {job_id} ON {node} CANCELLED AT {_at(at)} ***"
    due = _DUE.get(why)
    if due is None:
        return None
    detail = ""
    if due == "PREEMPTION":
        first = f"SIG{signal}" if signal else "a signal"
        detail = (f" ({first}, grace {grace:.0f}s, then SIGTERM; requeued)" if grace is not None
                  else f" ({first}; requeued)")
        if why == "shutdown":
            detail = detail[:-1] + ": the node agent is stopping)"
    elif due == "NODE FAILURE":
        detail = " (requeued unless --no-requeue)"
    return f"{PREFIX} *** JOB {job_id} ON {node} CANCELLED AT {_at(at)} DUE TO {due}{detail} ***"


def oom(job_id: str, events: int = 1, limit: str = "") -> str:
    """The line for a job the kernel (or labq's watchdog) killed for memory."""
    s = "" if events == 1 else "s"
    return (f"{PREFIX} Detected {events} oom_kill event{s} in JOB {job_id}. Some of the job's processes were "
            f"OOM Killed" + (f" (memory limit {limit})." if limit else "."))
