"""A job's private part — its script and the environment its submitter exported — for its owner
and admins, through the scheduler (`labq show --script`, `show --json`; issue 34).

Both may hold passwords and tokens (`export DB_PASSWORD=…`, `--export=WANDB_API_KEY=…`), so they
live apart from the job record, in keys the client role every user holds cannot read (keys.script,
keys.job_env, acl.NOT_READ). The scheduler reads them for whoever its request names: the user munge
vouched for (security.auth = "munge"; without munge, whoever the client says it is, as for every
other request). The reply is not remembered for retries (writes.put_reply remember=False): the
secret is not copied into a `done` key for a day.

Nodes: a node role reads no submission's keys either. At dispatch the scheduler copies the
attempt's script and environment under the node's name (keys.handover, dispatchq.push), the one
pattern a node role may GET and DEL (acl.py); the runner reads them before it claims and deletes
them once the process started (a day's TTL takes those of attempts never claimed). What the ACL
cannot fence: a node reads the copies of every attempt dispatched to it, for as long as they
exist, including a job's that another node runs too (a gang's parts each get a copy); a node's
root is trusted with the jobs it runs.
"""
from __future__ import annotations

from ..errors import RefusedError, UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:     # the client imports OP (`labq show --json`): neither the model nor store/reads.py
    from collections.abc import Sequence
    from typing import Any

    from ..jobs.model import Job

OP = "show_private"


def job_id(body: dict[str, Any]) -> int:
    """The job a request names (`body["job"]`, its numeric id); UsageError for anything else."""
    jid = body.get("job")
    if type(jid) is not int or jid <= 0:
        raise UsageError(f"job: expected a job id (a positive integer), got {str(jid)[:40]!r}")
    return jid


def allowed(job: Job | None, jid: int, user: str, admins: Sequence[str]) -> Job:
    """Job `jid` as read (in the table, Redis or the archive; None: none), if `user` may read its
    private part: its owner or an admin. UsageError where there is no such job, RefusedError for anyone else."""
    if job is None:
        raise UsageError(f"no such job: {jid}")
    if job.user != user and user not in admins:
        raise RefusedError(f"job {job.display_id} is {job.user}'s: only its owner and admins "
                           f"({', '.join(admins) or 'none set'}) read its script and exported environment")
    return job


def answer(job: Job, script: str | None, env: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """{ok, job_id, id, script, export, env}: the reply, from what the scheduler read for it
    (daemon/requests.py: the job, then its script and exported environment once `allowed`)."""
    return {"ok": True, "job_id": job.id, "id": job.display_id, "script": script, "export": job.export,
            "env": dict(env)}
