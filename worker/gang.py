"""One part of a multi-node job (a gang, `sub -N`): which part runs here, and the rendezvous that
gives every part the same MASTER_ADDR and MASTER_PORT.

The scheduler puts the gang's attempt on each of its nodes' dispatch lists; each node's runner finds
its part by its node's name in the attempt's node list (its rank: NODE_RANK). Node rank 0 picks a
free port on its own node and publishes it, with its address (worker.addr, else what the host name
resolves to, else 127.0.0.1), in its part's status hash; the other parts wait for it before they
start, so that `torchrun --master_addr=$MASTER_ADDR --master_port=$MASTER_PORT` agrees everywhere.
"""
import socket
import time
from dataclasses import dataclass, replace

from .launch import StartError

RENDEZVOUS_POLL = 0.05


@dataclass(frozen=True)
class Part:
    rank: int
    nodes: tuple[str, ...]
    gpus: tuple[str, ...]          # this part's GPUs
    master_addr: str = ""
    master_port: int = 0


def rank_of(attempt, node: str) -> int | None:
    """This node's part of the attempt (0 for a one-node attempt on it), or None: not ours."""
    if not attempt.parts:
        return 0 if attempt.node == node else None
    names = [n for n, _ in attempt.parts]
    return names.index(node) if node in names else None


def part_of(attempt, rank: int) -> Part:
    if not attempt.parts:
        return Part(0, (attempt.node,), tuple(attempt.gpus))
    return Part(rank, tuple(n for n, _ in attempt.parts), tuple(attempt.parts[rank][1]))


def node_addr(configured: str = "") -> str:
    """This node's address for the gang's other nodes: worker.addr, else the host name's address."""
    if configured:
        return configured
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def free_port() -> int:
    """A TCP port free on this node now (the kernel's choice): rank 0 listens on it shortly after."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def rendezvous(store, job_id: int, attempt: int, part: Part, addr: str, timeout: float, stopped) -> Part:
    """`part` with the master's address and port: published by rank 0, awaited by the others until
    `timeout` seconds pass or `stopped()` says why to give up (a StartError from the caller's view)."""
    if part.rank == 0:
        port = free_port()
        store.publish_master(job_id, attempt, addr, port)
        return replace(part, master_addr=addr, master_port=port)
    end = time.monotonic() + timeout
    while True:
        got = store.master(job_id, attempt)
        if got is not None:
            return replace(part, master_addr=got[0], master_port=got[1])
        why = stopped()
        if why:
            raise StartError(f"not started: {why} before node rank 0 ({part.nodes[0]}) published its address")
        if time.monotonic() >= end:
            raise StartError(f"not started: node rank 0 ({part.nodes[0]}) did not start within {timeout:.0f}s")
        time.sleep(RENDEZVOUS_POLL)
