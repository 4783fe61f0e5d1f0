"""ClusterBuilder: snapshots for pure policy tests, and summarize(plan) for readable assertions."""
from dataclasses import replace

from labq.scheduler import config as config_mod, states
from labq.scheduler.model import Attempt, Gpu, Job, Node, Snapshot

G = 1 << 30


class ClusterBuilder:
    def __init__(self, now: float = 1_000_000.0):
        self.now = now
        self.nodes: list[Node] = []
        self.jobs: list[Job] = []
        self.spent: dict[str, int] = {}
        self._next = 1

    def node(self, name, gpus=0, cpus=16, mem=64 * G, slots=16, model="fake", state="up", lease=30.0):
        gs = tuple(Gpu(f"GPU-{name}-{i}", i, model, 80 * G) for i in range(gpus))
        self.nodes.append(Node(name, cpus, mem, slots, gs, state, self.now + lease if lease else 0.0, self.now))
        return self

    def job(self, gpus=0, cpus=1, mem=0, time_limit=3600, qos="normal", account="default", user="alice",
            submit_offset=0.0, jid=None, **kw):
        jid = jid or self._next
        self._next = max(self._next, jid) + 1
        self.jobs.append(Job(id=jid, user=user, account=account, argv=("true",), workdir="/tmp", gpus=gpus,
                             cpus=cpus, mem=mem, time_limit=time_limit, qos=qos,
                             submit_time=self.now - 100 + submit_offset, **kw))
        return self

    def running(self, node, gpus=0, cpus=1, mem=0, started_ago=60.0, commit=(), rates=(), **kw):
        """A job already on `node`, holding its first free GPUs."""
        self.job(gpus=gpus, cpus=cpus, mem=mem, **kw)
        j = self.jobs.pop()
        n = next(n for n in self.nodes if n.name == node)
        held = {u for r in self.jobs if r.node == node for u in r.gpu_uuids}
        free = [g.uuid for g in n.gpus if g.uuid not in held][:gpus]
        a = Attempt(1, node, tuple(free), start_time=self.now - started_ago, dispatch_time=self.now - started_ago)
        self.jobs.append(replace(j, state=states.RUNNING, node=node, gpu_uuids=tuple(free), attempts=(a,),
                                 start_time=self.now - started_ago, commit=tuple(commit), rates=tuple(rates)))
        return self

    def spend(self, budget, micro):
        self.spent[budget] = micro
        return self

    def build(self) -> Snapshot:
        return Snapshot(self.now, tuple(self.nodes), tuple(self.jobs), tuple(sorted(self.spent.items())))


# The sweep of the demo: $120 for account eta (alice), 10 % reserve, $2 per GPU-hour.
SWEEP_TOML = """
[rates]
gpu_hour = 2.0
[accounts.eta]
users = ["alice"]
[[budgets]]
name = "eta-sweep"
account = "eta"
limit = 120.0
reserve = 0.1
"""


def cfg(text: str = "") -> config_mod.Config:
    return config_mod.loads(text)


def summarize(plan) -> dict:
    return {"places": {p.job_id: (p.node, p.gpus) for p in plan.places},
            "expires": sorted(e.job_id for e in plan.expires),
            "pending": {p.job_id: p.reason for p in plan.pending}}
