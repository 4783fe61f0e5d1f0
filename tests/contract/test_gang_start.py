"""A gang's attempt is billed from its first part's process start (issue 35: "no gang part runs
unbilled"). The chaos soak saw a part on g3 run 3.5 s before the attempt's recorded start: the
leader that dispatched it was killed, its successor read that part's `started` and recorded
nothing, and the attempt's start became the later part's. On fakeredis and a real redis-server."""
import pytest

from labq.scheduler.daemon.loop import Scheduler
from labq.scheduler.jobs import states
from labq.scheduler.jobs.model import Gpu
from labq.scheduler.settings import config
from labq.scheduler.store.agentside import AgentStore
from tests.harness import FROZEN, K, job, submit, woke

CFG = config.loads('[scheduler]\nnode_lease = "30s"\n[rates]\ngpu_hour = 1.0\n')
NOW = 1_800_000_000.0
GANG = {"argv": ["python", "train.py"], "workdir": "/tmp", "gpus": 1, "cpus": 2, "nodes": 2, "time_limit": 7200}


@pytest.mark.parametrize("read_by_the_old_leader", [False, True])
def test_a_gang_is_billed_from_its_first_parts_start_across_a_leader_change(conns, read_by_the_old_leader):
    r, raw = conns
    agent = AgentStore(r, K)
    for n in ("a", "b"):
        agent.register(n, 8, 64 << 30, 4, [Gpu(f"GPU-{n}-{i}", i, "fake") for i in range(4)], "h", 1, 10 ** 6,
                       addr="127.0.0.1")
    s1 = Scheduler(r, CFG, me="s1", clock=FROZEN)
    s1.tick(NOW)
    submit(r, "alice", GANG, "g")
    s1.tick(NOW, woke(r))
    assert job(r, 1).state == states.RUNNING
    first = job(r, 1).attempts[0].parts[0][0]
    agent.post("started", 1, 1, first, {"pid": 11, "start_time": NOW + 1})
    if read_by_the_old_leader:
        s1.store.read_group([K.node_events(first)], pending=False)
    r.delete(K.leader)                       # s1 killed -9; its lease lapses; s2 leads
    s2 = Scheduler(r, CFG, me="s2", clock=FROZEN)
    assert s2.tick(NOW + 5)
    other = job(r, 1).attempts[0].parts[1][0]
    agent.post("started", 1, 1, other, {"pid": 12, "start_time": NOW + 4.5})
    s2.tick(NOW + 6)
    assert job(r, 1).attempts[0].start_time == NOW + 1


def test_a_gang_is_billed_from_its_first_parts_start_whatever_order_the_starts_are_read_in(conns):
    """Both parts' `started` read in one round, the later start first (one stream is read before
    the other, whatever the times): the attempt starts at the earlier."""
    r, raw = conns
    agent = AgentStore(r, K)
    for n in ("a", "b"):
        agent.register(n, 8, 64 << 30, 4, [Gpu(f"GPU-{n}-{i}", i, "fake") for i in range(4)], "h", 1, 10 ** 6,
                       addr="127.0.0.1")
    s = Scheduler(r, CFG, me="s1", clock=FROZEN)
    s.tick(NOW)
    submit(r, "alice", GANG, "g")
    s.tick(NOW, woke(r))
    for node, began in (("a", NOW + 4.5), ("b", NOW + 1)):
        agent.post("started", 1, 1, node, {"pid": 11, "start_time": began})
    s.tick(NOW + 6)
    assert job(r, 1).attempts[0].start_time == NOW + 1
    for node in ("a", "b"):
        agent.post("finished", 1, 1, node, {"outcome": "completed", "exit_code": 0, "start_time": NOW + 1,
                                            "end_time": NOW + 3601})
    s.tick(NOW + 3602)
    j = job(r, 1)
    assert j.state == states.COMPLETED and j.attempts[0].start_time == NOW + 1
    assert j.attempts[0].cost == 2 * 1_000_000     # 2 GPUs (1 a node) x 3600 s x $1/GPU-h
