"""A gang's accounting: `labq acct`'s GPUS is the job's total (nodes × GPUs per node) from every
source — Redis's acct rows, the records, the archive's rows, the archive read page by page — and
`report --by node` credits each part to its own node (its GPUs, an equal share of the cost). On
fakeredis and a real redis-server (`conns`), with the archive in SQLite."""
import pytest

from labq.scheduler.daemon.loop import Scheduler
from labq.scheduler.jobs import states
from labq.scheduler.jobs.model import Gpu
from labq.scheduler.money import report
from labq.scheduler.settings import config
from labq.scheduler.store import histpages
from labq.scheduler.store.agentside import AgentStore
from labq.scheduler.store.archive import Archive, Archiver
from labq.scheduler.store.history import History
from labq.scheduler.store.reads import Reader
from tests.harness import FROZEN, K, job, submit, woke

CFG = config.loads('[scheduler]\nnode_lease = "30s"\n[rates]\ngpu_hour = 1.0\n')
NOW = 1_800_000_000.0
GANG = {"argv": ["python", "train.py"], "workdir": "/tmp", "gpus": 4, "cpus": 2, "nodes": 2, "time_limit": 7200}


def _ended_gang(r, raw):
    agent = AgentStore(r, K)
    for n in ("a", "b"):
        agent.register(n, 8, 64 << 30, 4, [Gpu(f"GPU-{n}-{i}", i, "fake") for i in range(4)], "h", 1, 10 ** 6,
                       addr="127.0.0.1")
    s = Scheduler(r, CFG, me="s1", clock=FROZEN)
    s.tick(NOW)
    submit(r, "alice", GANG, "g")
    s.tick(NOW, woke(r))
    for n in ("a", "b"):
        agent.post("started", 1, 1, n, {"start_time": NOW})
    for n in ("a", "b"):
        agent.post("finished", 1, 1, n, {"outcome": "completed", "exit_code": 0, "end_time": NOW + 3600})
    s.tick(NOW + 3601)
    j = job(r, 1)
    assert j.state == states.COMPLETED and j.nodes == 2 and j.gpus == 4
    return j


def _gpus_column(rows) -> list[int]:
    return [v[11] for v in rows]


def test_acct_shows_every_gpu_of_a_gang_from_every_source(conns, tmp_path):
    r, raw = conns
    _ended_gang(r, raw)
    rows, records = Reader(r, K).acct_table(0, float("inf"), committed=lambda fresh: [0] * len(fresh))
    assert _gpus_column(rows) == [8] and records == [], "Redis's acct row"
    r.hdel(K.acct_rows, "1")
    _, records = Reader(r, K).acct_table(0, float("inf"), committed=lambda fresh: [0] * len(fresh))
    assert [j.gpus * j.nodes for j in records] == [8], "a record (cli/acct.py multiplies the same way)"
    path = str(tmp_path / "history.db")
    Archiver(r, K, Archive(path), keep=0).step(NOW + 10 ** 6)
    assert not r.exists(K.job(1))
    assert _gpus_column(Archive(path).acct_table(0, float("inf"))) == [8], "the archive's rows"
    remote = histpages.Remote(lambda op, body: histpages.answer(Archive(path), body))
    assert _gpus_column(remote.acct_table(0, float("inf"))) == [8], "the archive, page by page"
    assert History(path) is not None


@pytest.mark.parametrize("archived", [False, True])
def test_report_by_node_credits_each_part_to_its_node(conns, tmp_path, archived):
    r, raw = conns
    j = _ended_gang(r, raw)
    jobs = [j]
    if archived:        # the acct row keeps the parts
        path = str(tmp_path / "history.db")
        Archiver(r, K, Archive(path), keep=0).step(NOW + 10 ** 6)
        jobs = Archive(path).acct(0, float("inf"))
    rows = {d["node"]: d for d in report.by(jobs, ("node",))}
    assert set(rows) == {"a", "b"}
    assert rows["a"]["gpu_hours"] == rows["b"]["gpu_hours"] == 4.0
    assert rows["a"]["cpu_hours"] == rows["b"]["cpu_hours"] == 2.0
    assert rows["a"]["cost"] + rows["b"]["cost"] == j.cost / 10 ** 6 and abs(rows["a"]["cost"] - rows["b"]["cost"]) < 1e-5
    whole, = report.by(jobs, ("account",))
    assert whole["gpu_hours"] == 8.0 and whole["cost"] == j.cost / 10 ** 6 and whole["attempts"] == 1
