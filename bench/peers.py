"""The peers, doing the same work as labq in the same run: task-spooler and single-node SLURM.

Both are set up by the benchmark, privately, and torn down at the end; nothing is installed and
nothing system-wide is touched (no /etc, no system munged, no default ports):

- **task-spooler** (`tsp`, Debian `task-spooler`): its own server on a socket in a temporary
  directory (TS_SOCKET, TMPDIR for the output files), `tsp -S 4`. tsp has no API and no arrays: a job
  is one `tsp` client process, which stays alive until its job has run (so at most TS_MAXCONN,
  1,000 by default, can be queued).
- **SLURM 22.05** (Debian `slurm-wlm` + `munge`), one node on loopback: a munged with its own key
  and socket, a slurm.conf for one node (4 CPUs, `Gres=gpu:4` backed by fake device files in the
  temporary directory) with a private StateSaveLocation, SlurmdSpoolDir, pid and log files and two
  free TCP ports, then `slurmctld -D` and `slurmd -D` as root. Scheduling parameters are Debian's
  defaults (sched/backfill, no high-throughput tuning); accounting, cgroups and task plugins are off.

Every figure is taken the way labq's is: latency = the time `date +%s.%N` printed minus the time
just before the submit command, one job at a time on an idle node; throughput = M trivial jobs
(`true`, each writing a log file) from just before the submit until a poll sees them all done;
command walls are medians of whole processes.
"""
import os
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time

from latency_bench import started_at

TSP_MAXCONN = 1000


class PeerUnusable(Exception):
    """The peer is not installed or could not be started: its cells say why."""


def _run(argv, env, timeout=60, check=True) -> subprocess.CompletedProcess:
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise RuntimeError(f"`{' '.join(argv)[:120]}` exited {p.returncode}: {(p.stderr or p.stdout).strip()[-300:]}")
    return p


def _wall_ms(argv, env) -> float:
    t0 = time.perf_counter()
    _run(argv, env)
    return (time.perf_counter() - t0) * 1000


def _until(pred, timeout: float, what: str, interval: float):
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > end:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


# -- task-spooler ------------------------------------------------------------------------------
class TaskSpooler:
    name = "task-spooler"

    def __init__(self, slots: int = 4):
        self.slots = slots
        self.exe = shutil.which("tsp")
        self.dir = None
        self.version = ""

    def __enter__(self):
        if not self.exe:
            raise PeerUnusable("not installed (`tsp`, Debian package task-spooler)")
        self.dir = tempfile.mkdtemp(prefix="labq-bench-tsp-", dir="/tmp")
        self.env = dict(os.environ, TS_SOCKET=os.path.join(self.dir, "ts.sock"), TMPDIR=self.dir,
                        TS_MAXFINISHED="2000", TS_MAXCONN=str(TSP_MAXCONN))
        self.env.pop("TS_ONFINISH", None)
        self.env.pop("TS_ENV", None)
        try:
            self.version = (_run([self.exe, "-V"], self.env, check=False).stdout.strip().splitlines() or [""])[0]
            self.version = self.version.split(" - ")[0]
            _run([self.exe, "-S", str(self.slots)], self.env, timeout=10)    # starts the server
            self.wait_idle(10)
        except (OSError, RuntimeError, subprocess.SubprocessError, TimeoutError) as e:
            self.close()
            raise PeerUnusable(f"could not start: {e}") from None
        return self

    def __exit__(self, *exc):
        self.close()

    def tsp(self, *args, timeout=60) -> str:
        return _run([self.exe, *args], self.env, timeout=timeout).stdout.strip()

    def states(self) -> list[str]:
        lines = self.tsp("-l").splitlines()[1:]
        return [ln.split()[1] for ln in lines if len(ln.split()) > 1]

    def wait_idle(self, timeout: float = 120, interval: float = 0.05) -> None:
        _until(lambda: not any(s in ("queued", "running", "allocating") for s in self.states()),
               timeout, "task-spooler to go idle", interval)

    def close(self):
        if not self.dir:
            return
        try:
            self.wait_idle(30)
        except Exception:      # reported nowhere: a server we cannot reach is killed below anyway
            pass
        _run([self.exe, "-K"], self.env, timeout=10, check=False)
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None

    def describe(self) -> str:
        return f"{self.version or 'tsp'}; its own server, `tsp -S {self.slots}`"

    # -- the benchmarks ------------------------------------------------------------------------
    def latency(self, n: int) -> list[float]:
        """ms from just before `tsp date +%s.%N` to the time the job printed; one at a time."""
        out = []
        for _ in range(n):
            t0 = time.time()
            jid = self.tsp("date", "+%s.%N")
            self.tsp("-w", jid)
            out.append((started_at(self.tsp("-o", jid)) - t0) * 1000)
        return out

    def throughput(self, m: int) -> tuple[float, str]:
        self.wait_idle()
        t0 = time.time()
        for _ in range(m):
            self.tsp("true")
        self.wait_idle(300)
        wall = time.time() - t0
        return m / wall, (f"{m} jobs, `tsp true` × {m} (no arrays: the clock includes {m} client starts), "
                          f"{wall:.2f} s; {self.slots} slots")

    def submit_wall(self, n: int) -> list[float]:
        ts = [_wall_ms([self.exe, "true"], self.env) for _ in range(n)]
        self.wait_idle()
        return ts


# -- SLURM -------------------------------------------------------------------------------------
SLURM_CONF = """\
# Written by labq's bench/peers.py: one node on loopback, everything under {d}.
ClusterName=labqbench
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={d}/munge/munge.socket
CredType=cred/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd.log
PlugStackConfig={d}/plugstack.conf
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
# The node is described, not probed (this machine may have fewer cores than the node's 4 CPUs).
SlurmdParameters=config_overrides
MaxArraySize=100001
MaxJobCount=300000
GresTypes=gpu
NodeName=benchnode NodeHostname={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=4000 Gres=gpu:{gpus} State=UNKNOWN
PartitionName=bench Nodes=benchnode Default=YES MaxTime=INFINITE State=UP
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _fake_gpu(path: str, minor: int) -> str:
    """A character device node for gres.conf (slurmd wants one); a symlink to /dev/null if mknod is refused."""
    try:
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(195, minor))
        return "char device 195:N"
    except OSError:
        os.symlink("/dev/null", path)
        return "symlinks to /dev/null"


class Slurm:
    name = "SLURM"
    BINARIES = ("munged", "munge", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "sinfo")

    def __init__(self, cpus: int = 4, gpus: int = 4):
        self.cpus, self.gpus = cpus, gpus
        self.dir = None
        self.procs: dict[str, subprocess.Popen] = {}
        self.version = ""
        self.devices = ""

    def __enter__(self):
        missing = [b for b in self.BINARIES if not shutil.which(b)]
        if missing:
            raise PeerUnusable(f"not installed ({', '.join(missing)} missing; Debian packages slurm-wlm and munge)")
        if os.geteuid() != 0:
            raise PeerUnusable("slurmd must run as root to start jobs; the benchmark is not root")
        try:
            self._start()
        except Exception as e:
            why = f"{type(e).__name__}: {e}"
            tail = self.tail()
            self.close()
            raise PeerUnusable(f"could not start: {why}" + (f" | {tail}" if tail else "")) from None
        return self

    def __exit__(self, *exc):
        self.close()

    def _start(self):
        self.dir = d = tempfile.mkdtemp(prefix="labq-bench-slurm-", dir="/tmp")
        # munged checks every directory above its socket: all must be searchable, none group/world writable.
        os.chmod(d, 0o755)
        for sub, mode in (("munge", 0o755), ("key", 0o700), ("state", 0o700), ("spool", 0o755),
                          ("log", 0o755), ("dev", 0o755), ("work", 0o755)):
            os.mkdir(os.path.join(d, sub), mode)
        key = os.path.join(d, "key", "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        self.version = _run(["slurmctld", "-V"], dict(os.environ), check=False).stdout.strip()
        host = socket.gethostname().split(".")[0]
        with open(os.path.join(d, "slurm.conf"), "w") as f:
            f.write(SLURM_CONF.format(d=d, host=host, ctld_port=_free_port(), d_port=_free_port(),
                                      cpus=self.cpus, gpus=self.gpus))
        with open(os.path.join(d, "plugstack.conf"), "w"):
            pass
        for i in range(self.gpus):
            self.devices = _fake_gpu(os.path.join(d, "dev", f"nvidia{i}"), i)
        with open(os.path.join(d, "gres.conf"), "w") as f:
            f.write(f"NodeName=benchnode Name=gpu File={d}/dev/nvidia[0-{self.gpus - 1}]\n")
        self.env = dict(os.environ, SLURM_CONF=os.path.join(d, "slurm.conf"))
        for k in [k for k in self.env if k.startswith(("SLURM_", "SBATCH_", "SQUEUE_")) and k != "SLURM_CONF"]:
            del self.env[k]
        sock = os.path.join(d, "munge", "munge.socket")
        self._spawn("munged", ["munged", "-F", f"--socket={sock}", f"--key-file={key}",
                               f"--pid-file={d}/munge/munged.pid", f"--seed-file={d}/key/munged.seed",
                               f"--log-file={d}/log/munged.log"])
        _until(lambda: self._alive("munged") and os.path.exists(sock), 15, "munged's socket", 0.05)
        self._spawn("slurmctld", ["slurmctld", "-D", "-c"])
        _until(lambda: self._alive("slurmctld") and
               "UP" in _run(["scontrol", "ping"], self.env, check=False, timeout=10).stdout, 30, "slurmctld", 0.2)
        self._spawn("slurmd", ["slurmd", "-D", "-N", "benchnode"])
        _until(lambda: self._alive("slurmd") and
               _run(["sinfo", "-h", "-N", "-o", "%t"], self.env, check=False, timeout=10).stdout.strip() == "idle",
               60, "the node to be idle", 0.2)
        _run(["sbatch", "--wait", "-o", "/dev/null", "--wrap", "true"], self.env, timeout=60)   # warm-up
        self.wait_idle()

    def _spawn(self, name, argv):
        log = open(os.path.join(self.dir, "log", f"{name}.out"), "w")
        self.procs[name] = subprocess.Popen(argv, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, process_group=0)
        log.close()

    def _alive(self, name) -> bool:
        p = self.procs[name]
        if p.poll() is not None:
            raise RuntimeError(f"{name} exited {p.returncode}")
        return True

    def tail(self, n: int = 2) -> str:
        if not self.dir:
            return ""
        out = []
        for name in ("munged.out", "slurmctld.out", "slurmd.out"):
            try:
                with open(os.path.join(self.dir, "log", name)) as f:
                    lines = [ln.strip() for ln in f if "error" in ln.lower() or "fatal" in ln.lower()]
                out += [f"{name}: {ln}" for ln in lines[-n:]]
            except OSError:
                pass
        return " / ".join(out)

    def close(self):
        if not self.dir:
            return
        if self.procs.get("slurmctld") and self.procs["slurmctld"].poll() is None:
            _run(["scancel", "--quiet", "-u", "root"], self.env, timeout=30, check=False)
            _run(["scontrol", "shutdown"], self.env, timeout=30, check=False)
        for name in ("slurmd", "slurmctld", "munged"):
            p = self.procs.pop(name, None)
            if p is None:
                continue
            if name == "munged" or p.poll() is None:
                try:
                    p.wait(10 if name != "munged" else 0.1)
                except subprocess.TimeoutExpired:
                    p.send_signal(signal.SIGTERM)
                    try:
                        p.wait(10)
                    except subprocess.TimeoutExpired:
                        os.killpg(p.pid, signal.SIGKILL)
                        p.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None

    def describe(self) -> str:
        return (f"{self.version}; slurmctld + slurmd + munged on loopback, one node of {self.cpus} CPUs, "
                f"Gres=gpu:{self.gpus} ({self.devices}), Debian's default scheduling parameters (no high-throughput "
                f"tuning such as SchedulerParameters=batch_sched_delay)")

    def cmd(self, *argv, timeout=60) -> str:
        return _run(list(argv), self.env, timeout=timeout).stdout.strip()

    def active(self, job: str | None = None) -> list[str]:
        args = ["squeue", "-h", "-r", "-o", "%i"] + (["-j", job] if job else [])
        p = _run(args, self.env, check=False, timeout=30)
        if p.returncode != 0 and job:      # an id that has left squeue's memory: not active
            return []
        return p.stdout.split()

    def wait_idle(self, timeout: float = 120, interval: float = 0.05) -> None:
        _until(lambda: not self.active(), timeout, "SLURM to go idle", interval)

    # -- the benchmarks ------------------------------------------------------------------------
    def latency(self, n: int) -> list[float]:
        out = []
        work = os.path.join(self.dir, "work")
        for i in range(n):
            self.wait_idle()
            path = os.path.join(work, f"lat-{i}.out")
            t0 = time.time()
            self.cmd("sbatch", "--parsable", "-o", path, "--wrap", "date +%s.%N")
            out.append((started_at(path) - t0) * 1000)
        self.wait_idle()
        return out

    def throughput(self, m: int) -> tuple[float, str]:
        self.wait_idle()
        out = os.path.join(self.dir, "work", "tput-%A_%a.out")
        t0 = time.time()
        jid = self.cmd("sbatch", "--parsable", f"--array=1-{m}", "-o", out, "--wrap", "true")
        _until(lambda: not self.active(jid), 900, f"{m} SLURM jobs", 0.1)
        wall = time.time() - t0
        return m / wall, f"{m} jobs as one `sbatch --array=1-{m}`, {wall:.2f} s; {self.cpus} CPUs, 1 CPU each"

    def array_submit(self, tasks: int, runs: int) -> tuple[list[float], str]:
        """ms of `sbatch -H --array=1-N` (held, so it stays pending); the last one is left queued."""
        times, jid = [], None
        for i in range(runs):
            t0 = time.perf_counter()
            jid = self.cmd("sbatch", "--parsable", "-H", f"--array=1-{tasks}", "-o", "/dev/null", "--wrap", "true")
            times.append((time.perf_counter() - t0) * 1000)
            if i < runs - 1:
                self.cmd("scancel", jid)
                self.wait_idle()
        return times, jid

    def submit_walls(self, n: int) -> dict[str, list[float]]:
        test = [_wall_ms(["sbatch", "--test-only", "-o", "/dev/null", "--wrap", "true"], self.env) for _ in range(n)]
        sub = [_wall_ms(["sbatch", "-H", "-o", "/dev/null", "--wrap", "true"], self.env) for _ in range(n)]
        return {"subtest.wall": test, "sub.wall": sub}

    def stat_wall(self, n: int) -> tuple[list[float], int]:
        queued = len(self.active())
        return [_wall_ms(["squeue"], self.env) for _ in range(n)], queued
