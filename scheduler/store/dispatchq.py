"""The scheduler's side of dispatch (see scheduler/daemon/dispatch.py): the per-node dispatch lists, the
runners' wake-up lists for controls, and taking back an attempt no runner claimed."""
from .keys import Keys

WITHDRAWN = "withdrawn"      # the `claimed` value the scheduler writes when it takes an attempt back


def entry(job_id: int, attempt: int) -> str:
    """A dispatch list's entry: "<job>:<attempt>", nothing else (the spec stays in the job record)."""
    return f"{job_id}:{attempt}"


def parse(raw: str) -> tuple[int, int] | None:
    """(job id, attempt) of a dispatch entry, or None for anything else."""
    jid, sep, n = raw.partition(":")
    if not sep or not (jid.isdigit() and n.isdigit()) or len(raw) > 40:
        return None
    return int(jid), int(n)

CONTROL_TTL = 7 * 86400
# A handed-over script and environment the runner never claimed (withdrawn, or its node died) goes:
# a runner claims within start_timeout (60 s) or the attempt is withdrawn; a day is far beyond it.
HANDOVER_TTL = 86400


def push(p, k: Keys, node: str, job_id: int, attempt: int, ref: int | None = None, script: bool = True,
         env: str | None = None) -> None:
    """Into a MULTI pipeline: the attempt goes out with the transaction that admits it; with `ref`
    (codec.env_ref), its submission's script and exported environment are copied under the node's
    name (keys.handover), the only copies a node role may read (acl.py), deleted at claim. `env`: the
    key that holds the environment's text (envs.sources: keys.env_text), else keys.job_env(ref)."""
    if ref is not None:
        for what, src in (("script", k.script(ref)),) * script + (("env", env or k.job_env(ref)),):
            dst = k.handover(node, job_id, what)
            p.copy(src, dst, replace=True)      # nothing where the submission has none
            if what == "env":
                p.set(dst, "[]", nx=True)       # always there: a runner tells "none" from "not handed over"
            p.expire(dst, HANDOVER_TTL)
    p.lpush(k.dispatch(node), entry(job_id, attempt))


def control_nodes(job, value: str) -> list[str]:
    """The nodes whose runners a control for `job` must wake: every part of a gang's current attempt
    (a gang stop, `stop:N`, goes out as the attempt ends, when the record names no node any more)."""
    if job is None:
        return []
    if value.startswith("stop:"):     # the attempt it names, even once the job runs a later one
        n = value[5:]
        a = job.attempts[int(n) - 1] if n.isdigit() and 0 < int(n) <= len(job.attempts) else None
        return [p for p, _ in a.parts] if a is not None else []
    a = job.current
    if a is not None and a.parts and job.node:
        return [n for n, _ in a.parts]
    return [job.node] if job.node else []


def to_runners(p, k: Keys, job, job_id: int, value: str) -> None:
    """With the control key written: wake the runner's blocking read (each part's, for a gang),
    and keep a gang's control on its parts, where it outlives the key (mark_parts)."""
    mark_parts(p, k, job, value)
    for node in control_nodes(job, value):
        wake_runner(p, k, node, job_id, value)


def mark_parts(p, k: Keys, job, value: str) -> None:
    """A gang's control is also kept in each part's own status hash of the attempt it concerns (a
    gang stop's, `stop:N`, else the current one), where that part's runner reads it with the
    control key (AgentStore.control). The key alone is not enough: the requeue or the end that
    the first part's report brings clears it a tick later, and a later control replaces it, so a
    part whose runner was slow to read it (a loaded node) missed its stop, preemption or cancel
    and ran on, billed to no one, for good."""
    if job is None:
        return
    n = value[5:] if value.startswith("stop:") else ""
    if n:
        a = job.attempts[int(n) - 1] if n.isdigit() and 0 < int(n) <= len(job.attempts) else None
    else:
        a = job.current if job.node and job.current is not None and not job.current.end_time else None
    for rank in range(len(a.parts) if a is not None else 0):
        p.hset(k.part(job.id, a.attempt, rank), "control", value)


def wake_runner(p, k: Keys, node: str, job_id: int, value: str) -> None:
    """Wake the runner of `job_id` blocked on its control list; the control key stays the truth."""
    key = k.node_control(node, job_id)
    p.lpush(key, value)
    p.expire(key, CONTROL_TTL)


def claims(r, k: Keys, attempts) -> dict[tuple[int, int], str | None]:
    """The `claimed` field of each (job, attempt): who took it, WITHDRAWN, or None (nobody yet)."""
    attempts = list(attempts)
    if not attempts:
        return {}
    p = r.pipeline(transaction=False)
    for jid, n in attempts:
        p.hget(k.attempt(jid, n), "claimed")
    return dict(zip(attempts, p.execute()))


def with_runners(r, k: Keys, nodes) -> set[str]:
    """The nodes whose agent reports persistent runners (labq:node:<n>:runners): only there is an
    unclaimed attempt known to be undelivered rather than waiting for a node-side that never claims."""
    nodes = sorted(set(nodes))
    p = r.pipeline(transaction=False)
    for n in nodes:
        p.exists(k.node_runners(n))
    return {n for n, hit in zip(nodes, p.execute()) if hit}


def withdraw(r, k: Keys, job_id: int, attempt: int | str) -> bool:
    """Take an unclaimed attempt back (`attempt`: "N.RANK" for a gang's part): True when the scheduler
    won the claim (no runner will run it), False when a runner claimed it first (it started; its
    events will tell)."""
    return bool(r.hsetnx(k.attempt(job_id, attempt), "claimed", WITHDRAWN))
