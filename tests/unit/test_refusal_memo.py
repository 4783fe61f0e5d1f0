"""policy/refusal.Refusals, the daemon's submit check: the nodes are asked once per request shape while
the nodes and the config stand (a stream of alike submits asked them each time, issue 39), and it
says what `refusals` says, whatever changes between two submits."""
from dataclasses import replace

from labq.scheduler.jobs.model import Gpu, Job, Node
from labq.scheduler.policy import capacity, refusal
from labq.scheduler.policy.refusal import Refusals, refusals
from tests.harness import cfg

CAPS = """
[accounts.lab]
users = ["alice", "bob"]
max_gpus = 2
[accounts.strict]
users = ["alice"]
on_limit = "refuse"
max_running = 1
"""


def job(jid: int, user: str = "alice", account: str = "lab", **kw) -> Job:
    return Job(id=jid, user=user, account=account, argv=("true",), cpus=kw.pop("cpus", 1), **kw)


def gpu_node(name: str, n: int, runs: str = "") -> Node:
    return Node(name, cpus=16, mem=1 << 36, slots=4, runs=runs,
                gpus=tuple(Gpu(f"{name}-{i}", i, "A100", 80 << 30) for i in range(n)))


def test_alike_submits_ask_the_nodes_once_per_shape(monkeypatch):
    asked = []
    real = capacity.could_ever_hold
    monkeypatch.setattr(capacity, "could_ever_hold", lambda j, n: asked.append(n.name) or real(j, n))
    nodes, c, memo = (gpu_node("n1", 2), gpu_node("n2", 4)), cfg(CAPS), Refusals()
    for jid in range(1, 51):
        assert memo(job(jid, gpus=1), nodes, c) == (None, None)
    assert asked == ["n1", "n2"]
    memo(job(51, gpus=2), nodes, c)             # another shape: asked
    memo(job(52, user="bob", gpus=1), nodes, c)  # another user: asked
    assert len(asked) == 6
    # New nodes (the tick read them again): asked again, once.
    nodes = (gpu_node("n1", 2), gpu_node("n2", 4))
    memo(job(53, gpus=1), nodes, c)
    memo(job(54, gpus=1), nodes, c)
    assert len(asked) == 8
    # refusal.refusals, which the handler called before, asks every time.
    asked.clear()
    for jid in range(60, 70):
        refusal.refusals(job(jid, gpus=1), nodes, c)
    assert len(asked) == 20


def test_what_it_says_is_what_refusals_says_as_nodes_config_and_running_change():
    memo = Refusals()
    plain, strict = cfg(CAPS), cfg(CAPS.replace('on_limit = "refuse"', 'on_limit = "pend"'))
    running = [replace(job(900, account="strict"), state="running", node="n1")]
    both = (gpu_node("n1", 2), gpu_node("n2", 4))
    steps = [
        (both, plain, ()),
        ((gpu_node("n1", 2),), plain, ()),                      # the 4-GPU node left
        ((gpu_node("n1", 2, runs="bob"),), plain, ()),          # it runs bob's jobs only
        (both, plain, ()),
        (both, plain, running),         # the same nodes and config; alice runs one in strict: over it now
        ((gpu_node("n1", 2), gpu_node("n2", 4)), strict, running),  # config reloaded: strict pends
        ((), plain, ()),                                        # no node at all
    ]
    shapes = [dict(gpus=1), dict(gpus=3), dict(gpus=4, account="strict"), dict(cpus=32), dict(gpus=1, user="bob"),
              dict(account="strict"), dict(gpus=2, nodes=2), dict(gpus=1, gpu_type="H100")]
    said = set()
    for nodes, c, run in steps:
        for again in range(2):      # the second time from the memo
            for k, shape in enumerate(shapes):
                j = job(100 + k, **shape)
                got = memo(j, nodes, c, {}, run)
                assert got == refusals(j, nodes, c, {}, run), (nodes, shape, again)
                said.add(got[0] is None)
    assert said == {True, False}
