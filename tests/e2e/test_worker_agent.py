"""The node agent with its real persistent runner processes on a real redis-server: registration and
lease, an attempt end to end through the node's dispatch list, malformed entries dropped,
supervision, and a clean stop."""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from labq.scheduler.store import dispatchq
from labq.worker.agent import Agent
from tests.harness import NODE, ROOT, K, agent_config, events, idle_runners, put_job, send, wait_for, worker_pids


@pytest.fixture
def agent(redis_server, real_redis, tmp_path):
    a = Agent(agent_config(tmp_path), redis_server.url, stop_timeout=5)
    t = threading.Thread(target=a.run, daemon=True)
    t.start()
    yield a, t
    a.stop()
    t.join(60)
    assert not t.is_alive(), "the agent did not stop"


def test_registers_node_and_lease(agent, real_redis):
    wait_for(lambda: real_redis.exists(K.node_lease(NODE)), timeout=30, what="lease")
    node = real_redis.hgetall(K.node(NODE))
    assert (node["cpus"], node["mem"], node["slots"]) == ("4", str(8 << 30), "2")
    gpus = json.loads(node["gpus"])
    assert [g[0] for g in gpus] == ["GPU-fake-tnode-0", "GPU-fake-tnode-1"] and gpus[0][2] == "fake-A100"
    assert NODE in real_redis.smembers(K.nodes)
    assert 0 < real_redis.pttl(K.node_lease(NODE)) <= 3000
    states = idle_runners(real_redis, 2)
    assert sorted(states) == ["0", "1"] and len({v.split()[1] for v in states.values()}) == 2, states
    # Renewed every third of the lease: it outlives its first TTL.
    first_hb = float(node["hb"])
    wait_for(lambda: float(real_redis.hget(K.node(NODE), "hb")) > first_hb, timeout=30, what="lease renewal")
    assert real_redis.exists(K.node_lease(NODE))


def test_runs_a_dispatched_attempt_end_to_end(agent, real_redis, tmp_path):
    put_job(real_redis, jid=11, argv=(sys.executable, "-c", "import os; print('ran on', os.environ['LABQ_NODE'])"),
            workdir=str(tmp_path), time_limit=60)
    send(real_redis, 11)
    wait_for(lambda: events(real_redis, "finished"), timeout=60, what="finished event")
    body = events(real_redis, "finished")[0]["body"]
    assert body["outcome"] == "completed", body
    assert (tmp_path / "labq-11.out").read_text() == f"ran on {NODE}\n"
    # Taken off the node's list into a runner's own, and off that once done.
    wait_for(lambda: not any(real_redis.llen(K.dispatch_slot(NODE, i)) for i in range(2)), timeout=30,
             what="the slot lists to empty")
    assert real_redis.llen(K.dispatch(NODE)) == 0


def test_drops_malformed_entries_and_runs_nothing_else(agent, real_redis, tmp_path):
    target = tmp_path / "pwned"
    put_job(real_redis, jid=12, argv=("/bin/sh", "-c", f"touch {target}"), workdir=str(tmp_path), node="elsewhere")
    for raw in ("os.mkdir", "12:1:x", "-1:1", "12"):
        real_redis.lpush(K.dispatch(NODE), raw)
    send(real_redis, 12)               # another node's attempt: fenced
    wait_for(lambda: real_redis.llen(K.dispatch(NODE)) == 0, timeout=60, what="the entries taken")
    idle_runners(real_redis, 2)
    assert not target.exists() and events(real_redis) == []


def test_dispatch_entry_rules():
    assert dispatchq.parse(dispatchq.entry(12, 3)) == (12, 3)
    for bad in ("12", "12:x", "a:1", "12:1:2", "-1:1", "1:-1", "", "9" * 50 + ":1"):
        assert dispatchq.parse(bad) is None, bad


def test_restarts_a_dead_runner(agent, real_redis):
    a, _ = agent
    pids = wait_for(lambda: (lambda p: p if len(p) == 2 else None)(worker_pids(a)), timeout=30)
    idle_runners(real_redis, 2)
    os.kill(pids[0], signal.SIGKILL)
    wait_for(lambda: len(worker_pids(a)) == 2 and pids[0] not in worker_pids(a), timeout=30,
             what="a replacement runner")
    assert pids[1] in worker_pids(a)


def test_stop_releases_the_lease_and_stops_runners(redis_server, real_redis, tmp_path):
    a = Agent(agent_config(tmp_path, slots=1, lease="30s"), redis_server.url, stop_timeout=5)
    t = threading.Thread(target=a.run, daemon=True)
    t.start()
    wait_for(lambda: real_redis.exists(K.node_lease(NODE)), timeout=30, what="lease")
    pids = wait_for(lambda: worker_pids(a), timeout=30)
    idle_runners(real_redis, 1)
    a.stop()
    t.join(60)
    assert not t.is_alive()
    assert not real_redis.exists(K.node_lease(NODE)), "released at once, not left to expire"
    assert "node" in real_redis.lrange(K.wake, 0, -1)
    assert worker_pids(a) == [] and all(not os.path.exists(f"/proc/{p}") for p in pids)


def start_agent_process(redis_server, tmp_path, slots=1, extra=""):
    cfg = tmp_path / "labq.toml"
    cfg.write_text(f'[scheduler]\nnode_lease = "30s"\nkill_wait = "1s"\n[worker]\nname = "{NODE}"\n'
                   f'gpus = 0\ncpus = 2\nmem = "1G"\nslots = {slots}\nspool = "{tmp_path / "spool"}"\n'
                   f'run_as = "self"\n{extra}')
    code = (f"import logging, sys; sys.path.insert(0, {ROOT!r}); logging.basicConfig(level=logging.INFO)\n"
            f"from labq.scheduler.settings import config; from labq.worker.agent import Agent\n"
            f"sys.exit(Agent(config.load({str(cfg)!r}), {redis_server.url!r}, {str(cfg)!r}, stop_timeout=1).run())")
    return subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)


def start_sleeping_job(redis_server, real_redis, tmp_path, jid=21, script=None, **kw) -> int:
    """A job that runs until killed, through the agent's runners; returns its pid."""
    pidfile = tmp_path / f"job{jid}.pid"
    script = script or "exec sleep 300"
    put_job(real_redis, jid=jid, gpus=(), argv=("/bin/bash", "-c", f"echo $$ > {pidfile}; {script}"),
            workdir=str(tmp_path), time_limit=600, **kw)
    send(real_redis, jid)
    wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), timeout=60, what="job start")
    return int(pidfile.read_text())


CHECKPOINTER = "trap 'echo checkpointed > ckpt-$LABQ_JOB_ID; exit 0' USR1; while true; do sleep 0.1; done"
STUBBORN = "trap '' USR1 TERM; while true; do sleep 0.1; done"


def test_sigterm_preempts_running_jobs_with_their_checkpoint_signal(redis_server, real_redis, tmp_path):
    """systemctl stop: SIGTERM to the agent only (KillMode=mixed). Each running job gets its
    checkpoint signal (--signal USR1) and its QoS grace, capped by worker.stop_grace. One that
    ignores it and is killed at the end of the grace ends `preempted`, which the scheduler requeues;
    one that checkpoints and exits 0 inside the grace has finished: `completed`, never re-run, the
    stop recorded in its usage (issue 35; a job that wants to be resumed exits with its
    --checkpoint-exit-code). The agent exits 0 and gives its lease up."""
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
    assert fin[31]["outcome"] == "completed" and fin[31]["usage"]["stopped_for"] == "shutdown", fin
    assert fin[32]["outcome"] == "preempted" and "stopping" in fin[32]["message"], fin
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
    # Its runners give the lease of its epoch up as they exit: the node is down at once, not a lease later.
    wait_for(lambda: not real_redis.exists(K.node_lease(NODE)), timeout=30, what="the lease given up")


def test_a_runners_successor_ends_the_attempt_it_died_with_at_once(redis_server, real_redis, tmp_path):
    """Attempts run inside the slot runner: one killed outright leaves its claimed entry in the
    slot's list. The slot's next runner reports that attempt `node_failure` at once, instead of
    leaving the scheduler to find it silent a lease and a fence margin later; one claimed by a live
    process, or on another node, is left alone."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    put_job(real_redis, jid=31, argv=("sleep", "60"), workdir=str(tmp_path))
    real_redis.hset(K.attempt(31, 1), "claimed", f"{NODE}:{dead.pid}")
    put_job(real_redis, jid=32, argv=("sleep", "60"), workdir=str(tmp_path))
    real_redis.hset(K.attempt(32, 1), "claimed", f"{NODE}:{os.getpid()}")      # alive: not ours to end
    real_redis.rpush(K.dispatch_slot(NODE, 0), dispatchq.entry(31, 1), dispatchq.entry(32, 1))
    a = Agent(agent_config(tmp_path, slots=1), redis_server.url, stop_timeout=5)
    t = threading.Thread(target=a.run, daemon=True)
    t.start()
    try:
        body = wait_for(lambda: [e["body"] for e in events(real_redis, "finished")], timeout=30,
                        what="the dead runner's attempt ended")[0]
        assert body["outcome"] == "node_failure" and f"pid {dead.pid}" in body["message"], body
        wait_for(lambda: real_redis.llen(K.dispatch_slot(NODE, 0)) == 0, timeout=30, what="the slot's list emptied")
        assert [e["job"] for e in events(real_redis, "finished")] == ["31"]
    finally:
        a.stop()
        t.join(60)


def test_a_claim_whose_reply_was_lost_with_redis_stays_in_the_slot_for_the_next_runner(redis_server, real_redis,
                                                                                       tmp_path):
    """Redis restarted between executing a runner's claim and answering it: the runner sees an
    error and cannot know whether the attempt is its own. It used to drop the slot's entry (once
    Redis answered again) and take the next: the attempt stayed claimed by a live runner that never
    ran it and never said so, `R` with no heartbeat. Now the entry stays and the runner exits; the
    one the agent starts in its place ends the attempt as a node failure (requeued)."""
    from dataclasses import asdict

    from labq.worker import launch
    marker = tmp_path / "ran"
    put_job(real_redis, jid=33, argv=("/bin/sh", "-c", f"touch {marker}"), workdir=str(tmp_path))
    send(real_redis, 33)
    settings = asdict(launch.Settings(redis_server.url, node=NODE, spool=str(tmp_path / "spool"), run_as="self",
                                      kill_wait=1.0))
    hooks = ("import redis\nfrom labq.scheduler.store.agentside import AgentStore as A\n_claim = A.claim\n"
             "def claim(*a, **kw):\n    _claim(*a, **kw)\n    raise redis.ConnectionError('the reply was lost')\n"
             "A.claim = claim")
    code = f"import sys; sys.path.insert(0, {ROOT!r})\n{hooks}\nfrom labq.worker.slot import main\nsys.exit(main())"
    slot = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        slot.stdin.write(json.dumps({**settings, "slot": 0, "agent_pid": os.getpid()}) + "\n")
        slot.stdin.close()
        # It either exits (the entry kept) or goes idle again (the entry dropped).
        wait_for(lambda: slot.poll() is not None or not (real_redis.llen(K.dispatch(NODE)) or
                                                          real_redis.llen(K.dispatch_slot(NODE, 0))), 60,
                 what="the runner to give the attempt up")
        assert real_redis.lrange(K.dispatch_slot(NODE, 0), 0, -1) == ["33:1"], "the entry stays for the next runner"
        assert slot.wait(30) == 1
    finally:
        slot.kill()
        slot.wait()
    a = Agent(agent_config(tmp_path, slots=1), redis_server.url, stop_timeout=5)
    t = threading.Thread(target=a.run, daemon=True)
    t.start()
    try:
        body = wait_for(lambda: [e["body"] for e in events(real_redis, "finished")], timeout=30,
                        what="the attempt ended")[0]
        assert body["outcome"] == "node_failure" and f"pid {slot.pid}" in body["message"], body
        assert not marker.exists()
    finally:
        a.stop()
        t.join(60)


def test_the_agent_kills_a_runner_silent_since_its_claim(redis_server, real_redis, tmp_path):
    """A runner stopped (or hung) after its claim and before `started` writes no heartbeat: the agent
    counts its silence from the claim, as the scheduler does, and kills it (with whatever it had
    spawned) once that outlasts the lease. It was never checked: with no heartbeat there was no age."""
    victim = subprocess.Popen(["sleep", "60"])       # stands for the silent runner
    try:
        real_redis.hset(K.node_runners(NODE), "0", f"running 35.1 pid={victim.pid} {time.time():.3f}")
        real_redis.hset(K.attempt(35, 1), mapping={"claimed": f"{NODE}:{victim.pid}", "claimed_at": time.time() - 10})
        Agent(agent_config(tmp_path, lease="3s"), redis_server.url)._check_attempts()
        assert wait_for(lambda: victim.poll() is not None, 10, what="the silent runner killed") and victim.returncode == -9
    finally:
        victim.kill()
        victim.wait()
