"""Whether a runner may claim an attempt: the attempt's record says it is this node's current one
(`fence`), and the runner's agent incarnation is still the node's (`epoch_over`)."""
import os

from labq.scheduler.jobs import states

from . import gang, launch


def fence(job, attempt: int, node: str) -> str | None:
    """Why this attempt must not run here, or None when it is the current attempt on this node."""
    if job is None:
        return "no such job"
    if job.state not in (states.RUNNING, states.PREEMPTING):
        return f"job is {job.state}, not {states.RUNNING}"
    if len(job.attempts) != attempt:
        return f"attempt {attempt} is not current (the job has {len(job.attempts)})"
    if gang.rank_of(job.attempts[-1], node) is None:
        return f"attempt {attempt} belongs to node {job.attempts[-1].node!r}, not {node!r}"
    return None


def epoch_over(s: launch.Settings, holder: str | None) -> str:
    """Why a runner must claim nothing more: its agent died, or the node's lease names another
    agent incarnation (its own expired and a new agent registered). A lease gone altogether is
    the claim's to see (PTTL -2: claimed, reported, never started)."""
    if s.agent_pid and os.getppid() != s.agent_pid:
        return "its agent is gone"
    if s.epoch and holder is not None and holder != s.epoch:
        return f"the node's lease belongs to another agent incarnation ({holder})"
    return ""
