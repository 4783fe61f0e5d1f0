"""Multi-node jobs in the views: `stat` (NODES, the compact node list, the capacity line), squeue
and sacct fields, `nodes`, and `report`'s GPU-hours over every node."""
from dataclasses import replace

from labq.cli import render, slurmfmt, statview
from labq.scheduler import report, states
from labq.scheduler.store import statrows
from tests.harness import ClusterBuilder

NOW = 1_000_000.0


def _gang():
    b = ClusterBuilder(now=NOW).node("node1", gpus=4).node("node2", gpus=4).node("node3", gpus=4)
    b.running_gang(["node1", "node2"], gpus=4, cpus=8, started_ago=3600.0)
    b.running("node3", gpus=1)
    return b


def test_stat_shows_the_node_count_and_the_compact_node_list_from_rows_and_records():
    b = _gang()
    gang = b.jobs[0]
    row = statrows.Row(statrows.row(gang))
    cells = statview.row_cells(row, NOW)
    assert statview.STAT_HEADERS[-2:] == ["NODES", "NODE(REASON)"]
    assert (cells[7], cells[-2], cells[-1]) == (8, 2, "node[1-2]")
    full = render.stat_row(gang, NOW)
    assert (full[7], full[-2], full[-1]) == (8, 2, "node[1-2]")
    one = statview.row_cells(statrows.Row(statrows.row(b.jobs[1])), NOW)
    assert (one[-2], one[-1]) == (1, "node3")
    line = statview.capacity_line(b.nodes, [statrows.Row(statrows.row(j)) for j in b.jobs])
    assert "GPUs 3/12 free" in line and "CPUs 31/48 free" in line


def test_squeue_and_sacct_fields_know_the_nodes():
    gang = _gang().jobs[0]
    assert slurmfmt.squeue("%D %N %R", [("1", gang)], NOW, header=False) == "2 node[1-2] node[1-2]"
    row = statrows.Row(statrows.row(gang))
    assert slurmfmt.squeue("%D %N", [("1", row)], NOW, header=False) == "2 node[1-2]"
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
