"""Turning a job record into a process: who it runs as, its environment, its logs, its argv.

Everything that can make an attempt fail before it starts raises `StartError`, which the runner
reports as outcome "error" with the message, so the scheduler is never left waiting.
"""
import contextlib
import os
import pwd
import shutil
import stat
from dataclasses import dataclass

from labq.scheduler.jobs import logpath
from labq.scheduler.jobs.model import Attempt, Job

from . import batchenv, jobenv

DEFAULT_PATH = jobenv.DEFAULT_PATH


class StartError(Exception):
    """The attempt could not be started (user, workdir, log path, command)."""


@dataclass(frozen=True)
class Settings:
    """What the agent hands its slot runners (and so each attempt's runner) over their pipe."""
    redis_url: str
    prefix: str = "labq"
    node: str = ""
    kill_wait: float = 30.0
    spool: str = "/var/spool/labq"
    run_as: str = "submitter"
    allow_root: bool = False
    cgroup_base: str = ""           # where job cgroups go ("" = none: the runner's watchdog)
    limit_cpus: bool = False        # cap each job at its --cpus (cpu.max)
    pids_max: int = 0               # per-job pids.max (0 = no limit)
    idle_gpu_util: float = 5.0      # percent
    idle_gpu_after: float = 1800.0  # seconds under idle_gpu_util before an alert (0 = never)
    stop_grace: float = 300.0       # at most this much checkpoint grace when the node stops
    qos_grace: tuple = ()           # ((qos, seconds), ...): the grace a preemption would give
    slurm_env: bool = True          # SLURM_* aliases in jobs' environment (worker.slurm_env)
    qos_signal: tuple = ()          # ((qos, "USR1"), ...): a QoS's checkpoint signal ([qos.*].signal)
    lease: float = 30.0             # scheduler.node_lease: runners fence their jobs by its expiry
    addr: str = ""                  # worker.addr: where a gang's other nodes reach this one ("": the host's)
    epoch: str = ""                 # the agent incarnation's token, its lease's value ("": not checked)
    agent_pid: int = 0              # the slot runner's parent: gone, the runner claims and starts nothing
    compat_bin: str = ""            # the compat commands' folder, last on jobs' PATH (worker/shimbin.py)
    pbs_env: bool = True            # PBS_* names, PBS_NODEFILE and TMPDIR in jobs (worker.pbs_env; batchenv.py)
    sge_env: bool = True            # SGE's JOB_ID, SGE_TASK_*, NSLOTS and TMPDIR in jobs (worker.sge_env)

    @classmethod
    def from_environ(cls, env=None) -> "Settings":
        env = os.environ if env is None else env
        grace = tuple((q, int(g)) for q, _, g in (x.partition("=") for x in (env.get("LABQ_QOS_GRACE") or "").split(","))
                      if q and g.isdigit())
        return cls(redis_url=env.get("LABQ_REDIS_URL", ""), prefix=env.get("LABQ_PREFIX") or "labq",
                   node=env.get("LABQ_NODE", ""), kill_wait=float(env.get("LABQ_KILL_WAIT") or 30),
                   spool=os.path.expanduser(env.get("LABQ_SPOOL") or "/var/spool/labq"),
                   run_as=env.get("LABQ_RUN_AS") or "submitter", allow_root=env.get("LABQ_ALLOW_ROOT") == "1",
                   cgroup_base=env.get("LABQ_CGROUP_BASE", ""), limit_cpus=env.get("LABQ_LIMIT_CPUS") == "1",
                   pids_max=int(env.get("LABQ_PIDS_MAX") or 0),
                   idle_gpu_util=float(env.get("LABQ_IDLE_GPU_UTIL") or 5),
                   idle_gpu_after=float(env.get("LABQ_IDLE_GPU_AFTER") or 1800),
                   stop_grace=float(env.get("LABQ_STOP_GRACE") or 300), qos_grace=grace,
                   slurm_env=env.get("LABQ_SLURM_ENV", "1") != "0",
                   qos_signal=tuple(tuple(x.split("=", 1)) for x in (env.get("LABQ_QOS_SIGNAL") or "").split(",")
                                    if "=" in x),
                   lease=float(env.get("LABQ_LEASE") or 30), compat_bin=env.get("LABQ_COMPAT_BIN", ""),
                   pbs_env=env.get("LABQ_PBS_ENV", "1") != "0", sge_env=env.get("LABQ_SGE_ENV", "1") != "0")

    @classmethod
    def from_dict(cls, d: dict) -> "Settings":
        """From what the agent hands its runners over a pipe (asdict's JSON)."""
        d = dict(d)
        for k in ("qos_grace", "qos_signal"):
            d[k] = tuple(tuple(x) for x in d.get(k, ()))
        return cls(**d)

    def environ(self) -> dict[str, str]:
        """The inverse of from_environ, for the agent to hand to its workers."""
        return {"LABQ_REDIS_URL": self.redis_url, "LABQ_PREFIX": self.prefix, "LABQ_NODE": self.node,
                "LABQ_KILL_WAIT": str(self.kill_wait), "LABQ_SPOOL": self.spool, "LABQ_RUN_AS": self.run_as,
                "LABQ_ALLOW_ROOT": "1" if self.allow_root else "0", "LABQ_CGROUP_BASE": self.cgroup_base,
                "LABQ_LIMIT_CPUS": "1" if self.limit_cpus else "0", "LABQ_PIDS_MAX": str(self.pids_max),
                "LABQ_IDLE_GPU_UTIL": str(self.idle_gpu_util), "LABQ_IDLE_GPU_AFTER": str(self.idle_gpu_after),
                "LABQ_STOP_GRACE": str(self.stop_grace),
                "LABQ_QOS_GRACE": ",".join(f"{q}={g}" for q, g in self.qos_grace),
                "LABQ_SLURM_ENV": "1" if self.slurm_env else "0",
                "LABQ_QOS_SIGNAL": ",".join(f"{q}={g}" for q, g in self.qos_signal), "LABQ_LEASE": str(self.lease),
                "LABQ_COMPAT_BIN": self.compat_bin, "LABQ_PBS_ENV": "1" if self.pbs_env else "0",
                "LABQ_SGE_ENV": "1" if self.sge_env else "0"}

    def shutdown_grace(self, qos: str) -> float:
        """The checkpoint grace a job gets when the node stops: its QoS's preemption grace, capped
        by worker.stop_grace (systemd's TimeoutStopSec must cover it)."""
        return min(dict(self.qos_grace).get(qos, self.stop_grace), self.stop_grace)

    def checkpoint_signal(self, job: Job) -> str:
        """The signal a preempted job gets first: its own --signal's, else its QoS's, else TERM."""
        if job.warn_signal:
            return job.warn_signal[0]
        return dict(self.qos_signal).get(job.qos, "TERM")


# -- identity ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Identity:
    pw: pwd.struct_passwd
    drop: bool            # we are root and the job runs as someone else: setuid at spawn

    @property
    def groups(self) -> list[int]:
        # The user's own groups, never root's supplementary ones (tech-notes §4.1).
        return os.getgrouplist(self.pw.pw_name, self.pw.pw_gid)


def identity(job: Job, s: Settings) -> Identity:
    me = pwd.getpwuid(os.geteuid())
    if s.run_as == "self":
        return Identity(me, drop=False)
    try:
        pw = pwd.getpwnam(job.user)
    except KeyError:
        raise StartError(f"no user {job.user!r} on node {s.node}") from None
    if pw.pw_uid == 0 and not s.allow_root:
        raise StartError("refusing to run a job as root (set worker.allow_root = true to allow it)")
    if os.geteuid() == 0:
        return Identity(pw, drop=pw.pw_uid != 0)
    if pw.pw_uid == os.geteuid():
        return Identity(pw, drop=False)
    raise StartError(f"cannot run as {job.user}: the node agent runs as {me.pw_name}, not root "
                     f"(set worker.run_as = \"self\" to run every job as {me.pw_name})")


def start_refusal(run_as: str, allow_root: bool, multi_user: bool) -> str | None:
    """Why this worker must not start: as root with worker.run_as = "self" every job runs as root,
    which under munge (several users) hands root to every submitter. Refused unless
    worker.allow_root says so (issue 34: a worker that would run user input as root refuses to
    start rather than degrade)."""
    if run_as == "self" and os.geteuid() == 0 and multi_user and not allow_root:
        return ('worker.run_as = "self" as root would run every user\'s job as root (security.auth = "munge"): '
                'set worker.run_as = "submitter", or worker.allow_root = true to accept it')
    return None


def runs_for(s: Settings) -> str:
    """Whose jobs `identity` lets this agent run, for the scheduler to refuse the others at submit
    (Node.runs): everyone's as root, only its own user's otherwise."""
    if s.run_as == "self":
        return "*"
    if os.geteuid() == 0:
        return "*" if s.allow_root else "!root"
    return pwd.getpwuid(os.geteuid()).pw_name


@contextlib.contextmanager
def acting_as(ident: Identity):
    """Touch the filesystem with the user's rights, so a workdir or log path the user controls
    (symlinks, hard links, other people's directories) cannot make root write where they may not.
    Safe to flip effective ids here: the slot runner opens an attempt's logs before it starts that
    attempt's control watcher (runner.py), so no other thread of its runs meanwhile."""
    if not ident.drop:
        yield
        return
    groups, egid = os.getgroups(), os.getegid()
    os.setgroups(ident.groups)
    os.setegid(ident.pw.pw_gid)
    os.seteuid(ident.pw.pw_uid)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(egid)
        os.setgroups(groups)


# -- files -------------------------------------------------------------------------------------
def _is_null(st: os.stat_result) -> bool:
    """/dev/null (sbatch -o /dev/null: output thrown away), whatever name it was opened by."""
    null = os.stat("/dev/null")
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == null.st_rdev


def _open_log(path: str, umask: int = 0o022) -> int:
    # O_NONBLOCK: a FIFO planted at the path fails with ENXIO instead of hanging the runner.
    flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    mode = 0o666 & ~umask        # the submitter's umask, not the runner's (SLURM's behaviour)
    try:
        try:
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, mode)
            os.fchmod(fd, mode)  # os.open's mode passes through the runner's own umask too
        except FileExistsError:  # a restarted job appends; the file keeps the mode it has
            fd = os.open(path, flags)
    except OSError as e:
        raise StartError(f"cannot open log file {path}: {e.strerror}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) and not _is_null(st):
        os.close(fd)
        raise StartError(f"log path {path} is not a regular file")
    os.set_blocking(fd, True)
    return fd


def open_logs(job: Job, ident: Identity, rank: int = 0, node: str = "") -> tuple[int, int]:
    """(stdout fd, stderr fd), the same fd when there is no separate err pattern. Appends, so a
    restarted job's output follows its earlier attempts'. `rank`, `node`: a gang part's %n and %N."""
    out, err = logpath.out_path(job, rank, node), logpath.err_path(job, rank, node)
    with acting_as(ident):
        try:
            os.close(os.open(job.workdir, os.O_RDONLY | os.O_DIRECTORY))
        except OSError as e:
            raise StartError(f"working directory {job.workdir}: {e.strerror}") from None
        ofd = _open_log(out, job.umask)
        try:
            efd = ofd if err == out else _open_log(err, job.umask)
        except StartError:
            os.close(ofd)
            raise
    return ofd, efd


def append_line(job: Job, ident: Identity, line: str, rank: int = 0, node: str = "") -> str | None:
    """Append `line` to the job's stderr log (its stdout one without -e), opened as the job's user
    as its own output was; the error, or None."""
    try:
        out, err = open_logs(job, ident, rank, node)
    except StartError as e:
        return str(e)
    try:
        os.write(err, (line + "\n").encode())
    except OSError as e:
        return str(e)
    finally:
        os.close(out)
        if err != out:
            os.close(err)
    return None


def checkpoint_dir(s: Settings, job: Job, ident: Identity) -> str:
    """<spool>/checkpoints/<job id>: kept across attempts so a restart resumes; the user owns it,
    its parent is ours, so the user cannot swap it for a link."""
    base = os.path.join(s.spool, "checkpoints")
    d = os.path.join(base, str(job.id))
    try:
        os.mkdir(d, 0o700)
    except FileExistsError:
        pass        # a restart: the job's checkpoints are there
    except FileNotFoundError:      # the first job of this spool
        os.makedirs(base, mode=0o755, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(d, 0o700)
    if ident.drop:
        os.chown(d, ident.pw.pw_uid, ident.pw.pw_gid, follow_symlinks=False)
    return d


def remove_spool(spool: str, jid: int) -> None:
    """An archived job's stored script and checkpoint directory, gone from the spool. The parents
    are ours (the user cannot swap <id> for a link); rmtree does not follow links inside."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(spool, "scripts", f"{int(jid)}.sh"))
    batchenv.remove(spool, jid)
    d = os.path.join(spool, "checkpoints", str(int(jid)))
    with contextlib.suppress(FileNotFoundError):
        if os.path.islink(d):       # never ours to follow: the link goes, what it names stays
            os.unlink(d)
        else:
            shutil.rmtree(d)


def write_script(s: Settings, job: Job, ident: Identity) -> str:
    """The script text captured at submit (like sbatch), readable only by the job's user."""
    d = os.path.join(s.spool, "scripts")
    os.makedirs(d, mode=0o755, exist_ok=True)
    path = os.path.join(d, f"{job.id}.sh")
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, job.script.encode())
        if ident.drop:
            os.fchown(fd, ident.pw.pw_uid, ident.pw.pw_gid)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return path


def command(job: Job, script: str | None) -> list[str]:
    if script:
        return ["/bin/bash", script, *job.argv]
    if job.scripted:      # never its argv alone: that would exec the script's first argument
        raise StartError("the job's script is not in Redis (labq:script:ID): was it archived, or does this "
                         "node's role predate it (`labq admin acl --apply`)?")
    if not job.argv:
        raise StartError("the job has neither a command nor a script")
    return list(job.argv)


# -- environment -------------------------------------------------------------------------------
def environment(job: Job, attempt: Attempt, s: Settings, ident: Identity, start: float, ckpt: str,
                part=None) -> dict:
    """The job's environment (worker/jobenv.py); never the daemon's, which carries its Redis login variables, NOTIFY_SOCKET
    and secrets. `part`: a gang's part here (worker/gang.Part), whose GPUs are this node's."""
    pw = ident.pw
    gpus = tuple(part.gpus) if part is not None else tuple(attempt.gpus)
    files = batchenv.prepare(s.spool, job, pw.pw_uid, pw.pw_gid, s.node, part) if s.pbs_env or s.sge_env else ("", "")
    return jobenv.build(job, jobenv.Place(
        node=s.node, user=pw.pw_name, home=pw.pw_dir, shell=pw.pw_shell, gpus=gpus, start=start,
        checkpoint_dir=ckpt, redis_url=public_url(s.redis_url), prefix=s.prefix, slurm_env=s.slurm_env, part=part,
        compat_bin=s.compat_bin, pbs_env=s.pbs_env, sge_env=s.sge_env, nodefile=files[0], tmpdir=files[1]))


def public_url(url: str) -> str:
    """`url` without its user and password: redis://:secret@host:6379/0 -> redis://host:6379/0
    (also unix:///run/redis.sock?password=secret&db=1 -> unix:///run/redis.sock?db=1)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    netloc, slash, path = rest.partition("/")
    path, q, query = path.partition("?")
    kept = "&".join(x for x in query.split("&") if x and x.split("=", 1)[0] not in ("password", "username"))
    return f"{scheme}://{netloc.rpartition('@')[2]}{slash}{path}" + (f"?{kept}" if q and kept else "")


def newest_mtime(path: str | None) -> float | None:
    """The newest modification time in the checkpoint directory (top level and one level down:
    frameworks write `ckpt-N/` folders), or None when it is empty or unreadable."""
    if not path:
        return None
    newest = None
    try:
        with os.scandir(path) as it:
            for e in it:
                try:
                    t = e.stat(follow_symlinks=False).st_mtime
                    if e.is_dir(follow_symlinks=False):
                        with os.scandir(e.path) as sub:
                            t = max([t] + [x.stat(follow_symlinks=False).st_mtime for x in sub])
                except OSError:
                    continue
                newest = t if newest is None else max(newest, t)
    except OSError:
        return None
    return newest
