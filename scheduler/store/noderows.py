"""The nodes as the scheduler reads them every tick: the registered set, each node's record, lease,
admin state and health, in one round trip (store/wire.py) where the set is the one read last time."""
import json

from ..jobs.model import Gpu, Node
from . import wire
from .keys import Keys


def _per_node(k: Keys, n: str) -> list[tuple]:
    lease = k.node_lease(n)
    return [("HGETALL", k.node(n)), ("PTTL", lease), ("GET", k.node_admin(n)), ("GET", lease),
            ("HGETALL", k.node_health(n))]


def commands(k: Keys, known: list[str]) -> list[tuple]:
    """What `read` asks in its round trip: the registered set, then the records of the `known` names."""
    return [("SMEMBERS", k.nodes), *[c for n in known for c in _per_node(k, n)]]


def read(r, k: Keys, now: float, known: list[str], got: list | None = None) -> tuple[list[str], tuple[Node, ...]]:
    """(the registered names, sorted; the nodes at `now`). `known`: the names read last time, whose
    records are asked for with the set; a set that changed costs a second round trip. `got`: the
    replies to `commands(k, known)` where another round trip carried them (the loop's wait for a
    wake-up, store/requestq.py), decoded."""
    if got is None:
        got = wire.call(r, commands(k, known))
    if got is None:
        return _slow(r, k, now)
    names = sorted(got[0])
    if names != known:
        got = [None, *(wire.call(r, [c for n in names for c in _per_node(k, n)]) or [])]
        if len(got) != 1 + 5 * len(names):
            return _slow(r, k, now)
    res = got[1:]
    for i in range(0, len(res), 5):
        res[i], res[i + 4] = wire.hash_of(res[i]), wire.hash_of(res[i + 4])
    return names, _nodes(names, res, now)


def _slow(r, k: Keys, now: float) -> tuple[list[str], tuple[Node, ...]]:
    """Through redis-py (Sentinel, TLS, fakeredis): the set, then the records."""
    names = sorted(r.smembers(k.nodes))
    if not names:
        return names, ()
    p = r.pipeline(transaction=False)
    for n in names:
        for c in _per_node(k, n):
            p.execute_command(*c)
    return names, _nodes(names, p.execute(), now)


def _nodes(names: list[str], res: list, now: float) -> tuple[Node, ...]:
    out = []
    for i, n in enumerate(names):
        h, pttl, admin, holder, health = res[5 * i:5 * i + 5]
        if not h:
            continue
        gpus = tuple(Gpu(u, int(ix), m, int(mem)) for u, ix, m, mem in json.loads(h.get("gpus", "[]")))
        expiry = now + pttl / 1000 if pttl and pttl > 0 else 0.0
        # A lease of another epoch than the registered agent's: that agent is not alive in it.
        if h.get("epoch") and holder != h["epoch"]:
            expiry = 0.0
        state = "down" if expiry <= now else (admin or "up")
        reason = health.get("reason", "") if health else ""
        if state == "up" and health:
            state = "unhealthy"      # no work until a runner proves alive (events.py)
        out.append(Node(n, int(h["cpus"]), int(h["mem"]), int(h["slots"]), gpus, state, expiry,
                        float(h.get("hb", 0)), h.get("runs", ""), reason))
    return tuple(out)
