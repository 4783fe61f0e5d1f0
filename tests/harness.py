"""What the tests share; test modules import helpers from here only (fixtures live in conftest.py).

- paths and polling: ROOT, DATA, wait_for, start_redis, start_munged;
- pure policy: ClusterBuilder (snapshots), SWEEP_TOML, cfg, summarize(plan);
- the daemon over a store, with the agent played by hand: K, CFG, FROZEN, BODY, setup, submit, push, taken,
  reply, woke,
  job, finish;
- the node side on a real redis-server: NODE, PY, put_job, runner_env, start_runner, start_hooked (a runner
  held at one point by patched code, hold_until), run, events, finished,
  agent_config, queue;
- end to end with real processes: E2E (a private stack per instance), E2E_CONFIG, E2E_MARKS.
"""
import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, replace

import pytest
import redis

from labq.cli.embedded import Stack
from labq.scheduler import policy
from labq.scheduler.client import Client, current_user
from labq.scheduler.daemon import transitions as tr
from labq.scheduler.daemon.loop import Scheduler
from labq.scheduler.jobs import states
from labq.scheduler.jobs.model import Attempt, Gpu, Job, Node, Snapshot
from labq.scheduler.settings import config, config as config_mod
from labq.scheduler.store import acctrows, codec, inbox, splice, statrows
from labq.scheduler.store.agentside import AgentStore
from labq.scheduler.store.keys import Keys
from labq.scheduler.store.thinreads import ThinReader

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def bench_module(name: str, alias: str):
    """bench/NAME.py loaded by its path as module `alias` (bench/ is no package): the tests of its pure parts."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(alias, os.path.join(ROOT, "bench", f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
DATA = os.path.join(ROOT, "tests", "data")

G = 1 << 30


class ClusterBuilder:
    def __init__(self, now: float = 1_000_000.0):
        self.now = now
        self.nodes: list[Node] = []
        self.jobs: list[Job] = []
        self.spent: dict[str, int] = {}
        self._next = 1

    def node(self, name, gpus=0, cpus=16, mem=64 * G, slots=16, model="fake", state="up", lease=30.0):
        gs = tuple(Gpu(f"GPU-{name}-{i}", i, model, 80 * G) for i in range(gpus))
        self.nodes.append(Node(name, cpus, mem, slots, gs, state, self.now + lease if lease else 0.0, self.now))
        return self

    def job(self, gpus=0, cpus=1, mem=0, time_limit=3600, qos="normal", account="default", user="alice",
            submit_offset=0.0, jid=None, **kw):
        jid = jid or self._next
        self._next = max(self._next, jid) + 1
        self.jobs.append(Job(id=jid, user=user, account=account, argv=("true",), workdir="/tmp", gpus=gpus,
                             cpus=cpus, mem=mem, time_limit=time_limit, qos=qos,
                             submit_time=self.now - 100 + submit_offset, **kw))
        return self

    def running(self, node, gpus=0, cpus=1, mem=0, started_ago=60.0, commit=(), rates=(), **kw):
        """A job already on `node`, holding its first free GPUs."""
        self.job(gpus=gpus, cpus=cpus, mem=mem, **kw)
        j = self.jobs.pop()
        n = next(n for n in self.nodes if n.name == node)
        free = self.free_gpus(n, gpus)
        a = Attempt(1, node, tuple(free), start_time=self.now - started_ago, dispatch_time=self.now - started_ago)
        self.jobs.append(replace(j, state=states.RUNNING, node=node, gpu_uuids=tuple(free), attempts=(a,),
                                 start_time=self.now - started_ago, commit=tuple(commit), rates=tuple(rates)))
        return self

    def free_gpus(self, n, gpus: int) -> list[str]:
        held = {u for r in self.jobs if r.state in states.ON_NODE for _, us in r.on_nodes for u in us}
        return [g.uuid for g in n.gpus if g.uuid not in held][:gpus]

    def running_gang(self, nodes, gpus=0, cpus=1, mem=0, started_ago=60.0, commit=(), rates=(), **kw):
        """A multi-node job (-N len(nodes)) already on `nodes`, its shape on each, first free GPUs."""
        self.job(gpus=gpus, cpus=cpus, mem=mem, nodes=len(nodes), **kw)
        j = self.jobs.pop()
        parts = tuple((name, tuple(self.free_gpus(next(n for n in self.nodes if n.name == name), gpus)))
                      for name in nodes)
        every = tuple(u for _, us in parts for u in us)
        a = Attempt(1, nodes[0], every, start_time=self.now - started_ago, dispatch_time=self.now - started_ago,
                    parts=parts)
        self.jobs.append(replace(j, state=states.RUNNING, node=nodes[0], gpu_uuids=every, parts=parts, attempts=(a,),
                                 start_time=self.now - started_ago, commit=tuple(commit), rates=tuple(rates)))
        return self

    def spend(self, budget, micro):
        self.spent[budget] = micro
        return self

    def build(self) -> Snapshot:
        return Snapshot(self.now, tuple(self.nodes), tuple(self.jobs), tuple(sorted(self.spent.items())))


# The sweep of the demo: $120 for account eta (alice), 10 % reserve, $2 per GPU-hour.
# One weekly money budget for account "lab" (user alice): the periodic-budget tests' world.
WEEKLY_TOML = """
[rates]
gpu_hour = 2.0
[accounts.lab]
users = ["alice"]
[[budgets]]
name = "lab"
account = "lab"
limit = 1000.0
period = "week"
"""
MONDAY_W49 = 1_795_996_800.0      # 2026-11-30 00:00 UTC, the start of ISO week 49


SWEEP_TOML = """
[rates]
gpu_hour = 2.0
[accounts.eta]
users = ["alice"]
open = true                 # the tests' other users (bob, carol ...) charge it too
[[budgets]]
name = "eta-sweep"
account = "eta"
limit = 120.0
reserve = 0.1
"""


def cfg(text: str = "") -> config_mod.Config:
    return config_mod.loads(text)


def prio_pending(specs, first: int, at: float, resting: set | None = None) -> list:
    """The prio tests' pending jobs (cli/prio.Pending) of `specs` (user, account, QoS, submitted how
    long before `at`, tasks: 0 a single, else an array of that many[, from which task on they rest:
    -1 none]), ids from `first`; an array's as jobspec.expand makes them (its id its first task's, its
    tasks' in a row); `resting` given the ids of those that rest (rest.py)."""
    from labq.cli.prio import Pending
    out, jid = [], first
    for user, account, qos, ago, tasks, *rest in specs:
        if not tasks:
            out.append(Pending(jid, None, None, user, account, qos, at + ago, 60.0, None, None))
            jid += 1
        a = jid
        for t in range(tasks):
            out.append(Pending(jid, a, 3 + 2 * t, user, account, qos, at + ago, 60.0, None, None))
            if resting is not None and rest and rest[0] >= 0 and t >= rest[0]:
                resting.add(jid)
            jid += 1
    return out


def prio_config(qw, aw, fw, bp, age_max, burst_jobs, burst_window, more: str = "") -> str:
    """A config of priority weights, three QoS levels and two accounts with shares (the prio tests');
    `more`: further [priority] lines (the short-job term's)."""
    return f"""
[priority]
qos_weight = {qw!r}
age_weight = {aw!r}
age_max = {age_max}
fairshare_weight = {fw!r}
burst_jobs = {burst_jobs}
burst_window = {burst_window}
burst_penalty = {bp!r}
{more}[qos.normal]
priority = 100
[qos.low]
priority = 3
[qos.high]
priority = 1000
[accounts.eta]
share = 3
users = ["alice"]
[accounts.phi]
share = 0.5
users = ["bob"]
"""


def forward_until_started(snap: Snapshot, c, until_started: int, limit: float) -> float | None:
    """Run the cluster forward with every job lasting exactly its time limit; the time job
    `until_started` starts, or None if it has not by `limit` (backfill's promises, tested)."""
    jobs = {j.id: j for j in snap.jobs}
    now = snap.now
    while now <= limit:
        p = policy.plan(Snapshot(now, snap.nodes, tuple(jobs.values())), c)
        for pl in p.places:
            if pl.job_id == until_started:
                return now
            jobs[pl.job_id] = tr.admit(jobs[pl.job_id], pl, now)
        ends = [j.current.dispatch_time + j.time_limit for j in jobs.values() if j.state in states.ON_NODE]
        if not ends:
            return None
        now = max(now, min(ends))
        for jid, j in list(jobs.items()):
            if j.state in states.ON_NODE and j.current.dispatch_time + j.time_limit <= now:
                jobs.pop(jid)
    return None


def summarize(plan) -> dict:
    return {"places": {p.job_id: (p.node, p.gpus) for p in plan.places},
            "expires": sorted(e.job_id for e in plan.expires),
            "pending": {p.job_id: p.reason for p in plan.pending}}


def assert_spliced(jobs: list) -> None:
    """store/splice.texts gives each job, in order, the record codec.dumps gives and, where it gives one,
    the row statrows.dumps gives (an ended job: the acct row acctrows.redis_row gives)."""
    got = list(splice.texts(iter(jobs)))
    assert [g[0] for g in got] == jobs
    for j, rec, row in got:
        assert (rec if isinstance(rec, bytes) else rec.encode()) == codec.dumps(j).encode()
        want = statrows.dumps(j) if j.state in states.ACTIVE else acctrows.redis_row(j)
        assert row is None or row == want.encode()


# -- paths and polling ---------------------------------------------------------------------------
def gpu_procs(backend) -> dict[int, int]:
    """pid -> GPU memory bytes over all devices of a worker/probe.py backend (a process may use several
    GPUs), from its samples. A test's view (issue 40: no test-only code in the product)."""
    out: dict[int, int] = {}
    for s in backend.sample():
        for pid, b in s.procs.items():
            out[pid] = out.get(pid, 0) + (b or 0)
    return out


def worker_pids(agent) -> list[int]:
    """The pids of a worker/agent.py Agent's live runner processes, one per slot. A test's view."""
    return [s.proc.pid for s in agent.slots if s.proc is not None and s.proc.poll() is None]


def wait_for(predicate, timeout: float = 60.0, interval: float = 0.05, what: str = "condition"):
    """Poll until predicate() is truthy; generous timeouts keep this deterministic on a loaded machine."""
    end = time.monotonic() + timeout
    while True:
        v = predicate()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


@dataclass
class PostgresProc:
    dir: str
    pg_ctl: str
    user: int | None        # the uid the cluster runs as (PostgreSQL refuses root), None: ours

    def url(self, db: str = "postgres") -> str:
        return f"postgresql://labq@/{db}?host={self.dir}"

    def new_database(self, name: str) -> str:
        """A fresh database in the cluster, for one test; its postgresql:// URL."""
        import psycopg
        with psycopg.connect(self.url(), autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}"')
            c.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        subprocess.run([self.pg_ctl, "-D", os.path.join(self.dir, "data"), "-m", "immediate", "stop"],
                       user=self.user, capture_output=True, timeout=60)
        shutil.rmtree(self.dir, ignore_errors=True)


def start_postgres(timeout: float = 60.0) -> PostgresProc:
    """A private PostgreSQL cluster (Debian's `postgresql`): initdb into a temporary directory, its
    unix socket there, trust auth for the superuser `labq`. As root it runs as `nobody`, as
    PostgreSQL refuses root. Skipped with the reason where PostgreSQL or psycopg is missing."""
    import glob
    bins = [os.path.dirname(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))[-1:]]
    found = shutil.which("initdb", path=os.pathsep.join([*bins, os.environ.get("PATH", "")]))
    if not found:
        pytest.skip("PostgreSQL is not installed (Debian: apt-get install postgresql)")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg 3 is not installed (pip install 'labq[postgres]')")
    bindir = os.path.dirname(os.path.realpath(found))
    d = tempfile.mkdtemp(prefix="labq-pg-", dir="/tmp")      # the socket path must stay under 108 bytes
    user = 65534 if os.geteuid() == 0 else None
    if user is not None:
        os.chown(d, user, user)
    run = dict(user=user, group=user, extra_groups=[] if user is not None else None, capture_output=True,
               text=True, timeout=timeout, cwd="/")
    data = os.path.join(d, "data")
    p = subprocess.run([os.path.join(bindir, "initdb"), "-D", data, "-U", "labq", "--auth=trust", "-E", "UTF8",
                        "--no-sync"], **run)
    if p.returncode != 0:
        pytest.skip(f"initdb failed: {p.stderr.strip().splitlines()[-1:]}")
    pg_ctl = os.path.join(bindir, "pg_ctl")
    p = subprocess.run([pg_ctl, "-D", data, "-l", os.path.join(d, "log"), "-w", "-t", str(int(timeout)), "-o",
                        f"-k {d} -c listen_addresses='' -c fsync=off", "start"], **run)
    if p.returncode != 0:
        pytest.skip(f"PostgreSQL did not start: {p.stderr.strip()[-200:]}")
    return PostgresProc(d, pg_ctl, user)


@dataclass
class RedisProc:
    proc: subprocess.Popen
    sock: str
    dir: str

    @property
    def url(self) -> str:
        return f"unix://{self.sock}"

    def client(self, **kw) -> redis.Redis:
        return redis.Redis(unix_socket_path=self.sock, decode_responses=True, **kw)


def start_redis(timeout: float = 20.0, appendonly: bool = True, perm: str = "700") -> RedisProc:
    """A private redis-server, with AOF by default as the scheduler requires (fsync once a second:
    tests never kill this one; appendonly=False makes the volatile Redis labq refuses)."""
    exe = shutil.which("redis-server")
    if not exe:
        (pytest.fail if os.environ.get("CI") else pytest.skip)("redis-server is not installed")
    d = tempfile.mkdtemp(prefix="labq-redis-", dir="/tmp")  # a unix socket path must stay under 108 bytes
    sock = os.path.join(d, "redis.sock")
    proc = subprocess.Popen(
        [exe, "--port", "0", "--unixsocket", sock, "--unixsocketperm", perm, "--dir", d, "--save", "",
         "--appendonly", "yes" if appendonly else "no", "--appendfsync", "everysec",
         "--daemonize", "no", "--loglevel", "warning"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if perm != "700":
        os.chmod(d, 0o755)    # other users (tests/test_auth_*.py) must reach the socket
    c, end = redis.Redis(unix_socket_path=sock), time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(proc.stderr.read().decode())
        try:
            c.ping()
            return RedisProc(proc, sock, d)
        except (redis.ConnectionError, FileNotFoundError):
            if time.monotonic() > end:
                proc.kill()
                raise
            time.sleep(0.01)


@dataclass
class MungeProc:
    proc: subprocess.Popen
    dir: str

    @property
    def socket(self) -> str:
        return os.path.join(self.dir, "munge.sock")


def start_munged(timeout: float = 20.0) -> MungeProc:
    """A private munged: its own key (mungekey), socket, pid, seed and log files in a temp dir."""
    exe = shutil.which("munged") or ("/usr/sbin/munged" if os.path.exists("/usr/sbin/munged") else None)
    if not exe or not shutil.which("mungekey"):
        (pytest.fail if os.environ.get("CI") else pytest.skip)("munge is not installed (apt-get install munge)")
    d = tempfile.mkdtemp(prefix="labq-munge-", dir="/tmp")
    os.chmod(d, 0o755)        # the socket is for every user; the key stays 0600
    subprocess.run([shutil.which("mungekey"), "-c", "-k", f"{d}/munge.key"], check=True)
    proc = subprocess.Popen([exe, "-F", "-f", f"--socket={d}/munge.sock", f"--key-file={d}/munge.key",
                             f"--pid-file={d}/munged.pid", f"--log-file={d}/munged.log",
                             f"--seed-file={d}/munged.seed"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    mp, end = MungeProc(proc, d), time.monotonic() + timeout
    while not os.path.exists(mp.socket):
        if proc.poll() is not None:
            raise RuntimeError(proc.stderr.read().decode())
        if time.monotonic() > end:
            proc.kill()
            raise RuntimeError("munged did not create its socket")
        time.sleep(0.01)
    return mp


class LabqUp:
    """`labq up` (Redis, scheduler and worker in one process tree) in a fresh state directory under
    /tmp, with `config_text` (E2E_CONFIG's placeholders filled). `cmd` runs labq against it; on
    leaving, the process is stopped with SIGINT, `text` holds its log and the directory is removed."""

    def __init__(self, config_text: str, prefix: str = "labq-up-", up=("up",)):
        self.dir = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
        self.env = dict(os.environ, LABQ_STATE_DIR=self.dir, PYTHONPATH=ROOT)
        self.env.pop("JOURNAL_STREAM", None)     # labq up's own log lines, not journald's
        self.up = list(up)
        cfg = os.path.join(self.dir, "labq.toml")
        with open(cfg, "w") as f:
            f.write(config_text.format(user=current_user(), spool=os.path.join(self.dir, "spool")))
        self.cmd = [sys.executable, "-m", "labq", "--config", cfg]
        self.text = ""

    def __enter__(self):
        self.log = open(os.path.join(self.dir, "up.log"), "w+")
        self.proc = subprocess.Popen(self.cmd + self.up, env=self.env, stdout=self.log, stderr=subprocess.STDOUT,
                                     text=True)
        try:
            wait_for(lambda: "labq is up" in open(self.log.name).read(), 60, what="labq up to start")
        except BaseException:
            self.__exit__()
            raise
        return self

    def run(self, *args, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(self.cmd + list(args), env=self.env, capture_output=True, text=True, timeout=timeout,
                              cwd=self.dir)

    def __exit__(self, *exc):
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(60)
        self.log.close()
        self.text = open(self.log.name).read()
        shutil.rmtree(self.dir, ignore_errors=True)
        return False


# -- the daemon over a store, the agent played by hand (fixture: conns, in conftest.py) -----------
CFG = config.loads(SWEEP_TOML)
K = Keys()


def FROZEN():
    """The daemon's clock in these tests: time comes only from the `now` each tick is given."""
    return 0.0


def submit(r, user, body, rid):
    push(r, user, {"rid": rid, "op": "submit", "body": json.dumps(body)})


@contextlib.contextmanager
def redis_full(r):
    """Redis out of memory (maxmemory 1, noeviction) for the block: every write refused; its settings back after."""
    before = r.config_get("maxmemory")["maxmemory"], r.config_get("maxmemory-policy")["maxmemory-policy"]
    r.config_set("maxmemory-policy", "noeviction")
    r.config_set("maxmemory", 1)
    try:
        yield
    finally:
        r.config_set("maxmemory", before[0])
        r.config_set("maxmemory-policy", before[1])


def push(r, user, fields: dict):
    """A request as a client sends it (store/inbox.send_commands): fields given as they are."""
    for cmd in inbox.send_commands(K, user, fields):
        r.execute_command(*cmd)


def taken(r) -> int:
    """Requests the scheduler took and has not answered (0 once every one is answered)."""
    return r.llen(K.taken) + r.llen(K.requests)


def reply(r, rid):
    got = r.lrange(K.reply(rid), 0, -1)
    return json.loads(got[-1]) if got else None


def woke(r):
    """Drain the wake list, as the daemon's run loop does before each tick."""
    p = r.pipeline()
    p.lrange(K.wake, 0, -1)
    p.delete(K.wake)
    return p.execute()[0]


def job(r, jid):
    return codec.loads(r.get(K.job(jid)))


BODY = {"argv": ["python", "train.py"], "workdir": "/tmp", "gpus": 1, "cpus": 4, "mem": 12 << 30,
        "time_limit": 7200, "account": "eta"}


def setup(r, raw, now, cfg=CFG):
    """One 4-GPU node registered and a scheduler over `cfg` that has ticked once."""
    AgentStore(r, K).register("n1", 16, 64 << 30, 16, [Gpu(f"GPU-{i}", i, "fake") for i in range(4)], "h", 1, 3600)
    s = Scheduler(r, cfg, me="s1", clock=FROZEN)
    s.tick(now)
    return s


def submit_ok(r, s, now, rid, body, user="alice"):
    submit(r, user, body, rid)
    s.tick(now, woke(r))
    got = reply(r, rid)
    assert got and got["ok"], got
    return got


def act(r, s, now, rid, op, ids, user="alice"):
    push(r, user, {"rid": rid, "op": op, "body": json.dumps({"ids": ids})})
    s.tick(now, woke(r))
    return reply(r, rid)


def thin(r):
    """The thin client's reader over the test's connection (its RESP pipeline, on redis-py)."""
    class Pipe:
        def __init__(self, r):
            self.r = r

        def __call__(self, cmds):
            multi = cmds[0] == ("MULTI",)
            p = self.r.pipeline(transaction=multi)
            for c in (cmds[1:-1] if multi else cmds):
                p.execute_command(*c)
            got = p.execute()
            return [None] * (len(cmds) - 1) + [got] if multi else got
    read = ThinReader.__new__(ThinReader)
    read.k, read.history, read._specs, read._pipe = K, None, {}, Pipe(r)
    return read


def one_admitted(conns, body=None):
    """The daemon over `conns` (fixture) with node n1, and alice's job 1 submitted and admitted
    at once: (r, s, now)."""
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    submit(r, "alice", BODY if body is None else body, "a")
    s.tick(now, woke(r))
    return r, s, now


def finish(r, jid, attempt, outcome, code, at, began=None):
    """The runner's `finished`; its process started `began`, by default as the attempt was
    dispatched (billing runs from the process's start: an attempt without one costs nothing)."""
    if began is None:
        began = job(r, jid).attempts[attempt - 1].dispatch_time
    AgentStore(r, K).post("finished", jid, attempt, "n1", {"outcome": outcome, "exit_code": code,
                                                           "start_time": began, "end_time": at})


# -- the node side on a real redis-server (fixtures: redis_server, real_redis) ---------------------
NODE = "tnode"
ME = pwd.getpwuid(os.geteuid()).pw_name
PY = sys.executable


def put_job(r, jid=1, attempt=1, node=NODE, gpus=("GPU-fake-tnode-0",), **kw):
    kw.setdefault("argv", (PY, "-c", "print('hello')"))
    kw.setdefault("user", ME)
    job = Job(id=jid, account="eta", state=kw.pop("state", states.RUNNING), node=node, gpu_uuids=gpus,
              attempts=tuple(Attempt(n, node, gpus) for n in range(1, attempt + 1)), **kw)
    r.set(K.job(jid), codec.dumps(job))
    if job.script:      # kept apart from the record, as the scheduler writes it (writes.put_specs)
        r.set(K.script(codec.env_ref(job)), job.script)
    # The node's lease, without expiry: a runner starts nothing on a node whose lease is gone.
    r.set(K.node_lease(node), "up", nx=True)
    return job


def runner_env(redis_server, tmp_path, **over):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LABQ_REDIS_URL": redis_server.url,
           "LABQ_NO_SYSTEM_CONFIG": "1", "LABQ_PREFIX": "labq", "LABQ_NODE": NODE, "LABQ_KILL_WAIT": "1",
           "LABQ_SPOOL": str(tmp_path / "spool"), "LABQ_RUN_AS": "self", "LABQ_ALLOW_ROOT": "0",
           "AGENT_SECRET": "do-not-leak"}
    env.update(over)
    return env


def start_runner(env, jid=1, attempt=1):
    code = (f"import json, sys; sys.path.insert(0, {ROOT!r}); from labq.worker.runner import run_job; "
            f"print(json.dumps(run_job({jid}, {attempt})))")
    return subprocess.Popen([PY, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def start_hooked(env, hooks: str, jid=1, attempt=1):
    """A runner whose code is patched by `hooks` (Python run before run_job) to hold it at one
    point of its path while the test breaks something: the interleaving is forced, not awaited."""
    code = (f"import json, os, sys, time; sys.path.insert(0, {ROOT!r})\n{hooks}\n"
            f"from labq.worker.runner import run_job\nprint(json.dumps(run_job({jid}, {attempt})))")
    return subprocess.Popen([PY, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def hold_until(path):
    """Hook code: wait until the test creates `path`."""
    return f"\n    while not os.path.exists({str(path)!r}): time.sleep(0.01)"


def run(env, jid=1, attempt=1, timeout=60):
    p = start_runner(env, jid, attempt)
    out, err = p.communicate(timeout=timeout)
    assert p.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def events(r, kind=None, node=NODE):
    """The events a node's runners and agent posted (on its own stream)."""
    out = []
    for _, f in r.xrange(K.node_events(node)):
        if kind is None or f["kind"] == kind:
            out.append({**f, "body": json.loads(f["body"])})
    return out


def finished(r):
    fin = events(r, "finished")
    assert len(fin) == 1, fin
    return fin[0]["body"]


def agent_config(tmp_path, slots=2, lease="3s"):
    return config_mod.from_dict({
        "scheduler": {"node_lease": lease, "kill_wait": "1s"},
        "worker": {"name": NODE, "gpus": 2, "gpu_model": "fake-A100", "cpus": 4, "mem": "8G", "slots": slots,
                   "spool": str(tmp_path / "spool"), "run_as": "self"}})


def send(r, jid, attempt=1, node=NODE):
    """What the scheduler's admission transaction pushes for an attempt: its node's dispatch entry."""
    from labq.scheduler.store import dispatchq
    r.lpush(K.dispatch(node), dispatchq.entry(jid, attempt))


def runner_states(r, node=NODE) -> dict:
    return r.hgetall(K.node_runners(node))


def idle_runners(r, n, node=NODE):
    """Wait until `n` runners of the node report idle; their states."""
    return wait_for(lambda: (lambda s: s if sum(v.startswith("idle") for v in s.values()) == n else None)(
        runner_states(r, node)), timeout=60, what=f"{n} idle runners")


# -- end to end: real redis-server, `labq scheduler`, `labq worker` (cli/embedded.py) --------------
E2E_MARKS = [pytest.mark.e2e, pytest.mark.redis]
if not shutil.which("redis-server"):
    E2E_MARKS.append(pytest.mark.skipif(not os.environ.get("CI"), reason="redis-server is not installed"))

E2E_CONFIG = """
[scheduler]
tick = 0.2
kill_wait = "2s"
node_lease = "10s"
[rates]
gpu_hour = 2.0
[accounts.eta]
users = ["{user}"]
[[budgets]]
name = "eta-sweep"
account = "eta"
limit = 120.0
reserve = 0.1
[worker]
name = "e2e-node"
gpus = 4
cpus = 16
mem = "64G"
# 6 job slots (slot runner processes): the 4 GPUs, not the slots, are what limits the sweep.
slots = 6
spool = "{spool}"
run_as = "self"
"""


def two_labs(head: str, guarantee: int, borrow_limit: int, slots: int) -> str:
    """An E2E config for contention (tests/e2e/test_e2e_contention.py, bench/soak.py): `head` (the
    [scheduler], [qos.*], [rates] tables), then lab-a and lab-b, each guaranteed `guarantee` GPUs and
    allowed to borrow `borrow_limit` more, on one node of 8 GPUs with `slots` runners."""
    labs = "".join(f"[accounts.{a}]\nopen = true\nguarantee = {guarantee}\nborrow_limit = {borrow_limit}\n"
                   for a in ("lab-a", "lab-b"))
    return (head.rstrip("\n") + "\n" + labs + "[worker]\nname = \"e2e-node\"\ngpus = 8\ncpus = 16\nmem = \"32G\"\n"
            f"slots = {slots}\nspool = \"{{spool}}\"\nrun_as = \"self\"\n")


class E2E:
    """redis-server, `labq scheduler` and `labq worker` in a temporary directory, the config `text`
    formatted with {user} and {spool}; up once the node has registered."""

    def __init__(self, text: str = E2E_CONFIG, prefix: str = "labq-e2e-"):
        self.dir = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
        self.work = os.path.join(self.dir, "work")
        os.makedirs(self.work)
        self.cfg_path = os.path.join(self.dir, "labq.toml")
        with open(self.cfg_path, "w") as f:
            f.write(text.format(user=current_user(), spool=os.path.join(self.dir, "spool")))
        self.cfg = config.load(self.cfg_path)
        self.log = open(os.path.join(self.dir, "daemons.log"), "w")
        self.stack = Stack(self.dir, self.cfg_path, log=self.log)
        self.stack.start_all()
        self.client = Client(self.cfg, url=self.stack.url)
        self.wait_up()

    def wait_up(self, timeout: float = 120) -> None:
        wait_for(lambda: [n for n in self.client.nodes() if n.state == "up"], timeout, 0.1,
                 what=f"the worker to register (see {self.log.name})")

    def labq(self, *args, stdin=None):
        return subprocess.run(self.stack.command(*args), env=self.stack.env(), cwd=self.work, input=stdin,
                              capture_output=True, text=True, timeout=120)

    def sub(self, *args, account: str = "eta") -> int:
        p = self.labq("sub", "--parsable", "-A", account, *args)
        assert p.returncode == 0, p.stderr
        return int(p.stdout.strip().split("_")[0])

    def job(self, jid):
        return self.client.read.job(jid)

    def wait_state(self, jid, wanted, timeout=90):
        return wait_for(lambda: (j := self.job(jid)) and j.state in wanted and j, timeout,
                        what=f"job {jid} to reach {wanted}")

    def close(self):
        self.stack.stop_all()
        self.log.close()
        if not os.environ.get("LABQ_KEEP_TEST_DIR"):
            shutil.rmtree(self.dir, ignore_errors=True)


# -- a researcher's shell against an E2E stack (fixture: stack, in conftest.py) ----------------
VENV_BIN = os.path.dirname(sys.executable)     # the test's own venv: it has `python`, /usr/bin has not
SECRET = "daemon-only-secret-7f3a"


def user_env(e, **extra) -> dict:
    """A researcher's shell inside a venv: the venv first on PATH, no daemon variables."""
    env = {"PATH": f"{VENV_BIN}:/usr/bin:/bin", "VIRTUAL_ENV": os.path.dirname(VENV_BIN),
           "HOME": os.environ.get("HOME", "/root"), "LANG": "C.UTF-8", "LABQ_REDIS_URL": e.stack.url,
           "PYTHONPATH": ROOT, "LABQ_NO_SYSTEM_CONFIG": "1"}    # hermetic: see conftest.py
    if os.environ.get("XDG_CACHE_HOME"):
        env["XDG_CACHE_HOME"] = os.environ["XDG_CACHE_HOME"]     # HOME is the runner's: not its ~/.cache
    env.update(extra)
    return env


def labq(e, *args, env):
    cmd = [sys.executable, "-m", "labq.cli.main", "--config", e.cfg_path, *args]
    return subprocess.run(cmd, env=env, cwd=e.work, capture_output=True, text=True, timeout=120)


# -- varied ended jobs (acct's formatter, the estimator's start) ------------------------------
# Ends from 2026-12-20 to 2027-04-10: over US DST (2027-03-14) and Lord Howe's half-hour one (2027-04-04).
ENDED_FROM, ENDED_TO = 1_797_724_800.0, 1_807_228_800.0
ENDED_NAMES = ("train", "", "eval-Ω", "模型训练", "a-job-name-that-is-rather-longer-than-the-others-are", "x y")


def ended_job(rng, jid: int) -> Job:
    """An ended job whose every acct column varies (`rng`: a random.Random): states, exit codes and
    signals, arrays, 0-3 attempts (some never started), costs around fmt_money's cases, names."""
    end = round(rng.uniform(ENDED_FROM, ENDED_TO), rng.choice((0, 3, 6)))
    outcome, code, state = rng.choice([("completed", 0, states.COMPLETED)] * 6 + [
        ("exit", 1, states.FAILED), ("exit", -9, states.FAILED), ("exit", None, states.FAILED),
        ("timeout", None, states.TIMEOUT), ("oom", 137, states.OOM), ("cancelled", None, states.CANCELLED),
        ("node_failure", None, states.NODE_FAIL)])
    gpus = rng.choice((0, 0, 1, 2, 4, 8))
    atts, t = [], end
    for k in reversed(range(rng.choice((0, 1, 1, 1, 2, 3)))):
        run = rng.choice((0, 1, 59, 3599, 3600, 86_399, 86_400, 200_000, rng.uniform(1, 90_000)))
        last = not atts
        cost = rng.choice((0, 1, 9_999, 10_000, 5_000, 123_456_789, 99_999_995_000, rng.randrange(10 ** 9)))
        atts.insert(0, Attempt(k + 1, f"n{rng.randrange(3)}", tuple(f"GPU-{g}" for g in range(gpus)),
                               start_time=None if rng.random() < 0.05 else t - run, dispatch_time=t - run - 1,
                               end_time=t, outcome=outcome if last else "preempted",
                               exit_code=code if last else None, cost=cost))
        t -= run + rng.uniform(0, 600)
    arr = rng.random() < 0.3
    return Job(id=jid, user=rng.choice(("alice", "bob", "carol")), account=rng.choice(("eta", "theta")),
               name=rng.choice(ENDED_NAMES), gpus=gpus, cpus=rng.randrange(1, 9), mem=rng.randrange(0, 64) << 30,
               time_limit=rng.choice((600, 86_400)), state=state, exit_code=code,
               array_id=jid - rng.randrange(5) if arr else None, array_index=rng.randrange(10_000) if arr else None,
               attempts=tuple(atts), start_time=atts[0].start_time if atts else None, end_time=end,
               submit_time=ENDED_FROM - 86_400)


# -- attackers: real users and a library the dynamic loader preloads (issue 34) -----------------------
@contextlib.contextmanager
def unix_user(prefix: str = "lqx"):
    """A fresh unprivileged user with a private group (root and useradd only), removed afterwards."""
    name = f"{prefix}{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "--no-create-home", "--home-dir", f"/nonexistent/{name}", "--shell", "/bin/sh",
                    "--user-group", name], check=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], check=False)


SPY_C = r"""
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
/* Loaded by the dynamic loader (LD_PRELOAD): leaves SPY_DIR/<pid> saying who loaded it. */
__attribute__((constructor)) static void spy(void) {
    char path[4096], exe[512] = "?", line[700];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 1] = 0;
    snprintf(path, sizeof path, "%s/%d", SPY_DIR, (int)getpid());
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0666);
    if (fd >= 0) {
        fchmod(fd, 0666);      /* the pid's next image may run as another user */
        int len = snprintf(line, sizeof line, "%d %s\n", (int)geteuid(), exe);
        if (write(fd, line, len) < 0) {}
        close(fd);
    }
}
"""


def preload_spy(d) -> tuple[str, str]:
    """(library, its output directory) under `d` (which other users may enter): a shared object,
    built with gcc, that records the euid of every process the loader loads it into; `spied(out)`
    reads it."""
    lib, out = os.path.join(d, "spy.so"), os.path.join(d, "spied")
    os.mkdir(out)
    os.chmod(out, 0o1777)
    src = os.path.join(d, "spy.c")
    with open(src, "w") as f:
        f.write(SPY_C)
    subprocess.run(["gcc", "-shared", "-fPIC", f'-DSPY_DIR="{out}"', "-o", lib, src], check=True)
    os.chmod(lib, 0o755)
    return lib, out


def spied(out: str) -> list[tuple[int, str]]:
    """(euid, executable) of each process that loaded the spy library."""
    rows = []
    for name in os.listdir(out):
        with open(os.path.join(out, name)) as f:
            rows += [(int(u), exe) for u, _, exe in (line.rstrip("\n").partition(" ") for line in f)]
    return rows


BUDGET_CONFIG = """
[scheduler]
budget_mode = "forecast"
[rates]
gpu_hour = 36.0
[accounts.eta]
users = ["{user}"]
[security]
admins = ["{user}"]
[[budgets]]
name = "eta-sweep"
account = "eta"
limit = 1.0
"""


class BudgetBench:
    """One budget over account eta, a node n1 of 4 fake GPUs, and a Scheduler ticked in this process
    while each `labq` command runs (tests/contract/test_budget_cli.py, test_fastpath.py)."""

    def __init__(self, rp, tmp_path):
        self.rp, self.r = rp, rp.client()
        self.r.flushall()
        self.cfg_path = tmp_path / "labq.toml"
        self.cfg_path.write_text(BUDGET_CONFIG.format(user=current_user()))
        self.cfg = config_mod.load(str(self.cfg_path))
        AgentStore(self.r, Keys()).register("n1", 16, 64 << 30, 8, [Gpu(f"GPU-{i}", i, "fake") for i in range(4)],
                                            "h", 1, 10 ** 9)
        self.s = Scheduler(self.r, self.cfg, me="s1")
        self.s.tick(time.time())

    def labq(self, *args, env=None, scheduler=True):
        e = {**os.environ, "LABQ_REDIS_URL": self.rp.url, "PYTHONPATH": ROOT, **(env or {})}
        p = subprocess.Popen([sys.executable, "-m", "labq.cli.main", "--config", str(self.cfg_path), *args], cwd=ROOT,
                             env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        while scheduler and p.poll() is None:
            self.s.tick(time.time(), [f"user:{current_user()}"])
            time.sleep(0.02)
        out, err = p.communicate(timeout=120)
        return p.returncode, out, err

    def submit_at(self, now, **body) -> int:
        """A held-light job (no GPU, 600 s limit) submitted at `now`, answered by a tick of the scheduler at
        that time (test_published_ranking, test_rare_lean): its id."""
        rid = f"r{time.monotonic_ns()}"
        b = {"argv": ["true"], "workdir": "/tmp", "gpus": 0, "cpus": 1, "time_limit": 600, "est": 10,
             "account": "eta", **body}
        push(self.r, current_user(), {"rid": rid, "op": "submit", "body": json.dumps(b)})
        self.r.delete(Keys().wake)
        self.s.tick(now, [f"user:{current_user()}"])
        got = json.loads(self.r.lrange(Keys().reply(rid), 0, -1)[-1])
        assert "job_id" in got, got
        return got["job_id"]

    def run_job(self, seconds, **body):
        rid = f"r{time.monotonic_ns()}"
        b = {"argv": ["true"], "workdir": "/tmp", "gpus": 1, "cpus": 1, "time_limit": 3600, "est": 10,
             "account": "eta", **body}
        push(self.r, current_user(), {"rid": rid, "op": "submit", "body": json.dumps(b)})
        self.r.delete(Keys().wake)           # as the run loop drains it: nothing else is waiting, so it plans now
        self.s.tick(time.time(), [f"user:{current_user()}"])
        jid = json.loads(self.r.lrange(Keys().reply(rid), 0, -1)[-1])["job_id"]
        a = self.s.jobs[jid].current
        AgentStore(self.r, Keys()).post("finished", jid, a.attempt, "n1", {
            "outcome": "completed", "exit_code": 0, "start_time": a.dispatch_time,
            "end_time": a.dispatch_time + seconds})
        self.s.tick(a.dispatch_time + seconds + 0.5)
        return jid


def proc_stat(pid: int) -> list[str]:
    """/proc/PID/stat's fields after the command name (state first, then the parent's pid), [] once
    the process is gone: what the runner-freezing tests read of a job's leader."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return []
