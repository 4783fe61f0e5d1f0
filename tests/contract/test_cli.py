"""The CLI on bad input: one line, exit 2, nothing sent (these run without any Redis)."""
import os
import subprocess
import sys

import pytest

from labq.cli.subcore import build_body, directives, parse_array, parse_gpus
from labq.scheduler.errors import UsageError
from tests.harness import ROOT


def labq(*args, stdin=None, env=None):
    e = dict(os.environ, LABQ_REDIS_URL="unix:///nonexistent/labq.sock", PYTHONPATH=ROOT, **(env or {}))
    e.pop("LABQ_CONFIG", None)
    return subprocess.run([sys.executable, "-m", "labq.cli.main", *args], input=stdin, capture_output=True, text=True,
                          env=e, cwd=ROOT, timeout=60)


@pytest.mark.parametrize("args,needle", [
    (["sub", "-t", "soon", "--", "true"], "--time"),
    (["sub", "--mem", "lots", "--", "true"], "--mem"),
    (["sub", "-G", "x", "--", "true"], "--gpus"),
    (["sub", "-c", "0", "--", "true"], "--cpus"),
    (["sub", "-a", "5-1", "--", "true"], "--array"),
    (["sub", "-a", "1-10%0", "--", "true"], "throttle"),
    (["sub", "--tag", "novalue", "--", "true"], "--tag"),
    (["sub", "/nonexistent/script.sh"], "script"),
    (["sub", "--"], "no command"),
    (["sub", "--bogus", "--", "true"], "--bogus"),
])
def test_bad_submit_input_exits_2_with_one_line(args, needle):
    p = labq(*args, stdin="")
    assert p.returncode == 2, p.stderr
    assert needle in p.stderr and "Traceback" not in p.stderr


def test_unreachable_redis_exits_4():
    p = labq("stat")
    assert p.returncode == 4 and "Traceback" not in p.stderr and p.stderr.count("\n") == 1


def test_config_check(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[scheduler]\nkill_wait = 'later'\n")
    p = labq("config", "check", str(bad))
    assert p.returncode == 2 and "scheduler.kill_wait" in p.stderr and "Traceback" not in p.stderr
    good = tmp_path / "good.toml"
    good.write_text("[scheduler]\nkill_wait = '10s'\n")
    assert labq("config", "check", str(good)).returncode == 0


def test_parsers():
    assert parse_gpus("2") == ("", 2) and parse_gpus("NVIDIA H100 80GB HBM3:4") == ("NVIDIA H100 80GB HBM3", 4)
    assert parse_array("1-12") == ([1, 12, 1], None) and parse_array("1-12:2") == ([1, 12, 2], None)
    assert parse_array("5") == ([5, 5, 1], None) and parse_array("1-12%4") == ([1, 12, 1], 4)
    assert directives("#!/bin/bash\n#LABQ -G 1 -t 2h\n# comment\n#LABQ -J 'my job'\necho hi\n#LABQ -c 9\n") == [
        "-G", "1", "-t", "2h", "-J", "my job"]
    with pytest.raises(UsageError):
        build_body({"mem": "12Q"}, ["true"], None)


def test_script_directives_apply_and_flags_win(tmp_path):
    """#LABQ directives fill only what the command line left unset."""
    import click

    from labq.cli.submit import _merge_directives, sub
    ctx = click.Context(sub)
    opts = {"gpus": None, "time_": "1h", "name": None}
    _merge_directives(ctx, opts, ["-G", "2", "-t", "5h", "-J", "d"])
    assert opts["gpus"] == "2" and opts["time_"] == "1h" and opts["name"] == "d"


def test_plan_worked_example_offline():
    import json
    p = labq("plan", "--nodes", "1x4:16:64G", "--jobs", "12", "-G", "1", "-c", "4", "--mem", "12G", "-t", "2h",
             "--budget", "120", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["concurrency"]["overall"] == 4 and d["waves"] == 3 and d["makespan_s"] == 21600
    assert d["cost"] == 48.0 and d["budget_remaining"] == 72.0
    assert [w["amount"] for w in d["warn_levels"]] == [84.0, 108.0]
    assert labq("plan", "--nodes", "4", "--jobs", "1", "-t", "1h").returncode == 2


def test_stat_compacts_pending_array_tasks():
    from dataclasses import replace

    from labq.cli.statview import compact
    from labq.scheduler.jobs.model import Job
    base = Job(id=0, user="a", account="x", argv=("true",), state="PD", reason="Resources")
    tasks = [replace(base, id=10 + i, array_id=10, array_index=i + 1, array_count=6) for i in range(6)]
    tasks[0] = replace(tasks[0], state="R", node="n1")
    tasks[4] = replace(tasks[4], reason="Priority")
    assert [label for label, _ in compact(tasks + [replace(base, id=20)])] == [
        "10_1", "10_[2-4]", "10_5", "10_6", "20"]


def test_task_id_ranges():
    from labq.scheduler.jobs.refs import parse_task_ids
    assert parse_task_ids("42_[1-3,7]") == (42, {1, 2, 3, 7}) and parse_task_ids("42_3") == (42, {3})
    assert parse_task_ids("42") is None
    with pytest.raises(UsageError):
        parse_task_ids("42_[3-1]")


def test_signal_flag():
    from labq.cli.subcore import parse_signal
    assert parse_signal("USR1@60") == ["USR1", 60] and parse_signal("@2m") == ["USR1", 120]
    assert parse_signal("sigterm@5") == ["TERM", 5]
    # sbatch's forms: no @ (60 s before, SLURM's default), a number, B: (the batch shell only), R:
    assert parse_signal("USR1") == ["USR1", 60] and parse_signal("10") == ["USR1", 60]
    assert parse_signal("B:USR1@60") == ["USR1", 60, "batch"] and parse_signal("R:USR2@9") == ["USR2", 9]
    with pytest.raises(UsageError):
        parse_signal("USR1@")


def test_checkpoint_outside_a_job_is_a_usage_error():
    p = labq("checkpoint")
    assert p.returncode == 2 and "inside a labq job" in p.stderr


def test_begin_forms():
    from labq.cli.subcore import parse_begin
    assert parse_begin("now+1h", now=1000.0) == 4600.0 and parse_begin("30m", now=0.0) == 1800.0
    assert parse_begin("2026-12-03T09:00") > 0
    with pytest.raises(UsageError):
        parse_begin("2026-13-40T99:00")
