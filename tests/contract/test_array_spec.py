"""An array's script is stored once, apart from its tasks' records (keys.script: clients cannot read
it, issue 34), so Redis bytes per task stay far below 2 KB whatever the script's size; the readers
that may, the runner's and the archiver's, get the script back; a long argv is shared (keys.spec)."""
import time

from labq.scheduler.store import codec
from labq.scheduler.store.agentside import AgentStore
from labq.scheduler.store.reads import Reader
from tests.harness import BODY, K, finish, reply, setup, submit, woke

SCRIPT = "#!/bin/sh\n# " + "x" * 1_000_000 + "\necho $LABQ_ARRAY_TASK_ID\n"


def test_a_1mb_script_in_a_200_task_array_is_stored_once(conns):
    r, raw = conns
    s = setup(r, raw, time.time())
    body = {**BODY, "gpus": 0, "cpus": 1, "mem": 0, "argv": [], "script": SCRIPT, "array": [0, 199, 1]}
    submit(r, "alice", body, "big")
    s.tick(time.time(), woke(r))
    got = reply(r, "big")
    assert got["ok"] and got["count"] == 200, got
    first = got["job_id"]
    records = [r.get(K.job(i)) for i in range(first, first + 200)]
    per_task = sum(len(x) for x in records) / 200
    assert per_task < 2048, per_task
    assert len(r.get(K.script(first))) > 1_000_000 and not r.exists(K.script(first + 1))
    assert not r.exists(K.spec(first)), "no argv to share"
    # The runner gets the script back; the CLI's reader and a restarted scheduler know there is one.
    assert AgentStore(r, K).first_read(first + 199)[0].script == SCRIPT
    assert AgentStore(r, K).job_and_control(first + 3)[0].script == SCRIPT
    client = Reader(r, K).job(first + 7)
    assert client.script is None and client.has_script
    assert all(j.has_script and j.script is None for j in Reader(r, K).jobs(range(first, first + 200)))
    assert s.store.active_jobs()[first + 3].scripted
    # The record itself says it has a script, never holds a copy.
    assert SCRIPT[:100] not in r.get(K.job(first + 5)) and codec.loads(r.get(K.job(first + 5))).scripted


def test_a_long_argv_is_shared_by_an_arrays_tasks(conns):
    r, raw = conns
    s = setup(r, raw, time.time())
    argv = ["python", "train.py", *[f"--opt{i}=value{i}" for i in range(200)]]
    submit(r, "alice", {**BODY, "gpus": 0, "cpus": 1, "mem": 0, "argv": argv, "array": [0, 9, 1]}, "long")
    s.tick(time.time(), woke(r))
    first = reply(r, "long")["job_id"]
    assert r.exists(K.spec(first)) and not r.exists(K.script(first)) and "--opt199" not in r.get(K.job(first + 4))
    assert Reader(r, K).job(first + 4).argv == tuple(argv) and AgentStore(r, K).job(first + 9).argv == tuple(argv)


def test_small_commands_stay_inline(conns):
    r, raw = conns
    s = setup(r, raw, time.time())
    submit(r, "alice", {**BODY, "array": [1, 3, 1]}, "small")
    s.tick(time.time(), woke(r))
    first = reply(r, "small")["job_id"]
    assert codec.loads(r.get(K.job(first))).argv == tuple(BODY["argv"]) and not r.exists(K.spec(first))


def test_an_archived_task_keeps_its_script_and_a_runner_reads_it(conns, tmp_path):
    """The archive keeps no script keys: an archived task's record holds its script; the runner's
    first read (job_and_control) reads the array's script. The script and environment leave Redis
    with the array's last task."""
    from labq.scheduler.store.archive import Archive, Archiver
    from labq.scheduler.store.history import History
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    script = "#!/bin/sh\n" + "# pad\n" * 200 + "echo $SLURM_ARRAY_TASK_ID\n"
    submit(r, "alice", {**BODY, "gpus": 0, "cpus": 1, "mem": 0, "argv": [], "script": script, "array": [0, 2, 1]},
           "arch")
    s.tick(now + 1, woke(r))
    first = reply(r, "arch")["job_id"]
    assert AgentStore(r, K).job_and_control(first + 1)[0].script == script
    for jid in range(first, first + 3):
        finish(r, jid, 1, "completed", 0, now + (10 if jid < first + 2 else 5000))
    s.tick(now + 5001)
    assert r.zcard(K.history) == 3
    path = str(tmp_path / "history.db")
    Archiver(r, K, Archive(path), keep=0).step(now + 3600)      # the first two tasks only
    assert r.exists(K.script(first)) and AgentStore(r, K).first_read(first + 2)[0].script == script
    Archiver(r, K, Archive(path), keep=0).step(now + 10 ** 6)
    assert not r.exists(K.job(first + 2)), "archived"
    assert not r.exists(K.script(first)), "the script leaves Redis with the array's last task"
    for reader in (Reader(r, K, History(path)),):
        assert reader.job(first + 2).script == script
        assert {j.script for j in reader.ended()} == {script}
