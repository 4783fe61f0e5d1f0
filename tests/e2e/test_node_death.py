"""Issue 35, item 1: an agent's death ends its node's work at once. Its runners exit with it and
give the node's lease up (the scheduler sees the node down at once, not a lease later); a runner of
an agent incarnation whose epoch is over claims nothing; a gang part whose runner was killed
outright is ended at once by the slot's next runner (the scheduler then stops the other parts).
Real agents, runners and a redis-server the test starts; kill -9 and SIGSTOP."""
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace

import pytest

from labq.scheduler.jobs.model import Attempt
from labq.scheduler.store import codec, dispatchq
from labq.scheduler.store.agentside import AgentStore
from labq.scheduler.store.state import SchedulerStore
from labq.worker.agent import Agent
from tests.harness import NODE, ROOT, K, agent_config, events, idle_runners, put_job, send, wait_for

pytestmark = pytest.mark.redis


def start_agent_process(redis_server, tmp_path, slots=2, lease="30s"):
    cfg = tmp_path / "labq.toml"
    cfg.write_text(f'[scheduler]\nnode_lease = "{lease}"\nkill_wait = "1s"\n[worker]\nname = "{NODE}"\n'
                   f'gpus = 0\ncpus = 2\nmem = "1G"\nslots = {slots}\nspool = "{tmp_path / "spool"}"\n'
                   f'run_as = "self"\n')
    code = (f"import logging, sys; sys.path.insert(0, {ROOT!r}); logging.basicConfig(level=logging.INFO)\n"
            f"from labq.scheduler.settings import config; from labq.worker.agent import Agent\n"
            f"sys.exit(Agent(config.load({str(cfg)!r}), {redis_server.url!r}, {str(cfg)!r}, stop_timeout=1).run())")
    return subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.DEVNULL, process_group=0)


def runner_pids(real_redis) -> list[int]:
    return [int(v.split("pid=")[1].split()[0]) for v in real_redis.hgetall(K.node_runners(NODE)).values()]


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_a_killed_agents_runners_exit_and_give_the_lease_up_at_once(redis_server, real_redis, tmp_path):
    """kill -9 of the agent: with a 30 s lease, its node must not look alive (and take work) for
    30 s more. Its runners exit and delete the lease of their own epoch."""
    p = start_agent_process(redis_server, tmp_path)
    try:
        idle_runners(real_redis, 2)
        pids = runner_pids(real_redis)
        epoch = real_redis.get(K.node_lease(NODE))
        assert epoch and epoch == real_redis.hget(K.node(NODE), "epoch"), "the lease names the agent's epoch"
        p.kill()
        p.wait(30)
        wait_for(lambda: not real_redis.exists(K.node_lease(NODE)), timeout=20, what="the lease given up")
        wait_for(lambda: all(gone(x) for x in pids), timeout=20, what="the runners gone")
    finally:
        p.kill()
        for x in runner_pids(real_redis):
            if not gone(x):
                os.kill(x, signal.SIGKILL)


def test_a_runner_of_an_epoch_that_is_over_claims_nothing(redis_server, real_redis, tmp_path):
    """The agent is stopped (it cannot renew, its runners live on) and another incarnation of the
    node registered meanwhile: an entry dispatched now is not claimed by the old runners, which
    exit; the entry stays for the new incarnation's runners."""
    p = start_agent_process(redis_server, tmp_path, slots=1)
    try:
        idle_runners(real_redis, 1)
        pids = runner_pids(real_redis)
        os.kill(p.pid, signal.SIGSTOP)
        real_redis.set(K.node_lease(NODE), "elsewhere:1:new")
        real_redis.hset(K.node(NODE), "epoch", "elsewhere:1:new")
        put_job(real_redis, jid=41, gpus=(), argv=("sleep", "60"), workdir=str(tmp_path))
        send(real_redis, 41)
        wait_for(lambda: all(gone(x) for x in pids), timeout=30, what="the old runner to exit")
        assert real_redis.hget(K.attempt(41, 1), "claimed") is None, "claimed by a runner of an epoch that is over"
        left = real_redis.lrange(K.dispatch(NODE), 0, -1) + real_redis.lrange(K.dispatch_slot(NODE, 0), 0, -1)
        assert left == ["41:1"], left
    finally:
        os.kill(p.pid, signal.SIGCONT)
        p.kill()
        p.wait(30)


def test_a_gang_parts_dead_runner_is_ended_at_once_by_the_next(redis_server, real_redis, tmp_path):
    """Rank 1 of a gang on this node; its runner was killed outright (its job with it). The slot's
    next runner must report rank 1's part `node_failure` at once (the scheduler then stops rank 0),
    not take rank 0's claim, made on the other node, for the part's."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    gang = Attempt(1, "other", ("GPU-o-0",), parts=(("other", ("GPU-o-0",)), (NODE, ("GPU-fake-tnode-0",))))
    job = put_job(real_redis, jid=51, argv=("sleep", "60"), workdir=str(tmp_path), nodes=2)
    real_redis.set(K.job(51), codec.dumps(replace(job, node="other", attempts=(gang,), parts=gang.parts)))
    real_redis.hset(K.part(51, 1, 0), "claimed", "other:4242")
    real_redis.hset(K.part(51, 1, 1), "claimed", f"{NODE}:{dead.pid}")
    real_redis.rpush(K.dispatch_slot(NODE, 0), dispatchq.entry(51, 1))
    a = Agent(agent_config(tmp_path, slots=1), redis_server.url, stop_timeout=5)
    t = threading.Thread(target=a.run, daemon=True)
    t.start()
    try:
        body = wait_for(lambda: [e["body"] for e in events(real_redis, "finished")], timeout=30,
                        what="the dead runner's part ended")[0]
        assert body["outcome"] == "node_failure" and f"pid {dead.pid}" in body["message"], body
    finally:
        a.stop()
        t.join(60)


def test_the_scheduler_takes_a_lease_of_another_epoch_for_a_node_down(real_redis):
    """The node's record names the agent incarnation it registered; a lease that names another (an
    old agent renewing, a half-done restart) is not that agent alive: nothing is dispatched there."""
    store = AgentStore(real_redis, K)
    store.register(NODE, 4, 1 << 30, 2, [], "h", 1, 30, epoch="h:1:aaaa")
    assert store.renew(NODE, 30, "h:1:aaaa") and real_redis.get(K.node_lease(NODE)) == "h:1:aaaa"
    assert [n.state for n in SchedulerStore(real_redis, K, "me").nodes(time.time())] == ["up"]
    real_redis.set(K.node_lease(NODE), "h:2:bbbb", px=30_000)
    assert [n.state for n in SchedulerStore(real_redis, K, "me").nodes(time.time())] == ["down"]
    assert not store.give_up_lease(NODE, "h:1:aaaa"), "another epoch's lease is left alone"
    assert store.give_up_lease(NODE, "h:2:bbbb") and not real_redis.exists(K.node_lease(NODE))


def test_the_agent_ends_its_fenced_runners_attempts_as_soon_as_redis_is_back(redis_server, real_redis, tmp_path):
    """A Redis outage past the node lease: the agent killed its runners (their jobs with them) and marked
    when. Once Redis answers again the agent itself posts each attempt's end, as of that mark. It was
    left to each slot's next runner, which under load started 15 s later (10-min chaos soak, jobs 271,
    272, 275): by then the scheduler had declared the attempts lost and billed them to the last
    heartbeat, 2 s before their processes' real end; the runners' posts were dropped."""
    from labq.worker import results
    dead = subprocess.Popen(["true"])
    dead.wait()
    put_job(real_redis, jid=41, argv=("sleep", "60"), workdir=str(tmp_path))
    real_redis.hset(K.attempt(41, 1), "claimed", f"{NODE}:{dead.pid}")
    real_redis.rpush(K.dispatch_slot(NODE, 0), dispatchq.entry(41, 1))
    a = Agent(agent_config(tmp_path, slots=1), redis_server.url, stop_timeout=5)
    a._register()
    results.mark_death(a.settings.spool, 0, dead.pid, 1000.0)     # _fence killed it then
    a.fenced = True
    a._renew(time.monotonic())              # Redis answers: no runner is started here
    assert all(s.proc is None for s in a.slots)
    (body,) = [e["body"] for e in events(real_redis, "finished")]
    assert body["outcome"] == "node_failure" and body["end_time"] == 1000.0 and not a.fenced
    assert real_redis.llen(K.dispatch_slot(NODE, 0)) == 0
