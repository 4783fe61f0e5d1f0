"""`labq wait` on an array waits on the array as a whole: one pause, then one read of every task
still open, so a 300-task array that ends at once is waited for once, not once per task (it was a
0.2 s sleep per unfinished task: 54.5 s for an array that ran 2.4 s). Real redis-server, the
daemon ticking in this process, the thin client the CLI uses; the pauses are counted, not slept."""
import time

from labq.cli.hot import wait_for_jobs
from labq.scheduler.thinclient import ThinClient
from tests.harness import BODY, finish, reply, setup, submit, woke


def test_a_300_task_array_is_waited_for_as_a_whole(redis_server, real_redis, capsys):
    r = real_redis
    now = time.time()
    s = setup(r, r, now)
    submit(r, "alice", {**BODY, "gpus": 0, "cpus": 1, "mem": 0, "array": [0, 299, 1]}, "arr")
    s.tick(now + 1, woke(r))
    first = reply(r, "arr")["job_id"]
    pauses = []

    def sleep(secs):            # while the client pauses, every task runs and ends (16 slots at a time)
        pauses.append(secs)
        t = now + 2
        while len(pauses) == 1 and any(s.store.job(i).state != "CD" for i in range(first, first + 300)):
            for jid in range(first, first + 300):
                if s.store.job(jid).state == "R":
                    finish(r, jid, 1, "completed", 0, t)
            s.tick(t + 1, woke(r))
            t += 2
    c = ThinClient(redis_server.url)
    assert wait_for_jobs(c, [str(first)], sleep=sleep) == 0
    assert len(pauses) <= 2, f"{len(pauses)} pauses for one array that ended at once"
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 300 and lines[0] == f"{first}_0 CD exit=0:0" and lines[-1].startswith(f"{first}_299 CD")


def test_a_timeout_names_the_first_job_still_open(redis_server, real_redis, capsys):
    import pytest
    r = real_redis
    now = time.time()
    s = setup(r, r, now)
    submit(r, "alice", {**BODY, "hold": True}, "held")
    s.tick(now + 1, woke(r))
    jid = reply(r, "held")["job_id"]
    clock = iter(range(0, 1000, 7)).__next__
    with pytest.raises(SystemExit) as e:
        wait_for_jobs(ThinClient(redis_server.url), [str(jid)], timeout=20, sleep=lambda s: None, clock=clock)
    assert e.value.code == 1 and f"job {jid}" in capsys.readouterr().err
