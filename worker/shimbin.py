"""The folder of compat commands (`sbatch`, `srun`, `qsub`… as labq speaks them: shim.py, srun.py,
pbsshim.py): small /bin/sh wrappers that start labq's own interpreter on `labq.cli.shim`.

The worker writes one folder at start (`<spool>/bin`, world-readable) and puts it last on every
job's PATH (worker/jobenv.py); `make install-slurm-compat` / `make install-pbs-compat` write the same
wrappers into a BINDIR for users of a machine without SLURM, PBS or SGE. A family whose real
commands are installed is left out either way: labq never hides a real SLURM, PBS or SGE.

A wrapper names its interpreter by absolute path and runs it isolated (-I): a job's PYTHONPATH, its
conda python or its venv cannot change which labq answers.
"""
import os
import shutil
import sys

MARK = "labq-compat"
FAMILIES = {
    "slurm": ("sbatch", "squeue", "scancel", "sacct", "srun"),
    "pbs": ("qsub", "qstat", "qdel", "qhold", "qrls"),
    "sge": ("qacct",),
    "modules": ("module",),
}
# The command whose presence means the real system is installed.
REAL = {"slurm": "sbatch", "pbs": "qsub", "sge": "qacct", "modules": "modulecmd"}


def ours(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return MARK.encode() in f.read(512)
    except OSError:
        return False


def real_install(family: str, path: str) -> str | None:
    """Where `family`'s real command is on `path` (a PATH string), or None."""
    for d in path.split(os.pathsep):
        found = shutil.which(REAL[family], path=d) if d else None
        if found and not ours(found):
            return found
    if family == "modules" and (os.path.isdir("/usr/share/lmod") or os.path.isfile("/etc/profile.d/modules.sh")):
        return "/usr/share/lmod"
    return None


def wrapper(name: str, python: str, root: str) -> str:
    code = f"import sys; sys.path[:0] = [{root!r}]; from labq.cli.shim import main; main()"
    return (f"#!/bin/sh\n# {MARK}: {name} as labq speaks it (labq/cli/shim.py); `make install-slurm-compat`\n"
            f"exec '{python}' -I -c \"{code}\" {name} \"$@\"\n")


def write(folder: str, families=tuple(FAMILIES), path: str | None = None, python: str | None = None) -> list[str]:
    """Write the wrappers of `families` into `folder` (0755), leaving out a family whose real
    commands are on `path`; the commands written."""
    import labq
    python = python or sys.executable
    root = os.path.dirname(os.path.dirname(os.path.abspath(labq.__file__)))
    path = os.environ.get("PATH", "") if path is None else path
    os.makedirs(folder, mode=0o755, exist_ok=True)
    os.chmod(folder, 0o755)
    done = []
    for fam in families:
        if real_install(fam, path):
            continue
        for name in FAMILIES[fam]:
            target = os.path.join(folder, name)
            tmp = f"{target}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                f.write(wrapper(name, python, root))
            os.chmod(tmp, 0o755)
            os.replace(tmp, target)
            done.append(name)
    return done


def folder(spool: str, families=("slurm", "pbs", "sge", "modules")) -> str:
    """The worker's folder (`<spool>/bin`), written afresh at each start: what jobs get last on PATH.
    A family whose real commands the node has (on the agent's PATH or the jobs' default) is left out."""
    from .jobenv import DEFAULT_PATH
    d = os.path.join(spool, "bin")
    write(d, families, path=f"{os.environ.get('PATH', '')}:{DEFAULT_PATH}")
    return d


def for_jobs(spool: str, worker) -> str:
    """The folder for jobs' PATH, "" with worker.compat_commands = false."""
    return folder(spool) if worker["compat_commands"] else ""


def install(bindir: str, families: list[str], python: str | None = None) -> int:
    """`make install-*-compat`: refuse a family whose real commands are installed, then write."""
    path = os.environ.get("PATH", "")
    for fam in families:
        if fam not in FAMILIES:
            print(f"labq: unknown compat family {fam!r} (known: {', '.join(FAMILIES)})", file=sys.stderr)
            return 2
        real = real_install(fam, path)
        existing = os.path.join(bindir, REAL[fam])
        if real or (os.path.exists(existing) and not ours(existing)):
            print(f"labq: refusing to install {fam} commands: a real {REAL[fam]} is installed at "
                  f"{real or existing} (labq never hides it; use `labq sub` there)", file=sys.stderr)
            return 3
    done = write(bindir, families, path="", python=python)
    print(f"installed in {bindir}: {' '.join(done)}")
    return 0


if __name__ == "__main__":
    args = sys.argv[1:]
    py = None
    if args[:1] == ["--python"] and len(args) > 1:
        py, args = os.path.abspath(args[1]), args[2:]
    if len(args) < 2:
        print("usage: python -m labq.worker.shimbin [--python PY] BINDIR FAMILY…", file=sys.stderr)
        sys.exit(2)
    sys.exit(install(args[0], args[1:], py))
