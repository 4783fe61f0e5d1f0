"""`#SBATCH` lines → `labq sub` flags, for SLURM scripts that have no `#LABQ` lines.

The common subset is translated (-J -A -q -t --mem --mem-per-cpu --gres=gpu[:type]:N --gpus
--gpus-per-node -c -N -o -e -a -d --kill-on-invalid-dep --begin --deadline --signal --requeue --export -D -H); options labq has no use for
(-n, -p, --mail-*, …) are dropped and named, with everything else not understood, in one warning
line. labq starts one task per node (torchrun spawns the per-GPU ranks), so --ntasks-per-node > 1
is refused. Pure: text in, (flags, ignored) out.
"""
import shlex

from labq.scheduler.errors import UsageError

# sbatch option (long name) → labq flag. Short names map onto long ones first.
_VALUE = {"job-name": "--name", "account": "--account", "qos": "--qos", "time": "--time", "mem": "--mem",
          "gpus": "--gpus", "gpus-per-node": "--gpus-per-node", "nodes": "--nodes", "gpus-per-task": "--gpus", "cpus-per-task": "--cpus",
          "output": "--output", "error": "--error", "array": "--array", "dependency": "--dependency",
          "begin": "--begin", "deadline": "--deadline", "export": "--export", "chdir": "--chdir",
          "mem-per-cpu": "--mem-per-cpu", "signal": "--signal"}
_FLAG = {"requeue": "--requeue", "no-requeue": "--no-requeue", "hold": "--hold"}
_SHORT = {"J": "job-name", "A": "account", "q": "qos", "t": "time", "G": "gpus", "c": "cpus-per-task",
          "o": "output", "e": "error", "a": "array", "d": "dependency", "D": "chdir", "H": "hold",
          "N": "nodes", "n": "ntasks", "p": "partition"}


def directives(script: str, prefix: str = "#SBATCH") -> list[str]:
    """The tokens of the `prefix` lines before the first command (sbatch stops there too)."""
    out = []
    for line in script.splitlines()[1 if script.startswith("#!") else 0:]:
        s = line.strip()
        if s.startswith(prefix) and (len(s) == len(prefix) or s[len(prefix)].isspace()):
            try:
                out += shlex.split(s[len(prefix):], comments=True)
            except ValueError as e:
                raise UsageError(f"{prefix} line {s!r}: {e}") from None
        elif s and not s.startswith("#"):
            break
    return out


def translate(tokens: list[str]) -> tuple[list[str], list[str]]:
    """(labq flags, the directives ignored, as written) for sbatch option tokens."""
    flags, ignored, i = [], [], 0
    while i < len(tokens):
        tok = tokens[i]
        i += 1
        name, value = _split(tok)
        if name is None:
            ignored.append(tok)
            continue
        takes_value = name not in _FLAG and name not in ("exclusive", "no-kill", "overcommit", "contiguous",
                                                         "kill-on-invalid-dep")
        if value is None and takes_value and i < len(tokens) and not tokens[i].startswith("-"):
            value, i = tokens[i], i + 1
        shown = tok if value is None or "=" in tok or (tok.startswith("-") and not tok.startswith("--")
                                                       and len(tok) > 2) else f"{tok} {value}"
        labq = _one(name, value)
        if labq is None:
            ignored.append(shown)
        else:
            flags += labq
    return flags, ignored


def _split(tok: str) -> tuple[str | None, str | None]:
    if tok.startswith("--"):
        name, eq, value = tok[2:].partition("=")
        return name, (value if eq else None)
    if tok.startswith("-") and len(tok) >= 2:
        long = _SHORT.get(tok[1])
        if long is None:
            return tok[1:], None
        return long, (tok[2:].lstrip("=") or None)
    return None, None


def _one(name: str, value: str | None) -> list[str] | None:
    """The labq flags for one sbatch option, [] to drop it quietly, None when it is ignored (warned)."""
    if name in _FLAG:
        return [_FLAG[name]]
    if name == "kill-on-invalid-dep":       # sbatch's =yes|no (bare: yes)
        return ["--kill-on-invalid-dep" + (f"={value}" if value is not None else "")]
    if value is None:
        return None
    if name == "gres":
        return gres(value)
    if name == "ntasks-per-node":
        if value != "1":
            raise UsageError(f"#SBATCH --{name}={value}: labq starts one task per node "
                             f"(launch the per-GPU ranks with torchrun --nproc-per-node)")
        return []
    if name == "nodes" and value in ("1", "1-1"):
        return []       # one node: the default, no gang
    if name == "ntasks":
        return [] if value == "1" else None
    if name in _VALUE:
        return [_VALUE[name], value]
    return None


def gres(value: str) -> list[str] | None:
    """`gpu:2`, `gpu:a100:2`, `gpu` (one) → --gpus [TYPE:]N; other GRES are not labq's."""
    for part in value.split(","):
        bits = part.split(":")
        if bits[0] != "gpu":
            continue
        if len(bits) == 1:
            return ["--gpus", "1"]
        if len(bits) == 2:
            return ["--gpus", bits[1] if bits[1].isdigit() else f"{bits[1]}:1"]
        return ["--gpus", f"{':'.join(bits[1:-1])}:{bits[-1]}"]
    return None

