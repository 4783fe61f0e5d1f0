"""A trace job at its submit: the shape the replay gives it, and whether `labq sub` would refuse it."""
from ..jobs.model import Job
from ..policy.budget import affordable_at_any_length, never_affordable
from ..policy.refusal import refusal_of_shape


def gang_shape(tj, nodes, most: int | None = None) -> tuple[int, int, int, int]:
    """(gpus, cpus, mem per node, nodes) of a trace job: its own, or, when it asks for more GPUs than
    any node has (of its model), a gang (`sub -N`) of whole nodes, its CPUs and memory split over them.
    `most`: most_gpus(nodes, tj.gpu_type), where the caller keeps it."""
    if tj.nodes > 1 or not tj.gpus:
        return tj.gpus, tj.cpus, tj.mem, tj.nodes
    if most is None:
        most = most_gpus(nodes, tj.gpu_type)
    if not most or tj.gpus <= most:
        return tj.gpus, tj.cpus, tj.mem, 1
    k = -(-tj.gpus // most)
    return most, -(-tj.cpus // k), -(-tj.mem // k), k


def most_gpus(nodes, gpu_type: str) -> int:
    """The most GPUs of the model (any, for "") one node has."""
    return max((sum(1 for g in n.gpus if not gpu_type or g.model == gpu_type) for n in nodes), default=0)


def refusal(sim, job: Job):
    """(kind, message) when `labq sub` would refuse the job in the replay `sim` (an engine.Simulator),
    else None. The queue bounds count every pending job, idle ones (idle.py) too."""
    cfg = sim.cfg
    if cfg.qos_named(job.qos) is None:
        return "qos", f"qos: unknown QoS {job.qos!r}"
    # policy.refusal in two parts: what the request, user and account decide, once per such key; then
    # the budgets, whose forecast reads each job's own time limit and estimate.
    key = (job.gpus, job.gpu_type, job.cpus, job.mem, job.nodes, job.user, job.account)
    if key not in sim._refusals:
        sim._refusals[key] = refusal_of_shape(job, sim.nodes, cfg)
    why, cheapest = sim._refusals[key]
    if why is None and cfg.budgets:
        priced = (*key, job.qos)
        always = sim._affordable.get(priced)
        if always is None:
            always = sim._affordable[priced] = affordable_at_any_length(job, cheapest, cfg)
        if not always:
            why = never_affordable(job, cheapest, cfg)
    if why:
        return "capacity" if why.startswith(("no node", "no set")) else "budget" if why.startswith("budget") else "cap", why
    if sim.queue_limits:
        pending = len(sim.queue)
        if pending + 1 > cfg.max_pending:
            return "queue", f"queue full: {pending} jobs pending, scheduler.max_pending={cfg.max_pending}"
        mine = sim.queue.per_user[job.user]
        if mine + 1 > cfg.max_pending_per_user:
            return "queue", f"user {job.user} has {mine} jobs pending, scheduler.max_pending_per_user={cfg.max_pending_per_user}"
    for cap, who in ((cfg.account_named(job.account), ("account", job.account)),
                     (cfg.user_named(job.user), ("user", job.user))):
        if cap is not None and cap.max_submit is not None and sim.active_by[who] + 1 > cap.max_submit:
            return "max_submit", (f"{who[0]} {who[1]} has {sim.active_by[who]} jobs pending or running, "
                                  f"max_submit={cap.max_submit}")
    return None
