"""A node marked `unhealthy` (issue 35): its runners took no attempt within start_timeout (frozen,
hung, gone while the agent renews its lease). The scheduler marks it and dispatches nothing there
until one of its runners proves alive: a runner state written after the mark (worker/slot.py
rewrites its idle state every blocking pop, a heartbeat)."""
from .keys import Keys


def mark(r, k: Keys, node: str, reason: str, now: float) -> bool:
    """Mark `node` unhealthy; False when it already was (the first mark's time and reason stay)."""
    p = r.pipeline(transaction=True)
    p.hsetnx(k.node_health(node), "since", now)
    p.hsetnx(k.node_health(node), "reason", reason)
    return bool(p.execute()[0])


def clear(r, k: Keys, node: str) -> None:
    r.delete(k.node_health(node))


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
