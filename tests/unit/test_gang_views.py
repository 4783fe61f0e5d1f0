"""Multi-node jobs in the views: `stat` (NODES, the compact node list, the capacity line), squeue
and sacct fields, `nodes`, and `report`'s GPU-hours over every node."""
from dataclasses import replace

from labq.cli import render, slurmfmt, statview
from labq.scheduler import whatif
from labq.scheduler.jobs import states
from labq.scheduler.jobs.model import Gpu, Job, Node
from labq.scheduler.money import report
from labq.scheduler.settings import config
from labq.scheduler.sim.engine import simulate
from labq.scheduler.sim.metrics import report as sim_report
from labq.scheduler.sim.policies import policy_config
from labq.scheduler.sim.submit import gang_shape
from labq.scheduler.sim.trace import TraceJob
from labq.scheduler.store import acctrows, statrows
from tests.harness import ClusterBuilder

NOW = 1_000_000.0
CURRENCY = config.loads("").rates.currency      # money is printed in the config's currency


def _gang():
    b = ClusterBuilder(now=NOW).node("node1", gpus=4).node("node2", gpus=4).node("node3", gpus=4)
    b.running_gang(["node1", "node2"], gpus=4, cpus=8, started_ago=3600.0)
    b.running("node3", gpus=1)
    return b


def test_stat_shows_the_node_count_and_the_compact_node_list_from_rows_and_records():
    b = _gang()
    gang = b.jobs[0]
    rows = statrows.parse([statrows.dumps(j) for j in b.jobs])
    _, cells, one = [line.split() for line in statview.rows_table(statview.rows_cells(rows, NOW), currency=CURRENCY).splitlines()]
    assert statview.STAT_HEADERS[-2:] == ["NODES", "NODE(REASON)"]
    assert (cells[-4], cells[-2], cells[-1]) == ("8", "2", "node[1-2]")
    full = render.stat_row(gang, NOW, currency=CURRENCY)
    assert (full[7], full[-2], full[-1]) == (8, 2, "node[1-2]")
    assert (one[-2], one[-1]) == ("1", "node3")
    for line in (statview.rows_capacity(b.nodes, rows), statview.capacity_line(b.nodes, b.jobs)):
        assert "GPUs 3/12 free" in line and "CPUs 31/48 free" in line


def test_squeue_and_sacct_fields_know_the_nodes():
    gang = _gang().jobs[0]
    assert slurmfmt.squeue("%D %N %R", [("1", gang)], NOW, header=False, currency=CURRENCY) == "2 node[1-2] node[1-2]"
    got = slurmfmt.sacct(slurmfmt.sacct_fields("NNodes,NodeList,ReqTRES"), [gang], {}, header=False, sep="|")
    assert got.strip() == "2|node[1-2]|cpu=16,mem=0B,node=2,gres/gpu=8"


def test_nodes_view_counts_a_gang_on_each_of_its_nodes():
    b = _gang()
    views = {n.name: render.node_dict(n, b.jobs) for n in b.nodes}
    assert views["node1"]["gpus_free"] == 0 and views["node2"]["gpus_free"] == 0
    assert views["node2"]["jobs"] == ["1"] and views["node3"]["gpus_free"] == 3


def test_report_counts_gpu_hours_across_nodes():
    b = _gang()
    gang = b.jobs[0]
    a = gang.current
    ended = replace(gang, state=states.COMPLETED, attempts=(replace(a, end_time=a.start_time + 3600,
                                                                      outcome="completed"),))
    [row] = report.by([ended], ("account",))
    assert row["gpu_hours"] == 8.0 and row["cpu_hours"] == 16.0


# -- labq plan and labq simulate ----------------------------------------------------------------------

def _nodes(count, gpus):
    return tuple(Node(f"n{i}", 16, 64 << 30, 16, tuple(Gpu(f"GPU-{i}-{g}", g, "fake") for g in range(gpus)))
                 for i in range(count))


def test_a_trace_job_beyond_one_node_becomes_a_gang_of_whole_nodes():
    big = TraceJob(name="big", submit=0.0, duration=100.0, time_limit=100, gpus=16, cpus=32, mem=64 << 30)
    assert gang_shape(big, _nodes(3, 8)) == (8, 16, 32 << 30, 2)
    assert gang_shape(replace(big, gpus=12), _nodes(3, 8)) == (8, 16, 32 << 30, 2)    # whole nodes
    assert gang_shape(replace(big, gpus=8), _nodes(3, 8)) == (8, 32, 64 << 30, 1)
    small = TraceJob(name="s", submit=0.0, duration=50.0, time_limit=50, gpus=8)
    res = simulate([big, small, replace(small, name="s2", submit=1.0)], _nodes(3, 8), policy_config(config.loads(""),
                                                                                                    "fifo"))
    jobs = {res.trace_of(i).name: j for i, j in res.jobs.items()}
    assert res.refused == [] and jobs["big"].state == states.COMPLETED and jobs["big"].nodes == 2
    assert len(jobs["big"].attempts[0].parts) == 2 and len(jobs["big"].attempts[0].gpus) == 16
    # the gang takes two nodes, the first small job the third; the second waits for a node to free
    assert jobs["s"].attempts[0].dispatch_time == jobs["big"].attempts[0].dispatch_time
    assert jobs["s2"].attempts[0].dispatch_time - jobs["big"].attempts[0].dispatch_time == 50
    rep = sim_report(res)
    assert rep["jobs"]["completed"] == 3
    # 24 GPUs for 3 trace jobs: the 16-GPU one is refused only when no 2 nodes could ever hold it
    res = simulate([big], _nodes(1, 8), policy_config(config.loads(""), "fifo"))
    assert [r.kind for r in res.refused] == ["capacity"] and "no set of 2 nodes" in res.refused[0].message


def test_what_if_runs_a_gang_on_its_node_count():
    job = Job(id=0, user="plan", account="", gpus=4, cpus=4, nodes=2, time_limit=3600)
    w = whatif.what_if(_nodes(5, 8), job, count=6, cfg=config.loads("[rates]\ngpu_hour = 1.0\n"))
    # 5 nodes hold 10 parts of 4 GPUs: 5 gangs at once, 6 gangs take two waves
    assert w.concurrency["overall"] == 5 and w.concurrency["gpus"] == 5 and w.waves == 2
    assert w.cost == 6 * 8 * 10**6          # 6 jobs x 8 GPUs x 1 h x $1


def test_plan_file_takes_a_nodes_column(tmp_path):
    p = tmp_path / "jobs.csv"
    p.write_text("count,gpus,cpus,time,nodes,name\n2,8,16,1h,2,ddp\n1,1,1,1h,,one\n")
    jobs = whatif.load_jobs(str(p), config.loads(""))
    assert [(j.name, j.nodes, j.gpus) for j in jobs] == [("ddp[1]", 2, 8), ("ddp[2]", 2, 8), ("one", 1, 1)]


def test_an_archived_gang_reports_the_same_gpu_and_cpu_hours():
    gang = _gang().jobs[0]
    a = gang.current
    ended = replace(gang, state=states.COMPLETED, end_time=a.start_time + 3600,
                    attempts=(replace(a, end_time=a.start_time + 3600, outcome="completed"),))
    archived = acctrows.AcctJob(*acctrows.row(ended, 0))
    assert archived.nodes == 2
    assert report.by([archived], ("account",)) == report.by([ended], ("account",))
