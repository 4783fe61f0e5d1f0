"""A private labq for the live benchmarks: redis-server, `labq scheduler`, `labq worker` — the same
processes `labq up` starts (cli/embedded.py), on a unix socket in a temporary directory."""
import os
import shutil
import subprocess
import sys
import tempfile
import time

from labq.cli.embedded import ROOT, Stack
from labq.scheduler.client import Client, current_user
from labq.scheduler.jobs import states
from labq.scheduler.settings import config

CONFIG = """
[scheduler]
tick = "{tick}"
kill_wait = "5s"
# The submission benchmark leaves 10,000+ parked jobs pending; the memory benchmark 100,000.
max_pending = {max_pending}
max_pending_per_user = {max_pending}
[accounts.bench]
users = ["{user}"]
# Jobs charged here are submitted held (BenchStack.body): submission is measured without running them.
# (max_running = 0 would make them unrunnable, and submit refuses what could never run.)
[accounts.parked]
users = ["{user}"]
[worker]
name = "bench-node"
gpus = 0
cpus = 4
mem = "8G"
slots = {slots}
spool = "{spool}"
run_as = "self"
"""


class Unusable(Exception):
    """The stack could not be started or does not run jobs: the benchmark row says why."""


class BenchStack:
    def __init__(self, slots: int = 4, max_pending: int = 100_000, tick: str = "1s"):
        if not shutil.which("redis-server") and not os.path.exists("/usr/bin/redis-server"):
            raise Unusable("redis-server is not installed")
        self.dir = tempfile.mkdtemp(prefix="labq-bench-", dir="/tmp")
        self.work = os.path.join(self.dir, "work")
        os.makedirs(self.work)
        self.cfg_path = os.path.join(self.dir, "labq.toml")
        with open(self.cfg_path, "w") as f:
            f.write(CONFIG.format(user=current_user(), slots=slots, spool=os.path.join(self.dir, "spool"),
                                  max_pending=max_pending, tick=tick))
        self.cfg = config.load(self.cfg_path)
        self.slots = slots
        self.log_path = os.path.join(self.dir, "daemons.log")
        self.log = open(self.log_path, "w")
        self.stack = Stack(self.dir, self.cfg_path, log=self.log)
        self.client = None

    def __enter__(self):
        try:
            self.stack.start_all()
            self.client = Client(self.cfg, url=self.stack.url)
            self._wait(lambda: [n for n in self.client.nodes() if n.state == "up"], 60, "the worker to register")
            # The agent registers before its slot runners have imported everything: run one job per slot.
            ids = [self.submit(["true"])["job_id"] for _ in range(self.slots)]
            self.wait_terminal(ids, 60)
            bad = [j for j in self.client.read.jobs(ids) if j.state != states.COMPLETED]
            if bad:
                raise Unusable(f"warm-up job {bad[0].id} ended {bad[0].state}: {bad[0].detail or bad[0].reason}")
        except Unusable:
            self.close()
            raise
        except Exception as e:
            tail = self.tail()
            self.close()
            raise Unusable(f"{type(e).__name__}: {e}" + (f" | daemons.log: {tail}" if tail else "")) from None
        return self

    def __exit__(self, *exc):
        self.close()

    def tail(self, n: int = 3) -> str:
        try:
            with open(self.log_path) as f:
                return " / ".join(line.strip() for line in f.readlines()[-n:])
        except OSError:
            return ""

    def close(self):
        self.stack.stop_all(timeout=15)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _wait(self, pred, timeout, what, interval=0.02):
        end = time.monotonic() + timeout
        while True:
            dead = self.stack.dead()
            if dead:
                raise Unusable(f"{', '.join(dead)} exited | daemons.log: {self.tail()}")
            v = pred()
            if v:
                return v
            if time.monotonic() > end:
                raise Unusable(f"timed out after {timeout}s waiting for {what} | daemons.log: {self.tail()}")
            time.sleep(interval)

    def body(self, argv, **kw) -> dict:
        from labq.cli.subcore import build_body
        opts = {"account": "bench", "chdir": self.work, "time_": "10m"}
        opts.update(kw)
        if opts["account"] == "parked":
            opts["hold"] = True
        return build_body(opts, list(argv), None)

    def submit(self, argv, **kw) -> dict:
        return self.client.submit(self.body(argv, **kw))

    def wait_terminal(self, ids, timeout: float, interval: float = 0.02):
        ids = list(ids)
        return self._wait(lambda: (js := self.client.read.jobs(ids)) and len(js) == len(ids)
                          and all(j.state in states.TERMINAL for j in js) and js,
                          timeout, f"{len(ids)} jobs to finish", interval)

    # -- the CLI, as a user runs it ------------------------------------------------------------
    def labq_argv(self, *args) -> list[str]:
        return labq_command() + ["--config", self.cfg_path, *args]

    def run_labq(self, *args, timeout=60, env=None) -> subprocess.CompletedProcess:
        """`labq ARGS` in the stack's env (the checkout on PYTHONPATH), or in `env`."""
        return subprocess.run(self.labq_argv(*args), env=env or self.stack.env(), cwd=self.work, capture_output=True,
                              text=True, timeout=timeout)


def labq_command() -> list[str]:
    """The installed console script when there is one, else `python -m labq.cli.main` from the checkout."""
    for cand in (os.path.join(os.path.dirname(sys.executable), "labq"), shutil.which("labq")):
        if cand and os.access(cand, os.X_OK):
            return [cand]
    return [sys.executable, "-m", "labq.cli.main"]


def labq_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("LABQ_CONFIG", None)
    return env
