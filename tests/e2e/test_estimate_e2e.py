"""Run times learned from history, end to end on real processes (issue 19 part 2): three `train` jobs
end, then `labq sub --test-only` and `labq show` print the estimate and its basis, and `labq prio`
shows the short-job factor in its own column (priority.short_job_weight set) and in --json."""
import json

from labq.scheduler.jobs import states
from tests.harness import E2E, E2E_MARKS

pytestmark = E2E_MARKS  # the e2e/redis marks and the skip without redis-server

CONFIG = """
[scheduler]
tick = 0.2
kill_wait = "2s"
node_lease = "10s"
[priority]
short_job_weight = 5
[accounts.eta]
users = ["{user}"]
[worker]
name = "e2e-node"
gpus = 2
cpus = 8
mem = "16G"
slots = 4
spool = "{spool}"
run_as = "self"
"""


def test_show_test_only_and_prio_print_the_learned_estimate():
    e = E2E(CONFIG)
    try:
        before = e.labq("sub", "--test-only", "-A", "eta", "-J", "train", "-t", "10m", "--", "true")
        assert before.returncode == 0, before.stderr
        assert "estimated run time: none yet (fewer than 3 runs of user" in before.stdout, before.stdout
        done = [e.sub("-J", "train", "-t", "10m", "--", "sh", "-c", "sleep 1") for _ in range(3)]
        for jid in done:
            assert e.wait_state(jid, states.TERMINAL).state == states.COMPLETED
        basis = "p75 of 3 runs of user {}, name train"
        user = e.job(done[0]).user
        ask = e.labq("sub", "--test-only", "-A", "eta", "-J", "train", "-t", "10m", "--", "true")
        assert ask.returncode == 0, ask.stderr
        assert "estimated run time 00:00:0" in ask.stdout and basis.format(user) in ask.stdout, ask.stdout
        blocker = e.sub("-G", "2", "-t", "10m", "--", "sleep", "300")
        e.wait_state(blocker, {states.RUNNING})
        waiting = e.sub("-J", "train", "-G", "2", "-t", "10m", "--", "true")
        shown = e.labq("show", str(waiting))
        assert shown.returncode == 0, shown.stderr
        assert "estimated run time 00:00:0" in shown.stdout and basis.format(user) in shown.stdout, shown.stdout
        table = e.labq("prio").stdout.splitlines()
        assert "short jobs 5" in table[0] and table[1].split()[-1] == "SHORT", table
        row = next(line for line in table if line.split()[0] == str(waiting)).split()
        p = e.labq("prio", "--json")
        [got] = json.loads(p.stdout)["jobs"]
        assert got["job_id"] == waiting and got["weighted"]["short"] > 0
        assert float(row[-1]) == round(got["weighted"]["short"], 2)
        e.labq("del", str(blocker), str(waiting))
    finally:
        e.close()
