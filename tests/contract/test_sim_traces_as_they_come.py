"""Traces as they come (issue 21's replay findings): no daemon queue limits in a replay unless asked,
a BOM in the header, cpus = 0, an --extra file that matches nothing, and an unwritable --plot path
refused before the replay — each one line, never a Redis error."""
import json
import os
import subprocess
import sys

from tests.harness import ROOT


def labq(*args, cwd=ROOT):
    env = dict(os.environ, LABQ_REDIS_URL="unix:///nonexistent/labq.sock", PYTHONPATH=ROOT)
    env.pop("LABQ_CONFIG", None)
    return subprocess.run([sys.executable, "-m", "labq", *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=120)


def _trace(path, n, bom=False, cpus="1"):
    rows = ["job_id,submit_s,duration_s,gpus,cpus"] + [f"j{i},0,10,1,{cpus}" for i in range(n)]
    path.write_text(("\ufeff" if bom else "") + "\n".join(rows) + "\n", encoding="utf-8")
    return str(path)


def test_a_replay_applies_no_queue_limit_the_traces_scheduler_did_not_have(tmp_path):
    conf = tmp_path / "labq.toml"
    conf.write_text("[scheduler]\nmax_pending = 5\nmax_pending_per_user = 5\n")
    trace = _trace(tmp_path / "t.csv", 12)
    p = labq("--config", str(conf), "simulate", trace, "--nodes", "1x1", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["jobs"]["refused"] == 0
    p = labq("--config", str(conf), "simulate", trace, "--nodes", "1x1", "--json", "--enforce-queue-limits")
    assert json.loads(p.stdout)["jobs"]["refused"] > 0


def test_a_bom_and_zero_cpus_load(tmp_path):
    p = labq("simulate", _trace(tmp_path / "t.csv", 3, bom=True, cpus="0"), "--nodes", "1x2", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["jobs"]["completed"] == 3


def test_an_extra_file_matching_no_job_is_refused(tmp_path):
    extra = tmp_path / "x.csv"
    extra.write_text("job_id,req_time_s\nother,60\n")
    p = labq("simulate", _trace(tmp_path / "t.csv", 3), "--nodes", "1x2", "--extra", str(extra))
    assert p.returncode == 2 and "no job_id in it matches" in p.stderr and "Traceback" not in p.stderr


def test_a_plot_into_a_missing_directory_is_refused_before_the_replay(tmp_path):
    p = labq("simulate", _trace(tmp_path / "t.csv", 3), "--nodes", "1x2", "--plot", "/missing/dir/x.png")
    assert p.returncode == 2, p.stderr
    assert "--plot: no such directory: /missing/dir" in p.stderr and "Redis" not in p.stderr
    assert p.stdout == "", "nothing replayed"
