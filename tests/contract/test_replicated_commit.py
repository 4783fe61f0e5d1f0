"""redis.min_replicas_ack on a real master and replica (loopback TCP): a group commit is WAITed on
before its replies and dispatch entries go out, so what a client was told is on a replica first;
a commit no replica acknowledged keeps its replies back (the client's resend is answered once the
replica is back); without min_replicas_ack nothing changes (no WAIT, replies in the transaction);
a promoted copy without an acknowledged job is refused by the state file."""
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from dataclasses import replace

import pytest
import redis

from labq.scheduler.daemon.loop import Scheduler
from labq.scheduler.jobs.model import Gpu
from labq.scheduler.settings import config
from labq.scheduler.store.agentside import AgentStore
from labq.scheduler.store.keys import Keys
from tests.harness import SWEEP_TOML, push, wait_for

K = Keys()
NOW = 1_800_000_000.0
BODY = {"argv": ["true"], "workdir": "/tmp", "gpus": 0, "cpus": 1, "mem": 1 << 20, "time_limit": 60,
        "account": "eta"}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def pair():
    """(master client, replica client, replica process) on loopback ports in a private directory."""
    exe = shutil.which("redis-server")
    if not exe:
        pytest.skip("redis-server is not installed")
    d = tempfile.mkdtemp(prefix="labq-repl-", dir="/tmp")
    procs = []
    try:
        ports = [_port(), _port()]
        for i, port in enumerate(ports):
            os.makedirs(os.path.join(d, str(i)))
            extra = ["--replicaof", "127.0.0.1", str(ports[0])] if i else []
            procs.append(subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                           "--appendonly", "yes", "--dir", os.path.join(d, str(i)),
                                           "--loglevel", "warning", *extra],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        m, rep = (redis.Redis(host="127.0.0.1", port=p, decode_responses=True, socket_timeout=10) for p in ports)

        def synced():
            try:
                return m.info("replication").get("slave0", {}).get("state") == "online"
            except redis.ConnectionError:
                return False
        wait_for(synced, 60, 0.05, what="the replica in sync")
        yield m, rep, procs[1]
    finally:
        for p in procs:
            p.send_signal(signal.SIGCONT)
            p.kill()
            p.wait(10)
        shutil.rmtree(d, ignore_errors=True)


def started(m, acks: int) -> Scheduler:
    AgentStore(m, K).register("n1", 4, 8 << 30, 4, [Gpu("GPU-0", 0, "fake")], "h", 1, 3600)
    cfg = replace(config.loads(SWEEP_TOML), min_replicas_ack=acks)
    s = Scheduler(m, cfg, me="s1", clock=lambda: NOW)
    s.tick(NOW)
    return s


def send(r, rid, user="alice"):
    push(r, user, {"rid": rid, "op": "submit", "body": json.dumps(BODY)})


def waits(r) -> int:
    return int(r.info("commandstats").get("cmdstat_wait", {}).get("calls", 0))


def test_a_reply_goes_out_only_once_a_replica_has_the_commit(pair):
    m, rep, _ = pair
    s = started(m, 1)
    before = waits(m)
    send(m, "r1")
    s.tick(NOW + 1, m.lrange(K.wake, 0, -1))
    got = m.lrange(K.reply("r1"), 0, -1)
    assert got and json.loads(got[0])["ok"], got
    jid = json.loads(got[0])["job_id"]
    assert waits(m) > before
    # WAIT returned before the reply was pushed: the replica has the job (no polling needed).
    assert rep.exists(K.job(jid))


def test_a_commit_no_replica_acknowledged_holds_its_reply_until_the_resend(pair, caplog):
    m, rep, replica = pair
    s = started(m, 1)
    replica.send_signal(signal.SIGSTOP)
    send(m, "r2")
    s.tick(NOW + 1, m.lrange(K.wake, 0, -1))
    assert m.lrange(K.reply("r2"), 0, -1) == []          # not acknowledged to the client ...
    done = json.loads(m.get(K.done("r2")))               # ... though done (a resend is answered)
    assert done["ok"] and "replies and" in caplog.text and "held back" in caplog.text
    replica.send_signal(signal.SIGCONT)
    wait_for(lambda: m.info("replication")["slave0"]["offset"] >= m.info("replication")["master_repl_offset"], 60,
             0.05, what="the replica to catch up")
    send(m, "r2")                                         # the client's resend of the same request id
    s.tick(NOW + 2, m.lrange(K.wake, 0, -1))
    got = m.lrange(K.reply("r2"), 0, -1)
    assert [json.loads(x)["job_id"] for x in got] == [done["job_id"]]
    assert rep.exists(K.job(done["job_id"]))


def test_without_min_replicas_ack_no_commit_waits(pair):
    m, _, _ = pair
    s = started(m, 0)
    before = waits(m)
    send(m, "r3")
    s.tick(NOW + 1, m.lrange(K.wake, 0, -1))
    assert json.loads(m.lrange(K.reply("r3"), 0, -1)[0])["ok"]
    assert waits(m) == before


def test_a_promoted_copy_that_lacks_acknowledged_jobs_is_refused(pair, tmp_path):
    """The state file learns a job id before its reply goes out (not at the tick's end), so a
    replica promoted without an acknowledged submit is refused even when the old leader died
    between the reply and its next look at the figures."""
    from labq.scheduler.daemon.durability import Durability
    from labq.scheduler.errors import RefusedError
    from labq.scheduler.store.state import SchedulerStore
    m, _, _ = pair
    host = m.connection_pool.connection_kwargs["host"]
    s = started(m, 1)
    # What a replica that fell behind before the submit holds (nothing yet), promoted.
    copy = redis.Redis(host=host, port=_port(), decode_responses=True)
    proc = subprocess.Popen(["redis-server", "--port", str(copy.connection_pool.connection_kwargs["port"]),
                             "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: _pings(copy), 30, 0.05, what="the copy")
        path = str(tmp_path / "state.json")
        s.durable = Durability(s.store, "sentinel://test/labq", True, path)
        s.durable.check()
        send(m, "r4")
        s.inboxes.intake(NOW + 1, pending=False)          # the commit alone: no end-of-tick look at the figures
        jid = json.loads(m.lrange(K.reply("r4"), 0, -1)[0])["job_id"]
        with pytest.raises(RefusedError) as e:
            Durability(SchedulerStore(copy, K, "s2"), "sentinel://test/labq", True, path).check()
        assert "went backwards" in str(e.value) and f"last job id {jid}" in str(e.value), str(e.value)
    finally:
        proc.kill()
        proc.wait(10)


def _pings(r) -> bool:
    try:
        return r.ping()
    except redis.ConnectionError:
        return False


def test_figures_no_commit_got_acknowledged_are_not_the_state_files_when_the_lead_is_taken_again(pair, tmp_path):
    """Behind replicas the state file learns only acknowledged job ids, also when the scheduler
    takes the lead again (a reload) on a master that holds more: an old master's writes, which the
    failover discards. Adopted, they would have the scheduler refuse the new master for good
    ("went backwards"), as the Sentinel e2e test's stopped master once did."""
    from labq.scheduler.daemon.durability import Durability
    m, _, replica = pair
    s = started(m, 1)
    path = str(tmp_path / "state.json")
    s.durable = Durability(s.store, "sentinel://test/labq", True, path)
    s.durable.check()
    send(m, "a1")
    s.tick(NOW + 1, m.lrange(K.wake, 0, -1))
    acked = json.loads(m.lrange(K.reply("a1"), 0, -1)[0])["job_id"]
    replica.send_signal(signal.SIGSTOP)
    try:
        send(m, "a2")
        s.tick(NOW + 2, m.lrange(K.wake, 0, -1))       # WAIT times out: held back
        held = json.loads(m.get(K.done("a2")))["job_id"]
        s.leading = False           # the lead taken again: the durability check runs before the reload
        s.tick(NOW + 3, m.lrange(K.wake, 0, -1))
        assert s.leading
    finally:
        replica.send_signal(signal.SIGCONT)
    with open(path) as f:
        assert json.load(f)["last_job_id"] == acked < held
