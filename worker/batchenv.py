"""PBS's and Grid Engine's names for a job's facts, for scripts that come from those systems
(`cd $PBS_O_WORKDIR`, `$PBS_ARRAYID`, `mpirun -machinefile $PBS_NODEFILE`, `$SGE_TASK_ID`, `$NSLOTS`),
set as Torque/PBS Pro and SGE set them, each family unless `worker.pbs_env` / `worker.sge_env` is false.

`vars` is pure (worker/jobenv.py layers it); `prepare` makes the two files they name: the node file
(one line per slot, as Torque writes it) in `<spool>/aux/<job>` and the job's own TMPDIR, both the
user's; `end` drops TMPDIR when the attempt ends (as pbs_mom and sge_execd do), `remove` the node
file with the job's other spool files. TMPDIR is `<spool>/tmp/<job>`, not under /tmp: a folder in a
world-writable directory would let another user choose where root creates and chowns it; point
worker.spool at a disk with room for the jobs' temporary files.
"""
import os
import shutil

SERVER = "labq"      # the "server" part of a PBS job id (1234.labq), as cli/pbsshim.py prints it


def nodes_of(job, node: str, part) -> list[str]:
    return list(part.nodes) if part is not None and len(part.nodes) > 1 else [node]


def vars(job, user: str, home: str, node: str, part, nodefile: str, tmpdir: str, pbs: bool, sge: bool) -> dict:
    out: dict[str, str] = {}
    nodes = nodes_of(job, node, part)
    rank = str(part.rank) if part is not None and len(part.nodes) > 1 else "0"
    if tmpdir and (pbs or sge):
        out["TMPDIR"] = tmpdir
    if pbs:
        out.update(pbs_vars(job, user, home, nodes, rank, nodefile))
    if sge:
        out.update(sge_vars(job, user, home, nodes))
    return out


def pbs_vars(job, user: str, home: str, nodes: list[str], rank: str, nodefile: str) -> dict:
    jid = (f"{job.array_id}[{job.array_index}].{SERVER}" if job.array_id is not None else f"{job.id}.{SERVER}")
    out = {"PBS_JOBID": jid, "PBS_JOBNAME": job.name, "PBS_O_WORKDIR": job.workdir, "PBS_O_HOME": home,
           "PBS_O_LOGNAME": user, "PBS_O_QUEUE": job.qos, "PBS_QUEUE": job.qos, "PBS_ENVIRONMENT": "PBS_BATCH",
           "PBS_SERVER": SERVER, "PBS_NUM_PPN": str(job.cpus), "PBS_NUM_NODES": str(len(nodes)),
           "PBS_NP": str(job.cpus * len(nodes)), "PBS_NODENUM": rank, "PBS_TASKNUM": "1", "NCPUS": str(job.cpus)}
    if nodefile:
        out["PBS_NODEFILE"] = nodefile
    if job.array_id is not None:
        out.update(PBS_ARRAYID=str(job.array_index), PBS_ARRAY_INDEX=str(job.array_index),
                   PBS_ARRAY_ID=f"{job.array_id}[].{SERVER}")
    return out


def sge_vars(job, user: str, home: str, nodes: list[str]) -> dict:
    out = {"JOB_ID": str(job.array_id if job.array_id is not None else job.id), "JOB_NAME": job.name,
           "SGE_O_WORKDIR": job.workdir, "SGE_O_HOME": home, "SGE_O_LOGNAME": user, "QUEUE": job.qos,
           "NSLOTS": str(job.cpus * len(nodes)), "NHOSTS": str(len(nodes)), "ENVIRONMENT": "BATCH",
           "RESTARTED": "1" if job.restart_count else "0", "SGE_TASK_ID": "undefined",
           "SGE_TASK_FIRST": "undefined", "SGE_TASK_LAST": "undefined", "SGE_TASK_STEPSIZE": "undefined"}
    if job.array_id is not None:
        first, last, step = task_range(job)
        out.update(SGE_TASK_ID=str(job.array_index), SGE_TASK_FIRST=str(first), SGE_TASK_LAST=str(last),
                   SGE_TASK_STEPSIZE=str(step))
    return out


STEP_VAR = "LABQ_SUB_ARRAY_STEP"      # the array's step, sent by the client with the job's variables (jobenv.ARRAY_STEP)


def task_range(job) -> tuple[int, int, int]:
    """(first, last, step) of the task's array: tasks are consecutive ids over lo, lo+step, …, hi."""
    try:
        step = max(1, int(dict(job.env).get(STEP_VAR, "1")))
    except ValueError:
        step = 1
    k = job.id - job.array_id
    first = job.array_index - k * step
    return first, first + ((job.array_count or 1) - 1) * step, step


# -- the files (I/O: the runner's, before the job starts) -----------------------------------------
def prepare(spool: str, job, uid: int, gid: int, node: str, part) -> tuple[str, str]:
    """(node file, TMPDIR) for the attempt, made afresh and owned by the job's user."""
    aux, tmp = os.path.join(spool, "aux"), os.path.join(spool, "tmp")
    for d in (aux, tmp):
        os.makedirs(d, mode=0o755, exist_ok=True)
    nodefile = os.path.join(aux, str(int(job.id)))
    tmpfile = f"{nodefile}.{os.getpid()}.tmp"
    fd = os.open(tmpfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    try:
        os.write(fd, "".join(f"{n}\n" * max(1, job.cpus) for n in nodes_of(job, node, part)).encode())
        if os.geteuid() == 0:
            os.fchown(fd, uid, gid)
    finally:
        os.close(fd)
    os.replace(tmpfile, nodefile)
    tmpdir = os.path.join(tmp, str(int(job.id)))
    os.makedirs(tmpdir, mode=0o700, exist_ok=True)
    if os.geteuid() == 0:
        os.chown(tmpdir, uid, gid)
    return nodefile, tmpdir


def end(spool: str, jid: int) -> None:
    """The attempt ended (the runner's last step): its TMPDIR goes, as pbs_mom and sge_execd remove it."""
    shutil.rmtree(os.path.join(spool, "tmp", str(int(jid))), ignore_errors=True)


def remove(spool: str, jid: int) -> None:
    """With the job's other spool files (launch.remove_spool): its node file and TMPDIR."""
    try:
        os.unlink(os.path.join(spool, "aux", str(int(jid))))
    except FileNotFoundError:
        pass
    shutil.rmtree(os.path.join(spool, "tmp", str(int(jid))), ignore_errors=True)
