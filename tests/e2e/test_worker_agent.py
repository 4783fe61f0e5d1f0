"""The node agent with its real RQ worker processes on a real redis-server: registration and lease,
a runner job end to end through RQ, refusal of foreign functions, supervision, and a clean stop."""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from rq import Queue, Worker
from rq.job import Job as RQJob, JobStatus
from rq.serializers import JSONSerializer

from labq.scheduler.store import conn
from labq.scheduler.store.keys import Keys
from labq.worker.agent import Agent
from labq.worker.rqworker import RUNNER, refusal
from tests.harness import agent_config, events, K, NODE, put_job, queue, ROOT, wait_for

@pytest.fixture
def agent(redis_server, real_redis, tmp_path):
    a = Agent(agent_config(tmp_path), redis_server.url, stop_timeout=5)
    t = threading.Thread(target=a.run, daemon=True)
    t.start()
    yield a, t
    a.stop()
    t.join(60)
    assert not t.is_alive(), "the agent did not stop"


def rq_workers(rq_conn):
    return Worker.all(connection=rq_conn, queue=Queue(Keys.rq_queue(NODE), connection=rq_conn))


def test_registers_node_and_lease(agent, real_redis, rq_conn):
    wait_for(lambda: real_redis.exists(K.node_lease(NODE)), timeout=30, what="lease")
    node = real_redis.hgetall(K.node(NODE))
    assert (node["cpus"], node["mem"], node["slots"]) == ("4", str(8 << 30), "2")
    gpus = json.loads(node["gpus"])
    assert [g[0] for g in gpus] == ["GPU-fake-tnode-0", "GPU-fake-tnode-1"] and gpus[0][2] == "fake-A100"
    assert NODE in real_redis.smembers(K.nodes)
    assert 0 < real_redis.pttl(K.node_lease(NODE)) <= 3000
    ws = wait_for(lambda: (lambda w: w if len(w) == 2 else None)(rq_workers(rq_conn)), timeout=60,
                  what="two RQ workers")
    assert all(w.name.startswith(f"{NODE}-") for w in ws) and len({w.name for w in ws}) == 2
    # Renewed every third of the lease: it outlives its first TTL.
    first_hb = float(node["hb"])
    wait_for(lambda: float(real_redis.hget(K.node(NODE), "hb")) > first_hb, timeout=30, what="lease renewal")
    assert real_redis.exists(K.node_lease(NODE))


def test_runs_an_enqueued_runner_job_end_to_end(agent, real_redis, rq_conn, tmp_path):
    put_job(real_redis, jid=11, argv=(sys.executable, "-c", "import os; print('ran on', os.environ['LABQ_NODE'])"),
            workdir=str(tmp_path), time_limit=60)
    queue(rq_conn).enqueue_call(RUNNER, kwargs={"job_id": 11, "attempt": 1}, job_id="11-a1", timeout=400,
                                result_ttl=600)
    wait_for(lambda: events(real_redis, "finished"), timeout=60, what="finished event")
    body = events(real_redis, "finished")[0]["body"]
    assert body["outcome"] == "completed", body
    assert (tmp_path / "labq-11.out").read_text() == f"ran on {NODE}\n"
    rq_job = wait_for(lambda: (lambda j: j if j.get_status() == JobStatus.FINISHED else None)(
        RQJob.fetch("11-a1", connection=rq_conn, serializer=JSONSerializer)), timeout=30, what="RQ job finished")
    assert rq_job.return_value() == {"ran": True, "outcome": "completed", "exit_code": 0}


def test_refuses_foreign_functions(agent, rq_conn, tmp_path):
    target = tmp_path / "pwned"
    q = queue(rq_conn)
    q.enqueue_call("os.mkdir", args=[str(target)], job_id="evil-1", timeout=60)
    q.enqueue_call(RUNNER, kwargs={"job_id": 1, "attempt": 1, "extra": "x"}, job_id="evil-2", timeout=60)
    for jid in ("evil-1", "evil-2"):
        j = wait_for(lambda: (lambda j: j if j.get_status() == JobStatus.FAILED else None)(
            RQJob.fetch(jid, connection=rq_conn, serializer=JSONSerializer)), timeout=60, what=f"{jid} failed")
        assert "refused by labq" in (j.latest_result().exc_string or "")
    assert not target.exists()


def test_refusal_rules():
    class J:
        def __init__(self, func, args=(), kwargs=None):
            self.func_name, self.args, self.kwargs = func, args, kwargs or {}
    assert refusal(J(RUNNER, kwargs={"job_id": 1, "attempt": 2})) is None
    assert refusal(J("builtins.eval", args=("1",)))
    assert refusal(J(RUNNER, args=(1, 2)))
    assert refusal(J(RUNNER, kwargs={"job_id": "1", "attempt": 2}))
    assert refusal(J(RUNNER, kwargs={"job_id": True, "attempt": 2}))


def test_restarts_a_dead_worker(agent, rq_conn):
    a, _ = agent
    pids = wait_for(lambda: (lambda p: p if len(p) == 2 else None)(a.worker_pids()), timeout=30)
    wait_for(lambda: len(rq_workers(rq_conn)) == 2, timeout=60, what="two RQ workers")
    os.kill(pids[0], signal.SIGKILL)
    wait_for(lambda: len(a.worker_pids()) == 2 and pids[0] not in a.worker_pids(), timeout=30,
             what="a replacement worker")
    assert pids[1] in a.worker_pids()


def test_stop_releases_the_lease_and_stops_workers(redis_server, real_redis, rq_conn, tmp_path):
    a = Agent(agent_config(tmp_path, slots=1, lease="30s"), redis_server.url, stop_timeout=5)
    t = threading.Thread(target=a.run, daemon=True)
    t.start()
    wait_for(lambda: real_redis.exists(K.node_lease(NODE)), timeout=30, what="lease")
    pids = wait_for(lambda: a.worker_pids(), timeout=30)
    wait_for(lambda: len(rq_workers(rq_conn)) == 1, timeout=60, what="the RQ worker")
    a.stop()
    t.join(60)
    assert not t.is_alive()
    assert not real_redis.exists(K.node_lease(NODE)), "released at once, not left to expire"
    assert "node" in real_redis.lrange(K.wake, 0, -1)
    assert a.worker_pids() == [] and all(not os.path.exists(f"/proc/{p}") for p in pids)


def start_agent_process(redis_server, tmp_path, slots=1, extra=""):
    cfg = tmp_path / "labq.toml"
    cfg.write_text(f'[scheduler]\nnode_lease = "30s"\nkill_wait = "1s"\n[worker]\nname = "{NODE}"\n'
                   f'gpus = 0\ncpus = 2\nmem = "1G"\nslots = {slots}\nspool = "{tmp_path / "spool"}"\n'
                   f'run_as = "self"\n{extra}')
    code = (f"import logging, sys; sys.path.insert(0, {ROOT!r}); logging.basicConfig(level=logging.INFO)\n"
            f"from scheduler import config; from labq.worker.agent import Agent\n"
            f"sys.exit(Agent(config.load({str(cfg)!r}), {redis_server.url!r}, {str(cfg)!r}, stop_timeout=1).run())")
    return subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)


def start_sleeping_job(redis_server, real_redis, tmp_path, jid=21, script=None, **kw) -> int:
    """A job that runs until killed, through the agent's RQ worker; returns its pid."""
    pidfile = tmp_path / f"job{jid}.pid"
    script = script or "exec sleep 300"
    put_job(real_redis, jid=jid, gpus=(), argv=("/bin/bash", "-c", f"echo $$ > {pidfile}; {script}"),
            workdir=str(tmp_path), time_limit=600, **kw)
    rq = conn.connect_raw(redis_server.url)
    queue(rq).enqueue_call(RUNNER, kwargs={"job_id": jid, "attempt": 1}, job_id=f"{jid}-a1", timeout=900)
    wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), timeout=60, what="job start")
    rq.close()
    return int(pidfile.read_text())


CHECKPOINTER = "trap 'echo checkpointed > ckpt-$LABQ_JOB_ID; exit 0' USR1; while true; do sleep 0.1; done"
STUBBORN = "trap '' USR1 TERM; while true; do sleep 0.1; done"


def test_sigterm_preempts_running_jobs_with_their_checkpoint_signal(redis_server, real_redis, tmp_path):
    """systemctl stop: SIGTERM to the agent only (KillMode=mixed). Each running job gets its
    checkpoint signal (--signal USR1) and its QoS grace, capped by worker.stop_grace; one that
    checkpoints and exits and one that ignores it and is killed at the end of the grace both end
    `preempted`, which the scheduler requeues. The agent exits 0 and gives its lease up."""
    p = start_agent_process(redis_server, tmp_path, slots=2, extra='stop_grace = "3s"\n')
    try:
        wait_for(lambda: real_redis.exists(K.node_lease(NODE)), timeout=30, what="lease")
        good = start_sleeping_job(redis_server, real_redis, tmp_path, jid=31, script=CHECKPOINTER,
                                  warn_signal=("USR1", 60))
        bad = start_sleeping_job(redis_server, real_redis, tmp_path, jid=32, script=STUBBORN, warn_signal=("USR1", 60))
        wait_for(lambda: len(events(real_redis, "started")) == 2, timeout=30, what="both started")
        stopped_at = time.time()
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=90)
    finally:
        p.kill()
    assert p.returncode == 0, err
    assert not real_redis.exists(K.node_lease(NODE))
    fin = {int(e["job"]): e["body"] for e in events(real_redis, "finished")}
    assert set(fin) == {31, 32}, err
    assert all(b["outcome"] == "preempted" and "stopping" in b["message"] for b in fin.values()), fin
    assert (tmp_path / "ckpt-31").read_text() == "checkpointed\n", "the checkpoint signal reached the job"
    assert fin[31]["exit_code"] == 0 and fin[32]["signal"] == signal.SIGKILL
    assert fin[32]["end_time"] - stopped_at >= 3 - 0.1, "SIGKILL only once the grace (stop_grace) had passed"
    assert "preempted 2 running job(s)" in err
    for pid in (good, bad):
        wait_for(lambda: not os.path.exists(f"/proc/{pid}"), timeout=30, what="the job to die")


def test_agent_killed_takes_its_jobs_down(redis_server, real_redis, tmp_path):
    """kill -9 of the agent: its workers get PDEATHSIG and stop cold, killing the job tree, so no
    job outlives the node's lease (the scheduler requeues after it expires)."""
    p = start_agent_process(redis_server, tmp_path)
    try:
        wait_for(lambda: real_redis.exists(K.node_lease(NODE)), timeout=30, what="lease")
        job_pid = start_sleeping_job(redis_server, real_redis, tmp_path)
        p.kill()
        p.communicate(timeout=30)
        wait_for(lambda: not os.path.exists(f"/proc/{job_pid}"), timeout=30, what="the job to die")
    finally:
        p.kill()
    assert real_redis.exists(K.node_lease(NODE)), "a crashed agent releases nothing: the lease expires"
