"""Three Redis and three Sentinels on loopback, `labq scheduler` and `labq worker` finding the master
through them, a submit load, and the master killed -9 (and, separately, stopped until a replica is
promoted and resumed at once, a stale master that still has the other replica for a moment): no
acknowledged submit is lost, no job id is given twice, no job runs twice (each job appends its id
and restart count to a stamp file), the ledger verifies, the scheduler leads the new master, and the
first submit after the kill is accepted within the bound (the time is printed: `pytest -s`). A
failed check says where the submits, the daemons and Sentinel stood (Lab.diagnose).

Sentinel's timers are short here (down-after 1 s) to keep the test short; the issue's bound (30 s
with down-after 5 s) is for production settings: LABQ_TEST_DOWN_AFTER_MS=5000 runs it so.
"""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager

import pytest
import redis

from labq.cli.embedded import Stack
from labq.scheduler.client import Client, current_user
from labq.scheduler.settings import config
from labq.scheduler.store.keys import Keys
from tests.harness import E2E_MARKS, wait_for

pytestmark = E2E_MARKS
SERVICE = "labq"
DOWN_AFTER_MS = int(os.environ.get("LABQ_TEST_DOWN_AFTER_MS", "1000"))   # 5000: the production setting


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


class Replicated:
    """1 master + 2 replicas + 3 sentinels (redis-server --sentinel), each in its own directory."""

    def __init__(self, d: str):
        self.d, self.procs = d, {}
        os.makedirs(d)

    def start(self):
        self.ports = free_ports(6)
        self.redis_ports, self.sentinel_ports = self.ports[:3], self.ports[3:]
        master = self.redis_ports[0]
        for i, port in enumerate(self.redis_ports):
            args = ["--replicaof", "127.0.0.1", str(master)] if i else []
            self._start(f"redis{i}", port, ["--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
                                            "--min-replicas-to-write", "1", "--min-replicas-max-lag", "5", *args])
        for i, port in enumerate(self.redis_ports):
            wait_for(lambda p=port: self.client(p).ping(), 30, what=f"redis on {port}")
        wait_for(lambda: self.client(master).info("replication").get("min_slaves_good_slaves") == 2, 60, 0.1,
                 what="both replicas in sync")
        for i, port in enumerate(self.sentinel_ports):
            conf = os.path.join(self.d, f"sentinel{i}.conf")
            with open(conf, "w") as f:
                f.write(f"port {port}\nbind 127.0.0.1\ndir {self.d}\n"
                        f"sentinel monitor {SERVICE} 127.0.0.1 {master} 2\n"
                        f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
                        f"sentinel failover-timeout {SERVICE} 4000\nsentinel parallel-syncs {SERVICE} 2\n")
            self._spawn(f"sentinel{i}", [shutil.which("redis-server"), conf, "--sentinel"])
        for port in self.sentinel_ports:
            wait_for(lambda p=port: self._sentinel_sees_all(p), 60, 0.1, what=f"sentinel {port} to see the others")

    def _start(self, name, port, extra):
        d = os.path.join(self.d, name)
        os.makedirs(d)
        self._spawn(name, [shutil.which("redis-server"), "--port", str(port), "--bind", "127.0.0.1", "--dir", d,
                           "--daemonize", "no", "--loglevel", "warning", *extra])

    def _spawn(self, name, argv):
        log = open(os.path.join(self.d, f"{name}.log"), "w")
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=log)
        log.close()

    def client(self, port) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port, decode_responses=True, socket_timeout=5)

    def _sentinel_sees_all(self, port) -> bool:
        try:
            m = self.client(port).sentinel_master(SERVICE)
        except redis.RedisError:
            return False
        return m["num-other-sentinels"] == 2 and m["num-slaves"] == 2

    def subscribe(self, channel: str) -> list:
        """Each sentinel's pubsub, subscribed to one of its events (confirmed before this returns)."""
        subs = []
        for port in self.sentinel_ports:
            ps = self.client(port).pubsub()
            ps.subscribe(channel)
            wait_for(lambda ps=ps: (ps.get_message(timeout=0.1) or {}).get("type") == "subscribe", 30, 0,
                     what=f"the subscription to {channel}")
            subs.append(ps)
        return subs

    def master_port(self) -> int:
        host, port = self.client(self.sentinel_ports[0]).sentinel_get_master_addr_by_name(SERVICE)
        return int(port)

    def proc_of(self, port):
        return self.procs[f"redis{self.redis_ports.index(port)}"]

    def close(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
            p.wait(10)


CONFIG = """
[redis]
sentinels = [{sentinels}]
service = "{service}"
[scheduler]
tick = 0.2
kill_wait = "2s"
node_lease = "30s"
start_timeout = "8s"
[accounts.eta]
users = ["{user}"]
[worker]
name = "{node}"
cpus = 8
mem = "8G"
slots = 4
spool = "{spool}"
run_as = "self"
"""


class Lab:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="labq-sentinel-", dir="/tmp")
        self.cluster = Replicated(os.path.join(self.dir, "redis"))
        self.stack = None
        self.logfile = open(os.path.join(self.dir, "daemons.log"), "w")
        self._stop = threading.Event()

    def start(self):
        self.cluster.start()
        sentinels = ", ".join(f'"127.0.0.1:{p}"' for p in self.cluster.sentinel_ports)
        self.stamps = os.path.join(self.dir, "stamps")
        self.ckpts = os.path.join(self.dir, "checkpoints")    # `labq checkpoint` inside each job
        self.cfg_path = os.path.join(self.dir, "labq.toml")
        with open(self.cfg_path, "w") as f:
            f.write(CONFIG.format(sentinels=sentinels, service=SERVICE, user=current_user(), node="s-node",
                                  spool=os.path.join(self.dir, "spool")))
        self.cfg = config.load(self.cfg_path)
        assert self.cfg.redis_url.startswith("sentinel://") and self.cfg.min_replicas_ack == 1
        self.stack = Stack(os.path.join(self.dir, "state"), self.cfg_path, redis_url=self.cfg.redis_url,
                           log=self.logfile)
        os.makedirs(self.stack.state_dir)
        self.stack.start_all()
        self.client = Client(self.cfg, url=self.cfg.redis_url)
        self._second_node()
        wait_for(lambda: len([n for n in self.client.nodes() if n.state == "up"]) == 2, 120, 0.1,
                 what=f"both workers to register (see {self.logfile.name})")
        self.acked: list[tuple[int, float, float]] = []    # (job id, sent at, acknowledged at)
        self.failed: list[str] = []     # what each refused submit said (allowed: it was not acknowledged)
        self.in_flight: dict[int, tuple[float, int]] = {}    # load thread -> (sent at, pid) of its submit
        self.t0 = time.monotonic()

    def _second_node(self):
        path = os.path.join(self.dir, "node2.toml")
        with open(path, "w") as f:
            f.write(CONFIG.format(sentinels=", ".join(f'"127.0.0.1:{p}"' for p in self.cluster.sentinel_ports),
                                  service=SERVICE, user=current_user(), node="s-node2",
                                  spool=os.path.join(self.dir, "spool2")))
        argv = self.stack.command("worker")
        argv[argv.index("--config") + 1] = path
        self.stack.procs["worker2"] = subprocess.Popen(argv, env=self.stack.env(), stdout=self.logfile,
                                                       stderr=self.logfile, process_group=0)

    def sub(self, timeout: float = 60) -> subprocess.CompletedProcess:
        """One `labq sub`; one that outlasts `timeout` is sent SIGABRT first, so that its stderr says
        where it was stuck (PYTHONFAULTHANDLER), and TimeoutExpired carries that."""
        argv = self.stack.command("sub", "--parsable", "-A", "eta", "--", "sh", "-c",
                                  f'echo "$LABQ_JOB_ID $LABQ_RESTART_COUNT" >> {self.stamps}; '
                                  f'{sys.executable} -m labq checkpoint >> {self.ckpts} 2>&1; sleep 1')
        with subprocess.Popen(argv, env={**self.stack.env(), "PYTHONFAULTHANDLER": "1"}, cwd=self.dir,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as p:
            self.in_flight[threading.get_ident()] = (time.monotonic(), p.pid)
            try:
                out, err = p.communicate(timeout=timeout)
            except subprocess.TimeoutExpired as e:
                p.send_signal(signal.SIGABRT)
                try:
                    _, err = p.communicate(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    _, err = p.communicate()
                e.stderr = err
                raise
            finally:
                self.in_flight.pop(threading.get_ident(), None)
        return subprocess.CompletedProcess(argv, p.returncode, out, err)

    def load(self):
        """Submit one job after another until stopped; every acknowledged id is recorded, and every
        refusal (with when it was sent and how long it took), for the failure messages."""
        while not self._stop.is_set():
            sent = time.monotonic()
            try:
                p = self.sub(timeout=120)
            except subprocess.TimeoutExpired as e:
                self.failed.append(f"[sent {sent - self.t0:.1f}s] timed out after 120 s; where: {(e.stderr or '')[-1500:]}")
                continue
            except Exception as e:      # said in the failure message, not lost with the thread
                self.failed.append(f"[sent {sent - self.t0:.1f}s] the load thread ended: {e!r}")
                raise
            if p.returncode == 0:
                self.acked.append((int(p.stdout.strip()), sent, time.monotonic()))
            else:
                self.failed.append(f"[sent {sent - self.t0:.1f}s, took {time.monotonic() - sent:.1f}s] "
                                   f"{p.stderr.strip()[-300:]}")

    def diagnose(self) -> str:
        """What a failure message needs to say where things stood: the submits in flight, the last
        refusals, the load threads, the daemons' warnings and the sentinels' failover events."""
        now = time.monotonic()
        lines = [f"at {now - self.t0:.1f}s (times from the load's start); {len(self.acked)} acknowledged, "
                 f"last at {max((d for _, _, d in self.acked), default=self.t0) - self.t0:.1f}s",
                 f"submits in flight: {[(pid, round(now - t, 1)) for t, pid in list(self.in_flight.values())]}",
                 f"load threads alive: {[t.is_alive() for t in getattr(self, 'threads', [])]}",
                 "last refusals:", *[f"  {x}" for x in self.failed[-6:]]]
        self.logfile.flush()
        with open(self.logfile.name, errors="replace") as f:
            log = [x for x in f.read().splitlines() if " INFO job " not in x]
        lines += ["daemons' log (without job lines), last 25:", *[f"  {x[:300]}" for x in log[-25:]]]
        for i in range(3):
            try:
                with open(os.path.join(self.cluster.d, f"sentinel{i}.log"), errors="replace") as f:
                    events = [x for x in f.read().splitlines() if any(w in x for w in ("down", "failover", "promoted",
                                                                                       "switch", "convert", "reconf"))]
            except OSError:
                events = []
            lines += [f"sentinel{i}:", *[f"  {x[:200]}" for x in events[-12:]]]
        return "\n".join(lines)

    def start_load(self, submitters: int = 2):
        self.t0 = time.monotonic()
        self.threads = [threading.Thread(target=self.load, daemon=True) for _ in range(submitters)]
        for t in self.threads:
            t.start()

    def stop_load(self):
        self._stop.set()
        for t in self.threads:
            t.join(120)

    def close(self):
        self._stop.set()
        if self.stack is not None:
            self.stack.stop_all()
        self.cluster.close()
        self.logfile.close()
        if os.environ.get("LABQ_KEEP_TEST_DIR"):
            print(f"kept {self.dir}")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def lab():
    if not shutil.which("redis-server"):
        pytest.skip("redis-server is not installed")
    lab = Lab()
    try:
        lab.start()
        yield lab
    finally:
        lab.close()


# The first submit accepted after the fault, a sanity bound, not a target (seen: 3 s after kill -9, 11-13 s
# after SIGSTOP, one 21 s under load 20 on 2 cores): the submitters' own waits already end at 120 s.
TOOK_BOUND = 60


def _fail_over(lab, how: str) -> tuple[int, float]:
    old = lab.cluster.master_port()
    wait_for(lambda: len(lab.acked) >= 5, 120, what="5 submits acknowledged before the failover")
    proc = lab.cluster.proc_of(old)
    # The failover's leader (whichever it is) says when it has told a replica to become the master.
    promoted = lab.cluster.subscribe("+failover-state-wait-promotion")
    killed = time.monotonic()
    proc.send_signal(signal.SIGKILL if how == "kill" else signal.SIGSTOP)
    with diagnosed(lab):
        if how == "stop":
            # Resumed the moment a replica is promoted, before the failover's leader moves the other
            # one over (and before the sentinels name the new master): the old master, a master
            # still, has a replica for a moment (its writes pass min-replicas-to-write and WAIT, and
            # the resync from the new master discards them), then none (it refuses writes) until
            # Sentinel demotes it, seconds later.
            wait_for(lambda: any(_published(ps) for ps in promoted), 60, 0.005, what="Sentinel to promote a replica")
            proc.send_signal(signal.SIGCONT)
        wait_for(lambda: lab.cluster.master_port() != old, 60, 0.1, what="Sentinel to name the promoted replica")
        if how == "stop":
            wait_for(lambda: _role(lab.cluster.client(old)) == "slave", 60, 0.1, what="the old master demoted")
        wait_for(lambda: any(sent > killed for _, sent, _ in lab.acked), 120, 0.1,
                 what="a submit sent after the failover began to be acknowledged")
        first = min(done for _, sent, done in lab.acked if sent > killed)
        count = len(lab.acked)
        wait_for(lambda: len(lab.acked) >= count + 3, 120, what="3 more submits after the failover")
    for ps in promoted:
        ps.close()
    return old, first - killed


def _published(ps) -> bool:
    m = ps.get_message(timeout=0)
    return bool(m) and m["type"] == "message"


@contextmanager
def diagnosed(lab):
    """A failed check's message also says where the submits, the daemons and Sentinel stood."""
    try:
        yield
    except AssertionError as e:
        raise AssertionError(f"{e}\n{lab.diagnose()}") from None


def _role(r) -> str | None:
    try:
        return r.role()[0]
    except redis.RedisError:
        return None


def _check_nothing_lost(lab):
    lab.stop_load()
    ids = [jid for jid, _, _ in lab.acked]
    assert len(ids) == len(set(ids)), f"a job id was acknowledged twice: {sorted(ids)}"
    k = Keys(lab.cfg.prefix)
    master = lab.cluster.client(lab.cluster.master_port())

    def all_ended():
        jobs = [lab.client.read.job(j) for j in ids]
        missing = [j for j, job in zip(ids, jobs) if job is None]
        assert not missing, f"acknowledged jobs lost in the failover: {missing}"
        return all(job.state in ("CD",) for job in jobs)
    wait_for(all_ended, 180, 0.2, what="every acknowledged job to complete")
    with open(lab.stamps) as f:
        runs = [tuple(int(x) for x in line.split()) for line in f if line.strip()]
    twice = sorted({r for r in runs if runs.count(r) > 1})
    assert not twice, f"(job, restart) ran twice: {twice}"
    # A job ran again only as a new attempt the scheduler recorded, after an earlier one that did not
    # complete (its node fenced itself while Redis was away): never one attempt run twice.
    for jid in {j for j, _ in runs}:
        job = lab.client.read.job(jid)
        assert len([1 for j, _ in runs if j == jid]) <= len(job.attempts), (jid, job.attempts)
        assert all(a.outcome != "completed" for a in job.attempts[:-1]), (jid, job.attempts)
    assert set(ids) <= {j for j, _ in runs}
    # Jobs submitted once the new master took over found it from inside the job too.
    with open(lab.ckpts) as f:
        recorded = f.read()
    late = sorted(ids)[-3:]
    assert all(f"job {j}: checkpoint recorded" in recorded for j in late), recorded[-2000:]
    assert int(master.get(k.seq)) >= max(ids)
    p = subprocess.run(lab.stack.command("ledger", "verify"), env=lab.stack.env(), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.startswith("ledger ok"), p.stdout + p.stderr


def test_kill_9_of_the_master_loses_no_acknowledged_submit(lab):
    lab.start_load()
    old, took = _fail_over(lab, "kill")
    print(f"\nkill -9 of the master (port {old}) -> next accepted submit: {took:.2f} s "
          f"(down-after-milliseconds {DOWN_AFTER_MS}); {len(lab.acked)} acknowledged, {len(lab.failed)} refused: {lab.failed}")
    assert took < TOOK_BOUND, f"{took:.1f}s"
    with diagnosed(lab):
        _check_nothing_lost(lab)


def test_a_stopped_master_resumed_stale_loses_nothing(lab):
    lab.start_load()
    old, took = _fail_over(lab, "stop")
    print(f"\nSIGSTOP of the master (port {old}) -> next accepted submit: {took:.2f} s; "
          f"{len(lab.acked)} acknowledged, {len(lab.failed)} refused: {lab.failed}")
    assert took < TOOK_BOUND, f"{took:.1f}s"
    with diagnosed(lab):
        _check_nothing_lost(lab)
