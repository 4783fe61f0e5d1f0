"""`srun` inside a labq job: the command runs here, as this node's one task.

labq starts one task per node (a gang's script runs on each of its nodes; torchrun or the framework
starts the per-GPU ranks), so srun's job is to run its command with the step's variables: `srun
python train.py`, `srun -n1 …`, `srun --ntasks=$SLURM_NNODES --ntasks-per-node=1 torchrun …`.
It takes -n/--ntasks (1, or one per node), --ntasks-per-node=1, -N (the job's nodes),
-c/--cpus-per-task (up to the job's CPUs), -l/--label, --export, -u/--unbuffered, and drops the
placement options that have nothing to place within one task (--mpi, --cpu-bind, --gres inside the
allocation…). What it cannot do (several tasks per node, a pty, srun outside a job) is one line
naming what to write instead, exit 2.

Never sets SLURM_NTASKS: PyTorch Lightning reads it as "srun started my ranks" and then waits for
ranks nobody starts (worker/jobenv.py says the same for the job itself).
"""
import os
import signal
import subprocess
import sys
import threading

# Options taken and dropped: within one task on the job's own allocation they place nothing.
_DROP_VALUE = {"mpi", "cpu-bind", "cpu_bind", "gpu-bind", "mem-bind", "distribution", "m", "partition", "p",
               "time", "t", "mem", "mem-per-cpu", "mem-per-gpu", "gres", "gpus", "G", "gpus-per-node",
               "gpus-per-task", "job-name", "J", "account", "A", "qos", "q", "cpus-per-gpu", "kill-on-bad-exit",
               "wait", "W", "network", "hint", "threads-per-core", "constraint", "C", "nodelist", "w",
               "gpu-freq", "slurmd-debug", "comment", "propagate"}
_DROP_FLAG = {"K", "kill-on-bad-exit", "exclusive", "overlap", "exact", "quiet", "Q", "verbose", "v",
              "multi-prog-never", "no-kill", "k", "overcommit", "O", "whole", "propagate"}
_REFUSE = {"pty": "an interactive srun (--pty) has no terminal in a batch job: run the command in the script",
           "x11": "labq jobs have no display", "multi-prog": "--multi-prog: run the programs from the script",
           "output": "-o/--output in srun: redirect in the script (cmd > file)",
           "o": "-o/--output in srun: redirect in the script (cmd > file)",
           "error": "-e/--error in srun: redirect in the script (cmd 2> file)",
           "e": "-e/--error in srun: redirect in the script (cmd 2> file)",
           "input": "--input in srun: redirect in the script (cmd < file)",
           "dependency": "job dependencies belong to sbatch (sbatch -d afterok:ID)",
           "jobid": "--jobid: srun runs inside its own job only", "het-group": "labq has no heterogeneous jobs"}
_VALUE = {"n": "ntasks", "ntasks": "ntasks", "N": "nodes", "nodes": "nodes", "c": "cpus", "cpus-per-task": "cpus",
          "ntasks-per-node": "per_node", "export": "export", "tasks-per-node": "per_node", "chdir": "chdir",
          "D": "chdir"}
_FLAG = {"l": "label", "label": "label", "u": "unbuffered", "unbuffered": "unbuffered"}


class Refused(Exception):
    pass


def parse(argv: list[str]) -> tuple[dict, list[str]]:
    """({option: value}, the command) from srun's argv; Refused names what it cannot do."""
    opts: dict = {}
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok == "--":
            return opts, argv[i + 1:]
        if not tok.startswith("-") or tok == "-":
            return opts, argv[i:]
        i += 1
        if tok.startswith("--"):
            name, eq, value = tok[2:].partition("=")
            glued = eq
        else:
            name, value = tok[1], tok[2:].lstrip("=")
            glued = value
            if name in _FLAG and value:       # -lu: several short flags
                for ch in tok[1:]:
                    if ch not in _FLAG:
                        raise Refused(f"srun: labq's srun does not take -{ch} (in {tok})")
                    opts[_FLAG[ch]] = True
                continue
        if name in _REFUSE:
            raise Refused(f"srun: {_REFUSE[name]}")
        if name in _FLAG:
            opts[_FLAG[name]] = True
        elif name in _DROP_FLAG and not glued and name not in _DROP_VALUE:
            continue
        elif name in _VALUE or name in _DROP_VALUE:
            if not glued:
                if i >= len(argv):
                    raise Refused(f"srun: {tok} needs a value")
                value, i = argv[i], i + 1
            if name in _VALUE:
                opts[_VALUE[name]] = value
        else:
            raise Refused(f"srun: labq's srun does not take {tok.partition('=')[0]} (it takes -n, -N, "
                          f"-c, --ntasks-per-node=1, -l, -u, --export; one task per node)")
    return opts, []


def _count(opts, key, what) -> int | None:
    if key not in opts:
        return None
    v = str(opts[key])
    if not v.isdigit() or int(v) < 1:
        raise Refused(f"srun: {what}: expected a positive number, got {v!r}")
    return int(v)


def plan(opts: dict, env: dict) -> bool:
    """Whether this node runs the command (False: `-n 1` of a gang, on a node other than rank 0);
    Refused when the request asks for more than one task per node or more than the job has."""
    nodes = int(env.get("LABQ_NUM_NODES") or env.get("SLURM_NNODES") or 1)
    ntasks, n, per = (_count(opts, "ntasks", "--ntasks"), _count(opts, "nodes", "--nodes"),
                      _count(opts, "per_node", "--ntasks-per-node"))
    if per is not None and per != 1:
        raise Refused(f"srun: --ntasks-per-node={per}: labq runs one task per node (start the per-GPU ranks "
                      f"with torchrun --nproc-per-node={per})")
    if n is not None and n != nodes:
        raise Refused(f"srun: -N {n}: this job has {nodes} node{'s' * (nodes > 1)} (sbatch -N {n} for more)")
    if ntasks is not None and ntasks not in (1, nodes):
        raise Refused(f"srun: -n {ntasks}: labq runs one task per node ({nodes} here); start several "
                      f"processes with torchrun --nproc-per-node or a loop with &")
    cpus = _count(opts, "cpus", "--cpus-per-task")
    have = int(env.get("LABQ_CPUS") or env.get("SLURM_CPUS_PER_TASK") or 0)
    if cpus is not None and have and cpus > have:
        raise Refused(f"srun: --cpus-per-task={cpus}: the job has {have} CPUs (sbatch -c {cpus} for more)")
    rank = env.get("LABQ_NODEID") or env.get("SLURM_NODEID") or "0"
    return not (ntasks == 1 and nodes > 1 and rank != "0")


def environment(opts: dict, env: dict) -> dict:
    """The task's environment: --export's choice, then the step's SLURM variables."""
    spec = str(opts.get("export", "ALL"))
    items = [x for x in spec.split(",") if x]
    head = items[0].upper() if items else "ALL"
    if head == "ALL":
        out, items = dict(env), items[1:]
    else:
        out = {k: v for k, v in env.items() if k.startswith(("SLURM_", "LABQ_")) or k in (
            "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")}
        items = items[1:] if head == "NONE" else items
    for item in items:
        k, eq, v = item.partition("=")
        if eq:
            out[k] = v
        elif k in env:
            out[k] = env[k]
    rank = env.get("SLURM_NODEID") or env.get("LABQ_NODEID") or "0"
    out.update(SLURM_STEP_ID="0", SLURM_STEPID="0", SLURM_LOCALID="0", SLURM_PROCID=rank, SLURM_NODEID=rank)
    if "cpus" in opts:
        out["SLURM_CPUS_PER_TASK"] = str(opts["cpus"])
    if opts.get("unbuffered"):
        out["PYTHONUNBUFFERED"] = "1"
    return out


def main(argv: list[str]) -> int:
    env = dict(os.environ)
    try:
        if not env.get("LABQ_JOB_ID"):
            raise Refused("srun: not inside a labq job: submit the command with `sbatch --wrap 'CMD'` "
                          "or `labq sub -W -- CMD`")
        opts, cmd = parse(argv)
        if not cmd:
            raise Refused("srun: no command given (srun [OPTIONS] COMMAND [ARGS…])")
        here = plan(opts, env)
    except Refused as e:
        sys.stderr.write(f"{e}\n")
        return 2
    if not here:
        return 0
    task_env = environment(opts, env)
    if "chdir" in opts:
        os.chdir(opts["chdir"])
    if not opts.get("label"):
        try:
            os.execvpe(cmd[0], cmd, task_env)
        except OSError as e:
            sys.stderr.write(f"srun: error: execve(): {cmd[0]}: {e.strerror}\n")
            return 2
    return labelled(cmd, task_env, task_env["SLURM_PROCID"])


def labelled(cmd: list[str], env: dict, rank: str) -> int:
    """`-l`: every line of the task's output prefixed with its rank ("0: "), signals passed on."""
    try:
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as e:
        sys.stderr.write(f"srun: error: execve(): {cmd[0]}: {e.strerror}\n")
        return 2
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(s, lambda num, _f: p.send_signal(num))
    prefix = f"{rank}: ".encode()

    def pump(src, dst):
        for line in iter(src.readline, b""):
            dst.write(prefix + line)
            dst.flush()
    threads = [threading.Thread(target=pump, args=(p.stdout, sys.stdout.buffer)),
               threading.Thread(target=pump, args=(p.stderr, sys.stderr.buffer))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    code = p.wait()
    return code if code >= 0 else 128 - code
