"""A node marked `unhealthy` (issue 35): its runners took no attempt within start_timeout (frozen,
hung, gone while the agent renews its lease). The scheduler marks it and dispatches nothing there
until one of its runners proves alive: a runner state written after the mark (worker/slot.py
rewrites its idle state every blocking pop, a heartbeat)."""
from .keys import Keys


def put(p, k: Keys, node: str, reason: str | None, now: float) -> None:
    """Into the commit's transaction (Change.health): mark `node` unhealthy (the first mark's time and
    reason stay), or, `reason` None, clear its mark."""
    if reason is None:
        p.delete(k.node_health(node))
        return
    p.hsetnx(k.node_health(node), "since", now)
    p.hsetnx(k.node_health(node), "reason", reason)


def signs(r, k: Keys, nodes) -> tuple[dict[str, float], dict[str, float]]:
    """(when each marked node of `nodes` was marked, its runners' newest state time): whether one
    proved alive since (dispatch.healthy_again)."""
    return since(r, k, nodes), runner_beats(r, k, nodes)


def since(r, k: Keys, nodes) -> dict[str, float]:
    """When each of `nodes` that is marked was marked."""
    nodes = sorted(set(nodes))
    p = r.pipeline(transaction=False)
    for n in nodes:
        p.hget(k.node_health(n), "since")
    return {n: float(v) for n, v in zip(nodes, p.execute()) if v}


def runner_beats(r, k: Keys, nodes) -> dict[str, float]:
    """The newest runner state time of each node ("idle pid=… <time>"), 0 where none."""
    nodes = sorted(set(nodes))
    p = r.pipeline(transaction=False)
    for n in nodes:
        p.hvals(k.node_runners(n))
    out = {}
    for n, states in zip(nodes, p.execute()):
        out[n] = max((_time(v) for v in states), default=0.0)
    return out


def _time(state: str) -> float:
    try:
        return float(state.rsplit(" ", 1)[-1])
    except ValueError:
        return 0.0
