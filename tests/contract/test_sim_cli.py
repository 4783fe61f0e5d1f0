"""`labq simulate` on the command line: the report, --json, --plot, and bad input as one line with
exit 2. These run without any Redis (a dead socket: the registered cluster is never needed)."""
import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from tests.harness import DATA, ROOT

SMALL = os.path.join(DATA, "sim_small.csv")
KTH = os.path.join(DATA, "kth_sp2_excerpt.csv")


def labq(*args):
    env = dict(os.environ, LABQ_REDIS_URL="unix:///nonexistent/labq.sock", PYTHONPATH=ROOT)
    env.pop("LABQ_CONFIG", None)
    return subprocess.run([sys.executable, "-m", "labq.cli.main", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=120)


def test_the_text_report():
    p = labq("simulate", SMALL, "--nodes", "2x4", "--policy", "backfill")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    for label in ("trace", "cluster", "policy", "makespan", "utilisation", "wait", "slowdown", "completion",
                  "cost", "refused", "held by budget", "preemptions", "timeouts", "replay"):
        assert any(line.startswith(label) for line in lines), label
    assert "backfill_depth 1" in p.stdout and "of GPUs" in p.stdout
    assert p.stderr == ""          # no progress bar when stderr is not a terminal


def test_a_cpu_machine_from_the_kth_excerpt_with_its_requested_times():
    p = labq("simulate", KTH, "--cpus", "100", "--extra", os.path.join(DATA, "kth_sp2_excerpt_extra.csv"),
             "--time-column", "req_time_s", "--policy", "fifo", "--json", "--progress")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["cluster"] == {"nodes": 1, "gpus": 0, "cpus": 100} and d["utilisation_of"] == "cpus"
    assert d["jobs"]["trace"] == 300 and d["jobs"]["completed"] + d["jobs"]["timeout"] == 300
    assert "300/300 jobs" in p.stderr                      # --progress forces the bar
    assert d["config"].startswith("weights qos 0")


@pytest.mark.parametrize("args,needle", [
    (["simulate", "/nonexistent/trace.csv", "--nodes", "2x4"], "no such file"),
    (["simulate", os.path.join(DATA, "plan_jobs.csv"), "--nodes", "2x4"], "missing column"),
    (["simulate", SMALL, "--nodes", "2y4"], "--nodes"),
    (["simulate", SMALL, "--nodes", "0x4"], "--nodes"),
    (["simulate", SMALL, "--cpus", "lots"], "--cpus"),
    (["simulate", SMALL, "--nodes", "2x4", "--policy", "lottery"], "--policy"),
    (["simulate", SMALL, "--nodes", "2x4", "--backfill-depth", "-1"], "--backfill-depth"),
    (["simulate", SMALL, "--nodes", "2x4", "--time-factor", "0"], "--time-factor"),
    (["simulate", SMALL, "--nodes", "2x4", "--time-column", "nope"], "--time-column"),
    (["simulate", SMALL, "--nodes", "2x4", "--extra", "/nonexistent/extra.csv"], "--extra"),
    (["simulate", SMALL], "--nodes"),                                       # no cluster: Redis is not there
])
def test_bad_input_is_one_line_and_exit_2(args, needle):
    p = labq(*args)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert needle in p.stderr and len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr


def test_plot_without_matplotlib_is_one_line_and_exit_2(tmp_path):
    """A matplotlib that cannot be imported: refused before the replay, one line, exit 2."""
    fake = tmp_path / "nomatplotlib" / "matplotlib"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('no matplotlib here')\n")
    env = dict(os.environ, LABQ_REDIS_URL="unix:///nonexistent/labq.sock", PYTHONPATH=f"{fake.parent}:{ROOT}")
    env.pop("LABQ_CONFIG", None)
    p = subprocess.run([sys.executable, "-m", "labq.cli.main", "simulate", SMALL, "--nodes", "2x4", "--plot",
                        str(tmp_path / "x.png")], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert p.returncode == 2 and "pip install 'labq[plot]'" in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and not (tmp_path / "x.png").exists()


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    from labq.cli.group import cli
    empty = tmp_path / "labq.toml"
    empty.write_text("")
    out = tmp_path / "replay.png"
    r = CliRunner().invoke(cli, ["--config", str(empty), "simulate", SMALL, "--nodes", "2x4", "--plot", str(out)])
    assert r.exit_code == 0, r.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and str(out) in r.output


def test_the_cpu_form_of_a_cluster():
    from labq.cli.simulate import cluster
    from labq.cli.whatif import parse_nodes
    (one,) = cluster(None, None, "100")
    assert (one.cpus, one.slots, len(one.gpus)) == (100, 100, 0)
    assert [n.cpus for n in cluster(None, "2x4,1x0", "32")] == [32, 32, 32]
    assert [n.cpus for n in parse_nodes("2x4:8,1x0")] == [8, 8, 16]
    a, b = parse_nodes("1x2:8:128G:NVIDIA A100-SXM4-80GB,1x1::")
    assert {g.model for g in a.gpus} == {"NVIDIA A100-SXM4-80GB"} and a.mem == 128 << 30
    assert (b.cpus, b.mem, b.gpus[0].model) == (16, 64 << 30, "fake")
