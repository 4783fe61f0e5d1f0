"""sbatch's spellings on labq's command line, through both parsers (the fast path, fast.py, and
click, submit.py), and into the request body: --kill-on-invalid-dep=yes|no, --mem-per-cpu (the job's
memory is its CPUs × it), --ntasks-per-node 1, --signal without @ and with B:; `stat -h` is
squeue's --noheader (help stays on --help). What labq cannot do is one line, exit 2."""
import os
import subprocess
import sys

import click
import pytest

from labq.cli import fast, sbatch
from labq.cli.subcore import build_body
from labq.cli.submit import sub
from labq.scheduler.errors import UsageError
from tests.harness import ROOT

G = 1 << 30


def both(*argv) -> list[dict]:
    """The params of `labq sub argv` as the fast path and as click read them."""
    out = [fast.parse("sub", list(argv))]
    out.append(sub.make_context("sub", list(argv)).params)
    return out


def test_kill_on_invalid_dep_takes_sbatch_yes_and_no():
    for params in both("--kill-on-invalid-dep=yes", "--", "true"):
        assert params["kill_on_invalid_dep"] is True
    for params in both("--kill-on-invalid-dep=no", "--", "true"):
        assert not params["kill_on_invalid_dep"]
    for params in both("--kill-on-invalid-dep", "--", "true"):
        assert params["kill_on_invalid_dep"] is True
    # after --, the command's own arguments are left alone
    assert both("--", "prog", "--kill-on-invalid-dep=no")[0]["args"] == ("prog", "--kill-on-invalid-dep=no")
    assert fast.parse("sub", ["--kill-on-invalid-dep=maybe", "--", "true"]) is None      # click says it
    with pytest.raises(UsageError, match="expected yes or no"):
        sub.make_context("sub", ["--kill-on-invalid-dep=maybe", "--", "true"])


def test_mem_per_cpu_gives_the_job_cpus_times_it():
    for params in both("-c", "4", "--mem-per-cpu", "3G", "--", "true"):
        assert build_body(params, ["true"], None)["mem"] == 12 * G
    for params in both("--mem-per-cpu=2G", "--", "true"):       # one CPU by default
        assert build_body(params, ["true"], None)["mem"] == 2 * G
    with pytest.raises(UsageError, match="either it or --mem"):
        build_body({"mem": "1G", "mem_per_cpu": "1G"}, ["true"], None)
    flags, ignored = sbatch.translate(["--mem-per-cpu=4G", "-c", "2"])
    assert ignored == [] and flags == ["--mem-per-cpu", "4G", "--cpus", "2"]


def test_ntasks_per_node_one_is_a_flag_and_more_is_refused_with_what_to_do():
    for params in both("--ntasks-per-node", "1", "--", "true"):
        assert "ntasks_per_node" not in build_body(params, ["true"], None)
    for params in both("--ntasks-per-node=4", "--", "true"):
        with pytest.raises(UsageError, match="torchrun --nproc-per-node"):
            build_body(params, ["true"], None)


def test_signal_forms_reach_the_body():
    for argv, want in ((["--signal", "USR1"], ["USR1", 60]), (["--signal=B:USR1@60"], ["USR1", 60, "batch"]),
                       (["--signal", "R:USR2@2m"], ["USR2", 120]), (["--signal", "12"], ["USR2", 60])):
        for params in both(*argv, "--", "true"):
            assert build_body(params, ["true"], None)["signal"] == want, argv


def labq(*args):
    env = dict(os.environ, LABQ_REDIS_URL="unix:///nonexistent/labq.sock", PYTHONPATH=ROOT)
    env.pop("LABQ_CONFIG", None)
    return subprocess.run([sys.executable, "-m", "labq.cli.main", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=60, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("args,needle", [
    (["sub", "--kill-on-invalid-dep=maybe", "--", "true"], "expected yes or no"),
    (["sub", "--ntasks-per-node", "8", "--", "true"], "torchrun"),
    (["sub", "--mem", "1G", "--mem-per-cpu", "1G", "--", "true"], "--mem-per-cpu"),
    (["sub", "--signal", "USR1@", "--", "true"], "--signal"),
])
def test_what_labq_refuses_is_one_line_exit_2(args, needle):
    p = labq(*args)
    assert p.returncode == 2 and needle in p.stderr and p.stderr.count("\n") == 1, p.stderr


def test_stat_h_drops_the_header_and_help_stays_on_help():
    assert fast.parse("stat", ["-h"])["noheader"] is True
    from labq.cli.query import stat
    assert stat.make_context("stat", ["-h"]).params["noheader"] is True
    assert "--noheader" in stat.get_help(click.Context(stat))
    p = labq("stat", "--help")
    assert p.returncode == 0 and "--noheader" in p.stdout
    p = labq("stat", "-h")          # a query: Redis unreachable (exit 4), not help
    assert p.returncode == 4 and "Usage" not in p.stdout, (p.stdout, p.stderr)
