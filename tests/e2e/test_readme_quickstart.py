"""README's Quick start is run, not just read: on `labq up` of a machine with 2 CPUs and no GPU, every
command of its second shell runs (exit 0) and `labq del 1` cancels a job still running; `labq up
--gpus 2` announces fake GPUs and runs a `-G 1` job on one; the first block puts .venv/bin on PATH.
Real redis-server, scheduler and worker processes (`labq up`, tests/harness.LabqUp)."""
import os
import re
import shlex
import shutil

from labq.scheduler.jobs import states
from tests.harness import E2E_MARKS, ROOT, VENV_BIN, LabqUp, wait_for

pytestmark = E2E_MARKS

LAPTOP = """
[scheduler]
tick = 0.2
kill_wait = "5s"
[worker]
name = "laptop"
gpus = 0
cpus = 2
mem = "4G"
slots = 2
spool = "{spool}"
"""


def _readme() -> str:
    return open(os.path.join(ROOT, "README.md")).read()


def quick_start() -> list[list[str]]:
    block = _readme().split("<!-- quick-start -->", 1)[1].split("<!-- /quick-start -->", 1)[0]
    body = block.split("```sh\n", 1)[1].split("```", 1)[0]
    return [shlex.split(line, comments=True) for line in body.splitlines() if line.strip()]


def test_the_first_block_puts_the_venv_on_path():
    first = _readme().split("## Quick start on one machine", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    assert "make install" in first and 'export PATH="$PWD/.venv/bin:$PATH"' in first and "\nlabq up" in first


def test_the_quick_start_runs_on_a_machine_with_2_cpus_and_no_gpu():
    cmds = quick_start()
    assert len(cmds) >= 6 and all(c[0] == "labq" for c in cmds)
    assert not any(a in ("-G", "--gpus") for c in cmds for a in c), "no GPU here"
    with LabqUp(LAPTOP, prefix="labq-qs-") as up:
        text = open(up.log.name).read()
        first = text.split("submit with: ", 1)[1].splitlines()[0]
        assert "-G" not in first.split("(")[0] and "--gpus 2" in first, first
        os.makedirs(os.path.join(up.dir, "examples"))
        shutil.copy(os.path.join(ROOT, "examples", "train.py"), os.path.join(up.dir, "examples"))
        env = dict(up.env, PATH=f"{VENV_BIN}:/usr/bin:/bin")       # `python` is the venv's, as after the PATH line
        up.env = env
        for cmd in cmds:
            if cmd[1] == "del":     # the job is still running: the README's `labq del 1` has something to cancel
                wait_for(lambda: "R" in up.run("stat", "-h", "-o", "%t").stdout.split(), 60, what="job 1 to run")
            if cmd[1] == "logs":    # "its output so far": on a loaded machine the job may not have started yet
                wait_for(lambda: os.path.exists(os.path.join(up.dir, "labq-1.out")), 60, what="job 1's output file")
            p = up.run(*cmd[1:])
            assert p.returncode == 0, (cmd, p.stdout, p.stderr)
            if cmd[1] == "sub":
                assert p.stdout.strip() == "Submitted job 1"
            if cmd[1] == "del":
                assert re.search(r"job 1: (cancelled|cancelling)", p.stdout), p.stdout
        wait_for(lambda: up.run("acct", "-j", "1", "-P", "-n", "--format", "State").stdout.strip() == "CANCELLED",
                 60, what="job 1 to end cancelled")
        log = open(os.path.join(up.dir, "labq-1.out")).read()
        assert "epoch 1/" in log and "checkpoint saved" in log, log


def test_up_gpus_pretends_and_says_so():
    with LabqUp(LAPTOP, prefix="labq-qsg-", up=("up", "--gpus", "2")) as up:
        text = open(up.log.name).read()
        assert "2 FAKE GPUs" in text and "-G 1" in text.split("submit with: ", 1)[1].splitlines()[0], text
        p = up.run("sub", "--parsable", "-G", "1", "-c", "1", "-t", "5m", "-W", "--", "/bin/sh", "-c",
                   "echo $CUDA_VISIBLE_DEVICES")
        assert p.returncode == 0, p.stderr
        jid = p.stdout.strip().splitlines()[0]
        out = open(os.path.join(up.dir, f"labq-{jid}.out")).read()
        assert out.startswith("GPU-fake-laptop-"), out
        assert states.COMPLETED in up.run("show", jid).stdout
