"""The agent stops a runner before it looks whether the runner holds a result, and kills only one
that holds none (issue 35 item 2; found by bench/soak.py).

The soak's run: Redis killed for 8.8 s with a node lease of 4 s. The agent, unable to renew, read
the runners holding results, then killed its runners one by one; meanwhile a job exited 0 and its
runner saved its result - and was killed all the same. The result reached the scheduler too late, as a
node failure's afterthought, and the finished work ran again. Now each runner is SIGSTOPped first:
it cannot save anything between the look and the kill. Real processes, no Redis."""
import json
import os
import subprocess

from labq.worker import results
from tests.harness import E2E_MARKS, wait_for

pytestmark = E2E_MARKS


def state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def runner(tmp_path, name: str) -> subprocess.Popen:
    """A runner stand-in that saves its result the moment it may run on after `name` appears: a
    runner whose job has just exited."""
    gate = tmp_path / name
    return subprocess.Popen(["/bin/sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.02; done; "
                             f"echo saving > {gate}.saving; sleep 60"])


def test_a_runner_about_to_save_its_result_is_stopped_before_the_look(tmp_path):
    spool = str(tmp_path / "spool")
    p = runner(tmp_path, "gate")
    try:
        assert results.stop_unless_holding(spool, p.pid) is True
        assert state(p.pid) == "T", "stopped: it saves nothing from here to the kill"
        (tmp_path / "gate").touch()            # its job exits now: a running runner would save at once
        assert state(p.pid) == "T"
        p.kill()
        assert p.wait(30) == -9
        assert not (tmp_path / "gate.saving").exists(), "it never ran between the look and the kill"
    finally:
        p.kill()
        p.wait(30)


def test_a_runner_holding_a_result_runs_on_and_one_gone_is_left_alone(tmp_path):
    spool = str(tmp_path / "spool")
    p = subprocess.Popen(["sleep", "60"])
    try:
        os.makedirs(os.path.dirname(results.path(spool, 0)))
        with open(results.path(spool, 0), "w") as f:     # what results.keep writes, in runner p's name
            json.dump({"pid": p.pid, "entry": "7:1", "rank": 0, "body": {"outcome": "completed"}}, f)
        assert results.holders(spool) == {p.pid}
        assert results.stop_unless_holding(spool, p.pid) is False
        wait_for(lambda: state(p.pid) != "T", 30, what="the holder to run on")
    finally:
        p.kill()
        p.wait(30)
    assert results.stop_unless_holding(spool, p.pid) is False, "gone: nothing to stop or kill"
