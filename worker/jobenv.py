"""The environment a job's process starts with: one pure function, `build`, called by the runner.

Layers, each over the one before (later wins):
  1. a clean base: PATH, HOME, USER, LOGNAME, SHELL, LANG for the job's user;
  2. what the submitter exported (`sub --export`, default ALL: their whole environment at submit,
     captured by the client and stored with the job). With ALL the submitter's variables replace
     the base, so their venv's PATH reaches the job; inherited `SLURM_*` and job-scoped `LABQ_*`
     variables are dropped, because they describe the submitter's own job, not this one;
  3. labq's own `LABQ_*` variables;
  4. SLURM's names for the same facts (`SLURM_JOB_ID` …) unless `worker.slurm_env = false`.
     Never `SLURM_NTASKS`: PyTorch Lightning takes it to mean "launched by srun" and then expects
     srun's process layout (anchors-slurm-kueue.md §2.5). A gang's part (one task per node) gets
     `SLURM_PROCID` = its node rank, as srun's one task per node would;
  3b. a gang's (`sub -N`): what torchrun needs (MASTER_ADDR, MASTER_PORT, NODE_RANK, WORLD_SIZE,
     LOCAL_WORLD_SIZE) and where the job runs (LABQ_NODELIST, LABQ_NODEID, LABQ_NUM_NODES);
  5. `CUDA_VISIBLE_DEVICES` = the allocated GPUs, always (an empty value for a CPU job, so an
     exported `CUDA_VISIBLE_DEVICES=0` cannot reach a GPU another job holds);
  5b. PBS's and SGE's names (PBS_JOBID, PBS_O_WORKDIR, PBS_NODEFILE, SGE_TASK_ID, NSLOTS, TMPDIR…;
     worker/batchenv.py) unless `worker.pbs_env` / `worker.sge_env` = false;
  6. the compat commands (`srun`, `sbatch`, `squeue`… as labq speaks them; worker/shimbin.py) last
     on PATH, unless `worker.compat_commands = false`.

Nothing here reads `os.environ`: the daemon's environment (Redis login variables, NOTIFY_SOCKET)
never reaches a job.
"""
from dataclasses import dataclass

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
# Inherited LABQ_* names kept on --export=ALL: the client's own settings, which a job that submits
# further jobs wants too. Every other LABQ_* name is per job and is set (or deliberately absent) below.
_KEEP_LABQ = ("LABQ_CONFIG", "LABQ_NO_SYSTEM_CONFIG", "LABQ_SUB_")
ARRAY_STEP = "LABQ_SUB_ARRAY_STEP"      # an array's step, sent with the job's variables (cli/subcore.py)
# SGE's per-job names (PBS's all start PBS_): the submitting job's, never the new one's.
_BATCH_JOB_VARS = frozenset({"JOB_ID", "JOB_NAME", "NSLOTS", "NHOSTS", "SGE_O_WORKDIR", "RESTARTED"})


@dataclass(frozen=True)
class Place:
    """Where and as whom the attempt runs: what the runner knows and the job record does not."""
    node: str
    user: str
    home: str
    shell: str
    gpus: tuple[str, ...]      # the attempt's GPU UUIDs (CUDA_VISIBLE_DEVICES tokens)
    start: float               # epoch seconds
    checkpoint_dir: str
    redis_url: str = ""        # without a password (launch.public_url)
    prefix: str = "labq"
    slurm_env: bool = True
    part: object = None        # a gang's part here (worker/gang.Part), after the rendezvous
    compat_bin: str = ""       # sbatch/srun/qsub… as labq speaks them (worker/shimbin.py), last on PATH
    pbs_env: bool = False      # PBS's and SGE's names (worker/batchenv.py), each unless turned off
    sge_env: bool = False
    nodefile: str = ""         # PBS_NODEFILE: one line per slot (batchenv.prepare)
    tmpdir: str = ""           # the job's own TMPDIR, as PBS and SGE give one


def inherited(env: dict) -> dict:
    """The submitter's exported variables minus those that describe the submitter's own job."""
    return {k: v for k, v in env.items()
            if not k.startswith(("SLURM_", "PBS_", "SGE_TASK_")) and k not in _BATCH_JOB_VARS
            and (not k.startswith("LABQ_") or k.startswith(_KEEP_LABQ))}


def build(job, where: Place) -> dict[str, str]:
    """The job's whole environment (see the module docstring for the layers)."""
    exported = dict(job.env)
    env = {"PATH": DEFAULT_PATH, "LANG": "C.UTF-8"}
    if job.export == "ALL":
        env.update(inherited(exported))
    else:                      # NONE or a list: the named variables, given or captured at submit
        env.update(exported)
    env.pop(ARRAY_STEP, None)      # the client's note for batchenv (SGE_TASK_STEPSIZE), not the job's
    env.update(HOME=where.home, USER=where.user, LOGNAME=where.user, SHELL=where.shell or "/bin/sh",
               PWD=job.workdir)
    env.setdefault("OMP_NUM_THREADS", str(max(1, job.cpus)))
    env.update(labq_vars(job, where))
    gang = gang_vars(where.part) if where.part is not None and len(where.part.nodes) > 1 else {}
    env.update({k: v for k, v in gang.items() if not k.startswith("SLURM_")})
    if where.slurm_env:
        env.update(slurm_vars(job, where))
        env.update({k: v for k, v in gang.items() if k.startswith("SLURM_")})
    if where.pbs_env or where.sge_env:
        from .batchenv import vars as batch_vars
        env.update(batch_vars(job, where.user, where.home, where.node, where.part, where.nodefile, where.tmpdir,
                              where.pbs_env, where.sge_env))
    env.update(CUDA_VISIBLE_DEVICES=",".join(where.gpus), CUDA_DEVICE_ORDER="PCI_BUS_ID")
    if where.compat_bin:
        env["PATH"] = with_last(env.get("PATH", DEFAULT_PATH), where.compat_bin)
    return env


def with_last(path: str, folder: str) -> str:
    """`folder` last on `path`, once (a job submitted from a job inherits the entry already): the
    submitter's own PATH keeps its order, and a real SLURM they use still comes first."""
    return ":".join([*(d for d in path.split(":") if d and d != folder), folder])


def labq_vars(job, where: Place) -> dict[str, str]:
    out = {
        "LABQ_JOB_ID": str(job.id), "LABQ_JOB_NAME": job.name, "LABQ_RESTART_COUNT": str(job.restart_count),
        "LABQ_ACCOUNT": job.account, "LABQ_QOS": job.qos, "LABQ_NODE": where.node, "LABQ_CPUS": str(job.cpus),
        "LABQ_MEM_BYTES": str(job.mem), "LABQ_GPUS": str(len(where.gpus)), "LABQ_JOB_GPUS": ",".join(where.gpus),
        "LABQ_JOB_START_TIME": str(int(where.start)), "LABQ_CHECKPOINT_DIR": where.checkpoint_dir,
        "LABQ_SUBMIT_DIR": job.workdir,
        # so `labq checkpoint` inside the job can reach Redis: where, never the agent's password
        # (Redis write access is root on every node)
        "LABQ_REDIS_URL": where.redis_url, "LABQ_PREFIX": where.prefix,
    }
    if job.time_limit > 0:
        out["LABQ_JOB_END_TIME"] = str(int(where.start + job.time_limit))
    if job.array_id is not None:
        # Like SLURM, set only for array tasks: `os.environ.get("LABQ_ARRAY_TASK_ID", "0")` keeps working.
        out.update(LABQ_ARRAY_JOB_ID=str(job.array_id), LABQ_ARRAY_TASK_ID=str(job.array_index),
                   LABQ_ARRAY_TASK_COUNT=str(job.array_count if job.array_count is not None else ""))
    return out


def gang_vars(part) -> dict[str, str]:
    """A gang's part: its rank among the job's nodes and the rendezvous. One process per node starts
    the command: LOCAL_WORLD_SIZE is the GPUs per node (at least 1), what `torchrun
    --nproc-per-node` would start, and WORLD_SIZE that times the nodes."""
    from labq.scheduler.jobs.hostlist import compact
    local = max(1, len(part.gpus))
    n, rank, names = len(part.nodes), str(part.rank), compact(part.nodes)
    return {"LABQ_NODELIST": ",".join(part.nodes), "LABQ_NODEID": rank, "LABQ_NUM_NODES": str(n),
            "MASTER_ADDR": part.master_addr, "MASTER_PORT": str(part.master_port), "NODE_RANK": rank,
            "WORLD_SIZE": str(n * local), "LOCAL_WORLD_SIZE": str(local),
            "SLURM_NODELIST": names, "SLURM_JOB_NODELIST": names, "SLURM_NNODES": str(n),
            "SLURM_JOB_NUM_NODES": str(n), "SLURM_NODEID": rank, "SLURM_PROCID": rank}


def slurm_vars(job, where: Place) -> dict[str, str]:
    """sbatch's OUTPUT ENVIRONMENT VARIABLES that labq can answer truthfully (one node, one task)."""
    out = {
        "SLURM_JOB_ID": str(job.id), "SLURM_JOBID": str(job.id), "SLURM_JOB_NAME": job.name,
        "SLURM_JOB_ACCOUNT": job.account, "SLURM_JOB_QOS": job.qos, "SLURM_JOB_USER": where.user,
        "SLURM_SUBMIT_DIR": job.workdir, "SLURM_CPUS_PER_TASK": str(job.cpus), "SLURM_CPUS_ON_NODE": str(job.cpus),
        "SLURM_JOB_NUM_NODES": "1", "SLURM_NNODES": "1", "SLURM_JOB_NODELIST": where.node,
        "SLURM_NODELIST": where.node, "SLURMD_NODENAME": where.node, "SLURM_RESTART_COUNT": str(job.restart_count),
        "SLURM_JOB_START_TIME": str(int(where.start)), "SLURM_GPUS_ON_NODE": str(len(where.gpus)),
    }
    if job.mem:
        out["SLURM_MEM_PER_NODE"] = str(max(1, job.mem >> 20))      # MB, as SLURM writes it
    if job.time_limit > 0:
        out["SLURM_JOB_END_TIME"] = str(int(where.start + job.time_limit))
    if job.array_id is not None:
        out.update(SLURM_ARRAY_JOB_ID=str(job.array_id), SLURM_ARRAY_TASK_ID=str(job.array_index))
        if job.array_count is not None:
            out["SLURM_ARRAY_TASK_COUNT"] = str(job.array_count)
    return out
