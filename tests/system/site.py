"""A machine deployed as the units say, in a scratch directory (tests/e2e/test_admin_guide.py and
tests/system/): Redis as `redis`, the scheduler as an unprivileged system user with the unit's
environment, workers as root, each with its STATE_DIRECTORY."""
import os
import pathlib
import pwd
import shlex
import shutil
import signal
import subprocess
import uuid

from tests.harness import wait_for


class Site:
    """The guide's machine in a scratch directory, deployed as the units say: Redis as `redis` in
    /var/lib/redis (its /run/redis removed when it stops, as Debian's unit does), the scheduler as an
    unprivileged system user with the unit's environment (STATE_DIRECTORY, UMask=0077, a home it
    cannot write), the worker as root with its own STATE_DIRECTORY. The guide's `systemctl` lines
    act on these processes; every other step runs as written (paths moved)."""

    def __init__(self, s: pathlib.Path, port: int, user):
        self.s, self.user, self.procs = s, user, {}
        self.log = open(s / "daemons.log", "a")
        self.sock = s / "run/redis/redis-server.sock"
        self.env = dict(os.environ, PATH=f"{s}/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                        LABQ_CONFIG=f"{s}/etc/labq/labq.toml")
        for k in ("PYTHONPATH", "LABQ_NO_SYSTEM_CONFIG", "LABQ_REDIS_URL", "LABQ_STATE_DIR"):
            self.env.pop(k, None)        # the config names everything: a machine's shell, not the suite's

    def start(self, name: str) -> None:
        s, redis_pw = self.s, pwd.getpwnam("redis")
        if name == "redis":
            (s / "run/redis").mkdir(exist_ok=True)
            os.chown(s / "run/redis", redis_pw.pw_uid, redis_pw.pw_gid)
            argv = ["setpriv", f"--reuid={redis_pw.pw_uid}", f"--regid={redis_pw.pw_gid}", "--clear-groups",
                    "redis-server", "--port", "0", "--unixsocket", str(self.sock), "--unixsocketperm", "777",
                    "--dir", str(s / "var/lib/redis"), "--appendonly", "yes", "--save", ""]
            env, umask = self.env, 0o022
        elif name == "scheduler":
            u = self.user
            argv = ["setpriv", f"--reuid={u.pw_uid}", f"--regid={u.pw_gid}", "--clear-groups",
                    f"{s}/usr/local/bin/labq", "scheduler"]
            env = dict(self.env, STATE_DIRECTORY=f"{s}/var/lib/labq-scheduler", HOME=u.pw_dir, USER=u.pw_name,
                       LOGNAME=u.pw_name)
            umask = 0o077
        else:                       # "worker", or "worker-NODE" with its own config and state directory
            node = name.partition("-")[2]
            conf = ["--config", f"{s}/etc/labq/{node}.toml"] if node else []
            argv, umask = [f"{s}/usr/local/bin/labq", *conf, "worker"], 0o022
            env = dict(self.env, STATE_DIRECTORY=f"{s}/var/lib/labq{'-' + node if node else ''}")
        self.log.write(f"--- start {name}\n")
        self.log.flush()
        self.procs[name] = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                            preexec_fn=lambda: os.umask(umask))
        if name == "redis":
            wait_for(self.sock.exists, 30, what="redis")

    def stop(self, name: str) -> int | None:
        p = self.procs.pop(name, None)
        if p is None:
            return None
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        if name == "redis":
            shutil.rmtree(self.s / "run/redis", ignore_errors=True)     # Debian's RuntimeDirectory=
        return p.returncode

    def systemctl(self, line: str) -> None:
        """A guide line `systemctl stop|start|restart UNIT...`, on this site's processes."""
        words = shlex.split(line, comments=True)
        if len(words) < 3 or words[0] != "systemctl" or words[1] not in ("stop", "start", "restart"):
            return                                          # enable, daemon-reload: nothing to do here
        names = [{"labq-scheduler": "scheduler", "labq-worker": "worker", "redis-server": "redis"}[w]
                 for w in words[2:]]
        for n in names:
            if words[1] in ("stop", "restart"):
                self.stop(n)
            if words[1] in ("start", "restart"):
                self.start(n)

    def close(self):
        for n in [n for n in self.procs if n.startswith("worker")] + ["scheduler", "redis"]:
            self.stop(n)
        self.log.close()


def system_user():
    name = f"lqs{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent", "--shell",
                    "/usr/sbin/nologin", "--user-group", name], check=True)
    return pwd.getpwnam(name)
