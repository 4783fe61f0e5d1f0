"""`labq simulate --compare` on the real excerpt of the KTH log and the small GPU trace: one table row
per policy, --json with one report per policy (each the same as a single-policy replay), a wait
plot, and bad lists as one line with exit 2. Also the Gantt panel's lanes: equal heights, a budget
of lanes, colours by account."""
import json
import os
import subprocess
import sys
from dataclasses import replace

import pytest
from click.testing import CliRunner

from labq.cli.group import cli
from tests.harness import DATA, ROOT

SMALL = os.path.join(DATA, "sim_small.csv")


def invoke(tmp_path, *args):
    empty = tmp_path / "labq.toml"
    empty.write_text("")
    return CliRunner().invoke(cli, ["--config", str(empty), "simulate", SMALL, "--nodes", "2x4", "--no-progress", *args])


def test_compare_prints_one_row_per_policy(tmp_path):
    r = invoke(tmp_path, "--compare", "fifo,backfill,fairshare")
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0].startswith("sim_small.csv: 23 jobs on 2 nodes")
    assert lines[1].split()[:4] == ["policy", "makespan", "util", "mean"]
    assert [ln.split()[0] for ln in lines[2:5]] == ["fifo", "backfill", "fairshare"]


def test_compare_json_matches_single_replays(tmp_path):
    r = invoke(tmp_path, "--compare", "fifo,backfill", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert [x["policy"] for x in out["compare"]] == ["fifo", "backfill"]
    for rep in out["compare"]:
        one = json.loads(invoke(tmp_path, "--policy", rep["policy"], "--json").output)
        for key in ("makespan_s", "wait_s", "completion_time_s", "bounded_slowdown", "cost", "utilisation"):
            assert rep[key] == one[key], key


@pytest.mark.parametrize("arg, needle", [("fifo", "two or more"), ("fifo,fifo", "named twice"),
                                         ("fifo,lottery", "expected one of")])
def test_bad_compare_lists_are_one_line_and_exit_2(arg, needle):
    env = dict(os.environ, LABQ_REDIS_URL="unix:///nonexistent/labq.sock", PYTHONPATH=ROOT)
    env.pop("LABQ_CONFIG", None)
    p = subprocess.run([sys.executable, "-m", "labq.cli.main", "simulate", SMALL, "--nodes", "2x4", "--compare", arg],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert p.returncode == 2 and needle in p.stderr, (p.stdout, p.stderr)
    assert len(p.stderr.strip().splitlines()) == 1 and not p.stdout


def test_compare_plot_draws_the_wait_distributions(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "waits.png"
    r = invoke(tmp_path, "--compare", "fifo,backfill", "--plot", str(out))
    assert r.exit_code == 0, r.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_gantt_lanes_fit_the_budget_with_one_colour_per_account():
    pytest.importorskip("matplotlib")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from labq.cli import simplot
    from labq.cli.whatif import parse_nodes
    from labq.scheduler.settings import config as config_mod
    from labq.scheduler.sim.engine import simulate
    from labq.scheduler.sim.policies import policy_config
    from labq.scheduler.sim.trace import TraceJob
    trace = [TraceJob(name=str(i), submit=float(i * 60), duration=3600.0, time_limit=7200, gpus=1 + i % 4,
                      cpus=2, user=f"u{i % 5}", account=f"acc{i % 12}") for i in range(200)]
    res = simulate(trace, parse_nodes("20x8"), policy_config(config_mod.Config(), "backfill"))
    chosen = simplot.chosen_nodes(res, simplot.by_node(res))
    assert sum(len(n.gpus) for n in chosen) <= simplot.LANES and len(chosen) == simplot.LANES // 8
    colours = simplot.account_colours(res, plt)
    assert len(colours) == 12 and len({c for c in colours.values()}) == simplot.LEGEND + 1   # the rest grey
    cpu = simulate([replace(t, gpus=0, cpus=10) for t in trace[:20]], parse_nodes("1x0:100"), policy_config(config_mod.Config(), "fifo"))
    lanes = simplot.lanes(cpu, cpu.nodes[0], simplot.by_node(cpu)[cpu.nodes[0].name])
    assert lanes and all(0 <= lane and lane + n <= simplot.CPU_LANES for lane, n, *_ in lanes)
