"""SLURM's commands as labq speaks them: `sbatch`, `squeue`, `scancel`, `sacct` and `srun` (and a
`module` that says it is not there), for the scripts and habits a lab brings from SLURM.

Each command translates its argv to labq's own (`sub`, `stat`, `del`, `acct`) and runs labq's CLI in
this process (`call`, cli/compat.py): one implementation of submitting, listing and cancelling, whatever the
spelling. What only SLURM's output has (sbatch's "Submitted batch job N") is printed here from what
labq answered. `srun` runs its command here, in the job, as the one task of this node (labq starts
one task per node; torchrun or the framework starts the per-GPU ranks). Anything a command cannot
do is refused with one line saying what to write instead (exit 2).

The worker puts these on the PATH of every job (shimbin.py writes the wrappers); `make
install-slurm-compat` puts them on a machine's PATH where no real SLURM is.
"""
import os
import sys

from labq.scheduler.errors import LabqError

from . import sbatch as sbatch_dirs
from .compat import call, refuse, script_text

NAMES = ("sbatch", "squeue", "scancel", "sacct", "srun")


# -- sbatch ------------------------------------------------------------------------------------
# sbatch's own options (not job options): they change what sbatch does or prints.
_SBATCH_OWN = {"--parsable": "parsable", "-W": "wait", "--wait": "wait", "--test-only": "test_only"}
_NO_VALUE = {"hold", "requeue", "no-requeue", "exclusive", "no-kill", "overcommit", "contiguous", "parsable",
             "wait", "test-only", "kill-on-invalid-dep", "ignore-pbs", "quiet", "verbose", "spread-job",
             "use-min-nodes", "get-user-env", "oversubscribe"}
_SHORT_NO_VALUE = set("HWQvhVsO")


def split_options(argv: list[str]) -> tuple[list[str], list[str]]:
    """(option tokens, [script, its args…]) the way sbatch reads its command line: options until the
    first word that is not an option or an option's value."""
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok == "--":
            return argv[:i], argv[i + 1:]
        if not tok.startswith("-") or tok == "-":
            return argv[:i], argv[i:]
        i += 1
        if tok.startswith("--"):
            name = tok[2:].partition("=")[0]
            if "=" not in tok and name not in _NO_VALUE and i < len(argv):
                i += 1
        elif len(tok) == 2 and tok[1] not in _SHORT_NO_VALUE and i < len(argv):
            i += 1
    return argv, []


def sbatch(argv: list[str]) -> int:
    if any(a in ("-h", "--help", "--usage") for a in argv):
        print("Usage: sbatch [OPTIONS(0)...] [ : [OPTIONS(N)...]] script(0) [args(0)...]\n"
              "labq's sbatch: the options of `labq sub --help` in SLURM's spellings; --parsable, -W, "
              "--test-only, --wrap")
        return 0
    if "--version" in argv or "-V" in argv:
        print("slurm 23.02 (labq compat)")
        return 0
    opts, rest = split_options(argv)
    own, job_opts, wrap = set(), [], None
    i = 0
    while i < len(opts):
        tok = opts[i]
        if tok in _SBATCH_OWN:
            own.add(_SBATCH_OWN[tok])
        elif tok.startswith("--wrap"):
            wrap = tok.partition("=")[2] if "=" in tok else opts[i + 1]
            i += 0 if "=" in tok else 1
        else:
            job_opts.append(tok)
        i += 1
    flags, ignored = sbatch_dirs.translate(job_opts)
    if ignored:
        sys.stderr.write(f"sbatch: warning: options labq ignores: {' '.join(ignored)}\n")
    if wrap is not None:
        if rest:
            refuse("sbatch", "give either --wrap or a script, not both")
        rest = ["--", "/bin/sh", "-c", wrap]
        flags = ([] if "--name" in flags else ["--name", "wrap"]) + flags
    flags = default_output(flags, rest) + flags
    if "test_only" in own:
        return call(["sub", *flags, "--test-only", *rest])[0]
    rc, out = call(["sub", *flags, "--parsable", *rest], capture=True)
    if rc != 0:
        return rc
    jid = out.strip()
    print(jid if "parsable" in own else f"Submitted batch job {jid}", flush=True)
    if "wait" in own:
        return call(["wait", jid])[0]
    return 0


def default_output(flags: list[str], rest: list[str]) -> list[str]:
    """SLURM's default log names (slurm-%j.out, an array's slurm-%A_%a.out) where neither the
    command line nor the script's directives name one: labq's own default is labq-%j.out."""
    script = []
    text = script_text(rest)
    if text is not None:
        try:
            from .subcore import directives as labq_directives
            script = labq_directives(text) or sbatch_dirs.translate(sbatch_dirs.directives(text))[0]
        except (ValueError, LabqError):
            return []      # labq sub says what is wrong with the script
    given = set(flags) | set(script)
    if given & {"-o", "--output"}:
        return []
    return ["--output", "slurm-%A_%a.out" if given & {"-a", "--array"} else "slurm-%j.out"]


# -- squeue, scancel, sacct --------------------------------------------------------------------
SQUEUE_FORMAT = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"
SQUEUE_LONG = "%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R"
# squeue option -> labq stat's; None: taken and dropped (one partition, one cluster)
_SQUEUE = {"-u": "-u", "--user": "-u", "-j": "-j", "--jobs": "-j", "-t": "-t", "--states": "-t", "--state": "-t",
           "-A": "-A", "--account": "-A", "-o": "-o", "--format": "-o", "-p": None, "--partition": None,
           "-M": None, "--clusters": None, "-q": None, "--qos": None}
_SQUEUE_FLAGS = {"-h": "--noheader", "--noheader": "--noheader", "--me": "--me", "-r": "-r", "--array": "-r",
                 "-a": None, "--all": None, "-l": "long", "--long": "long"}


def squeue(argv: list[str]) -> int:
    out, fmt, i = [], None, 0
    while i < len(argv):
        name, eq, value = argv[i].partition("=") if argv[i].startswith("--") else (argv[i], "", "")
        if len(name) > 2 and not name.startswith("--"):         # -uali, -tR: squeue's glued short options
            name, value, eq = name[:2], name[2:], "="
        i += 1
        if name in _SQUEUE_FLAGS:
            flag = _SQUEUE_FLAGS[name]
            fmt = SQUEUE_LONG if flag == "long" and fmt is None else fmt
            out += [flag] if flag and flag != "long" else []
            continue
        if name not in _SQUEUE:
            refuse("squeue", f"labq's squeue does not take {name} (it takes -u -j -t -A -o -h -l -r --me; "
                             f"`labq stat --help` has the rest)")
        if not eq:
            if i >= len(argv):
                refuse("squeue", f"{name} needs a value")
            value, i = argv[i], i + 1
        if _SQUEUE[name] == "-o":
            fmt = value
        elif _SQUEUE[name]:
            out += [_SQUEUE[name], value]
    return call(["stat", *out, "-o", fmt or SQUEUE_FORMAT])[0]


def scancel(argv: list[str]) -> int:
    ids, user = [], None
    i = 0
    while i < len(argv):
        a = argv[i]
        i += 1
        if a in ("-u", "--user") or a.startswith("--user="):
            user = a.partition("=")[2] if "=" in a else (argv[i] if i < len(argv) else "")
            i += 0 if "=" in a else 1
        elif a in ("-Q", "--quiet", "-b", "--batch", "-f", "--full", "-v", "--verbose"):
            continue
        elif a.startswith("-"):
            refuse("scancel", f"labq's scancel does not take {a} (it takes job ids and -u USER; "
                              f"to signal a job, use --signal at submit or `labq checkpoint`)")
        else:
            ids.append(a)
    if user is not None:
        if ids:
            refuse("scancel", "give job ids or -u USER, not both")
        return call(["del", "-u", user], capture=True)[0]
    if not ids:
        refuse("scancel", "no job id given (scancel ID… or scancel -u USER)")
    return call(["del", *ids], capture=True)[0]      # scancel says nothing when it worked


_SACCT_DROP = {"-a", "--allusers", "-L", "--allclusters", "-D", "--duplicates"}
_SACCT_DEFAULT = "JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode"
_SACCT_BRIEF = "JobID,State,ExitCode"
_SACCT_LONG = "JobID,JobName,User,Account,AllocCPUS,ReqMem,State,ExitCode,Submit,Start,End,Elapsed,NodeList"


def sacct(argv: list[str]) -> int:
    out = [] if any(a.startswith(("-o", "--format", "-b", "--brief", "-l", "--long", "--json")) for a in argv) else [
        "--format", _SACCT_DEFAULT]
    for a in argv:
        if a in _SACCT_DROP:
            continue
        if a in ("-b", "--brief"):
            out += ["--format", _SACCT_BRIEF]
        elif a in ("-l", "--long"):
            out += ["--format", _SACCT_LONG]
        else:
            out.append(a)
    return call(["acct", *out])[0]


def module(argv: list[str]) -> int:
    """`module load cuda` where there are no environment modules: say so on stderr and succeed, so a
    SLURM script (often under `set -e`) goes on with what the node has installed."""
    sys.stderr.write(f"module: environment modules are not installed on this labq node; "
                     f"`module {' '.join(argv)}` did nothing\n")
    return 0


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        refuse("labq-compat", f"expected a command: {' '.join(NAMES)}")
    name, args = os.path.basename(argv[0]), argv[1:]
    if name == "srun":
        from . import srun
        sys.exit(srun.main(args))
    if name in ("qsub", "qstat", "qdel", "qhold", "qrls", "qacct"):
        from . import pbsshim
        sys.exit(pbsshim.main(name, args))
    fn = {"sbatch": sbatch, "squeue": squeue, "scancel": scancel, "sacct": sacct, "module": module}.get(name)
    if fn is None:
        refuse("labq-compat", f"unknown command {name!r}")
    try:
        sys.exit(fn(args))
    except LabqError as e:
        refuse(name, str(e), e.exit_code)
    except BrokenPipeError:
        sys.exit(1)
