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


def test_fractional_gpus_are_rounded_up_and_counted(tmp_path):
    """0.5 and 1.25 GPUs hold 1 and 2 whole GPUs; the report says how many jobs were rounded."""
    p = tmp_path / "frac.csv"
    p.write_text("job_id,submit_s,duration_s,gpus,cpus\na,0,10,0.5,1\nb,0,10,1.25,1\nc,0,10,2,1\nd,0,10,0,4\n")
    r = labq("simulate", str(p), "--nodes", "1x4", "--policy", "fifo", "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["jobs"]["gpus_rounded_up"] == 2 and rep["jobs"]["completed"] == 4
    assert rep["utilisation_by"]["gpus"] is not None
    from labq.scheduler.sim.trace import load
    assert [(j.gpus, j.gpus_asked) for j in load(str(p))] == [(1, 0.5), (2, 1.25), (2, None), (0, None)]
    text = labq("simulate", str(p), "--nodes", "1x4", "--policy", "fifo").stdout
    assert "2 asked for a fraction of a GPU: rounded up" in text


def test_malformed_traces_name_the_row_and_column(tmp_path):
    cases = {"nan": ("j,0,nan,1", "duration_s"), "neg": ("j,0,10,-1", "gpus"), "word": ("j,zero,10,1", "submit_s")}
    for name, (row, column) in cases.items():
        p = tmp_path / f"{name}.csv"
        p.write_text("job_id,submit_s,duration_s,gpus\n" + row + "\n")
        r = labq("simulate", str(p), "--nodes", "1x4")
        assert r.returncode == 2 and f"{p}:2: {column}:" in r.stderr, (name, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    binary = tmp_path / "bin.csv"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe" * 50)
    r = labq("simulate", str(binary), "--nodes", "1x4")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr


def test_group_nodes_keep_each_groups_jobs_on_its_own_nodes(tmp_path):
    """vc-a's two 4-GPU jobs share its one node (one after the other) while vc-b's two nodes sit
    half idle; on a shared 3-node cluster all of them start at once."""
    trace = tmp_path / "g.csv"
    trace.write_text("job_id,submit_s,duration_s,gpus,cpus,user,group\na,0,100,4,1,u1,vc-a\nb,0,100,4,1,u1,vc-a\n"
                     "c,0,100,4,1,u2,vc-b\nd,10,50,1,1,u2,vc-b\n")
    groups = tmp_path / "groups.csv"
    groups.write_text("group,nodes\nvc-a,1x4\nvc-b,2x4\n")
    r = labq("simulate", str(trace), "--group-nodes", str(groups), "--policy", "fifo", "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["makespan_s"] == 200 and rep["cluster"] == {"nodes": 3, "gpus": 12, "cpus": 48}
    assert rep["jobs"]["completed"] == 4 and rep["wait_s"]["mean"] == 25.0     # b waits 100 s
    shared = json.loads(labq("simulate", str(trace), "--nodes", "3x4", "--policy", "fifo", "--json").stdout)
    assert shared["makespan_s"] == 150
    both = labq("simulate", str(trace), "--group-nodes", str(groups), "--compare", "fifo,backfill", "--json")
    assert [x["makespan_s"] for x in json.loads(both.stdout)["compare"]] == [200, 200], both.stderr


def test_bad_group_nodes_files_are_one_line(tmp_path):
    trace = tmp_path / "g.csv"
    trace.write_text("job_id,submit_s,duration_s,gpus,group\na,0,10,1,vc-a\nb,0,10,1,vc-b\n")
    cases = {"group,nodes\nvc-a,1x4\n": "job b is of group 'vc-b'", "group\nvc-a\n": "missing column 'nodes'",
             "group,nodes\nvc-a,lots\n": ":2: nodes:", "group,nodes\nvc-a,1x4\nvc-a,1x4\n": "appears twice"}
    for i, (text, needle) in enumerate(cases.items()):
        f = tmp_path / f"groups{i}.csv"
        f.write_text(text)
        r = labq("simulate", str(trace), "--group-nodes", str(f))
        assert r.returncode == 2 and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    f = tmp_path / "groups0.csv"
    r = labq("simulate", str(trace), "--group-nodes", str(f), "--nodes", "1x4")
    assert r.returncode == 2 and "leave out --nodes" in r.stderr


def test_fractional_cpus_are_rounded_up_and_counted(tmp_path):
    """A container's CPU quota (3.152 in a public heterogeneous-GPU trace) holds whole cores: 4 here."""
    p = tmp_path / "frac.csv"
    p.write_text("job_id,submit_s,duration_s,gpus,cpus,mem_gib\na,0,10,1,3.152,2.5\nb,0,10,1,4,1\nc,0,10,0,0.25,0\n")
    from labq.scheduler.sim.trace import load
    assert [(j.cpus, j.cpus_asked, j.mem) for j in load(str(p))] == [
        (4, 3.152, int(2.5 * (1 << 30))), (4, None, 1 << 30), (1, 0.25, 0)]
    r = labq("--config", "/dev/null", "simulate", str(p), "--nodes", "1x2:8", "--policy", "fifo", "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["jobs"]["cpus_rounded_up"] == 2 and rep["jobs"]["completed"] == 3
    text = labq("--config", "/dev/null", "simulate", str(p), "--nodes", "1x2:8", "--policy", "fifo").stdout
    assert "2 asked for a fraction of a CPU: rounded up to whole CPUs" in text


def test_a_replay_says_which_config_file_it_applies(tmp_path, capsys):
    """The machine's config changes a replay (its caps and budgets bind trace jobs): the report names
    the file, and the system's own file, applied unnamed, is said on stderr before the replay."""
    conf = tmp_path / "labq.toml"
    conf.write_text('[accounts.vision]\nusers = ["u1"]\nmax_gpus = 1\n')
    trace = _trace(tmp_path / "t.csv", 3)
    r = labq("--config", str(conf), "simulate", trace, "--nodes", "1x4", "--policy", "fifo", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["config_file"] == str(conf) and r.stderr == ""
    r = labq("--config", str(conf), "simulate", trace, "--nodes", "1x4", "--policy", "fifo")
    assert f"config file    {conf}" in r.stdout
    r = labq("--config", "/dev/null", "simulate", trace, "--nodes", "1x4", "--policy", "fifo", "--json")
    assert json.loads(r.stdout)["config_file"] is None
    from labq.cli.simulate import _say_which_config
    from labq.scheduler.settings import config
    from labq.scheduler.settings.clientconf import DEFAULT_PATH
    system = config.loads(conf.read_text(), source=DEFAULT_PATH)
    _say_which_config(system, as_json=False)
    assert f"applying this machine's {DEFAULT_PATH} (account caps included)" in capsys.readouterr().err
    for cfg, as_json in ((system, True), (config.loads(conf.read_text(), source=str(conf)), False)):
        _say_which_config(cfg, as_json)
        assert capsys.readouterr().err == ""
