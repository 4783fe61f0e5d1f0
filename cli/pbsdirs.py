"""`#PBS` (Torque, OpenPBS, PBS Pro) and `#$` (Sun/Univa/Son of Grid Engine) lines → `labq sub`
flags, as cli/sbatch.py does for `#SBATCH`; `qsub`'s own options are the same words (pbsshim.py).

Taken: -N, -A, -P (project), -l (nodes=N:ppn=C:gpus=G, select=N:ncpus=C:ngpus=G:mem=M, ncpus, ngpus,
walltime, mem, pmem; SGE's h_rt, h_vmem (per slot, as SGE counts it), gpu), -pe NAME N, -t / -J
arrays (with %N, SGE's -tc N), -o, -e (a folder: the default name in it), -j oe|eo|y|n, -W
depend=after…:ID (ids like 1234.server or 1234[]), -hold_jid ID, -h, -r y|n, -d/-wd, -cwd, -v, -V.
Dropped and named in one warning: queues (-q), mail (-m, -M: labq sends no mail), and whatever else
is not understood. Refused in one line: array index lists, -hold_jid by name, -I. A script mixing
#SBATCH, #PBS and #$ lines is refused: which should win is the author's call, not labq's.
Pure: text in, flags out.
"""
import re
import shlex

from labq.scheduler.errors import UsageError

PREFIXES = {"#PBS": "pbs", "#$": "sge"}
_NO_VALUE = {"cwd", "V", "h", "I", "terse", "notify", "X", "x", "z", "f"}
_VALUE_OPTS = {"N", "A", "P", "l", "pe", "t", "J", "tc", "o", "e", "j", "W", "hold_jid", "r", "d", "wd", "v", "q",
               "m", "M", "S", "p", "a", "c", "k", "u", "C", "F", "R", "js", "ar", "binding", "hold_jid_ad",
               "now", "sync", "b", "notify_when"}


def directives(script: str) -> tuple[str | None, list[str]]:
    """(family, the tokens of its lines before the first command); refuses a script with two families."""
    found: dict[str, list[str]] = {}
    for line in script.splitlines()[1 if script.startswith("#!") else 0:]:
        s = line.strip()
        for prefix, fam in PREFIXES.items():
            if s.startswith(prefix) and len(s) > len(prefix) and s[len(prefix)].isspace():
                try:
                    found.setdefault(fam, []).extend(shlex.split(s[len(prefix):], comments=True))
                except ValueError as e:
                    raise UsageError(f"{prefix} line {s!r}: {e}") from None
        if s.startswith("#SBATCH"):
            found.setdefault("slurm", [])
        if s and not s.startswith("#"):
            break
    if len(found) > 1:
        names = {"pbs": "#PBS", "sge": "#$", "slurm": "#SBATCH"}
        raise UsageError(f"the script has {' and '.join(names[f] for f in sorted(found))} directives: keep one "
                         f"family (labq will not guess which should win)")
    fam = next(iter(found), None)
    return (fam, found[fam]) if fam in ("pbs", "sge") else (None, [])


def options(tokens: list[str]) -> list[tuple[str, str | None]]:
    """[(option, value)] from qsub-style tokens: `-l a=1,b=2`, `-pe smp 4`, `-cwd`."""
    out, i = [], 0
    while i < len(tokens):
        tok = tokens[i]
        i += 1
        if not tok.startswith("-") or len(tok) < 2:
            out.append(("", tok))
            continue
        name = tok[1:]
        if name in _NO_VALUE:
            out.append((name, None))
        elif name == "pe":
            if i + 2 > len(tokens):
                raise UsageError("-pe: expected a parallel environment and a slot count, like -pe smp 4")
            out.append((name, " ".join(tokens[i:i + 2])))
            i += 2
        elif name in _VALUE_OPTS or len(name) == 1:
            if i >= len(tokens):
                raise UsageError(f"-{name}: needs a value")
            out.append((name, tokens[i]))
            i += 1
        else:
            out.append((name, None))
    return out


class Reading:
    """One pass over the options: the labq flags, what was ignored, and what qsub itself needs."""

    def __init__(self, family: str):
        self.family = family
        self.flags: dict[str, str] = {}
        self.ignored: list[str] = []
        self.export: list[str] = []
        self.joined: bool | None = None
        self.wait = False
        self.slots = 1
        self.per_slot_mem: int | None = None
        self.throttle: str | None = None

    def default_name(self, stream: str) -> str:
        """PBS's and SGE's log names: NAME.oID, an array task's NAME.oID-INDEX (Torque) or
        NAME.oID.INDEX (SGE)."""
        if "--array" not in self.flags:
            return f"%x.{stream}%j"
        return f"%x.{stream}%A{'.' if self.family == 'sge' else '-'}%a"

    def result(self) -> list[str]:
        import os
        for flag, stream in (("--output", "o"), ("--error", "e")):
            v = self.flags.get(flag)
            if v and (v.endswith("/") or os.path.isdir(v)):        # a folder: the default name in it
                self.flags[flag] = os.path.join(v, self.default_name(stream))
        if self.per_slot_mem is not None and "--mem" not in self.flags:
            self.flags["--mem"] = f"{self.per_slot_mem * self.slots}K"
        if self.throttle and "--array" in self.flags and "%" not in self.flags["--array"]:
            self.flags["--array"] += f"%{self.throttle}"
        if self.export:
            self.flags["--export"] = ",".join(["ALL", *self.export])
        out = []
        for k, v in self.flags.items():
            out += [k] if v == "" else [k, v]
        return out


def translate(tokens: list[str], family: str) -> tuple[list[str], list[str], Reading]:
    """(labq flags, the options ignored, as written, the Reading) for #PBS / #$ / qsub tokens."""
    r = Reading(family)
    for name, value in options(tokens):
        if not name:
            r.ignored.append(str(value))
            continue
        _one(r, name, value)
    return r.result(), r.ignored, r


_SIMPLE = {"N": "--name", "A": "--account", "P": "--project", "d": "--chdir", "wd": "--chdir"}
# labq's defaults already (-V, -cwd, bash), or only qsub's printing (-terse): taken quietly
_QUIET = {"V", "cwd", "S", "terse", "notify", "b", "k", "js", "R", "now", "sync", "C"}


def _pe(r: Reading, value: str, shown: str) -> None:
    pe, _, slots = value.partition(" ")
    lo = slots.split("-")[0]
    if not lo.isdigit():
        raise UsageError(f"-pe {value}: expected a slot count like -pe {pe or 'smp'} 4")
    r.slots = int(lo)
    r.flags["--cpus"] = lo


def _interactive(r: Reading, value: str, shown: str) -> None:
    raise UsageError("-I: labq has no interactive jobs (run the command in a batch script, or use labq sub -W)")


def _set(**kw):
    def handler(r: Reading, value: str, shown: str) -> None:
        for k, v in kw.items():
            setattr(r, k, v(value) if callable(v) else v)
    return handler


def _flag(flag: str, value=None):
    def handler(r: Reading, v: str, shown: str) -> None:
        r.flags[flag] = "" if value is None else value(v, shown)
    return handler


_HANDLERS = {
    "l": lambda r, v, shown: [_resource(r, item) for item in _split_resources(v)],
    "pe": _pe, "t": _flag("--array", lambda v, shown: _array(v, shown)),
    "J": _flag("--array", lambda v, shown: _array(v, shown)),
    "tc": _set(throttle=lambda v: v),
    "o": _flag("--output", lambda v, shown: v.split(":", 1)[-1]),     # host:path → path
    "e": _flag("--error", lambda v, shown: v.split(":", 1)[-1]),
    "j": _set(joined=lambda v: v.lower() in ("oe", "eo", "y", "yes", "true")),
    "W": lambda r, v, shown: _w(r, v, shown),
    "hold_jid": _flag("--dependency", lambda v, shown: "afterany:" + ":".join(_ids(v, shown))),
    "h": _flag("--hold"),
    "r": lambda r, v, shown: r.flags.__setitem__("--requeue" if v.lower().startswith("y") else "--no-requeue", ""),
    "v": lambda r, v, shown: r.export.extend(x for x in v.split(",") if x),
    "I": _interactive,
    "sync": _set(wait=lambda v: v.lower().startswith("y")),          # SGE's -sync y: qsub waits, as -W block=true
}


def _one(r: Reading, name: str, value: str | None) -> None:
    shown = f"-{name}" + (f" {value}" if value is not None else "")
    if name in _SIMPLE:
        r.flags[_SIMPLE[name]] = value or ""
    elif name in _HANDLERS:
        _HANDLERS[name](r, value or "", shown)
    elif name not in _QUIET:
        r.ignored.append(shown)


def _split_resources(text: str) -> list[str]:
    """`nodes=1:ppn=4:gpus=1,walltime=02:00:00,mem=12gb` → items; a comma inside nodes= splits too."""
    return [x for x in text.split(",") if x]


def _resource(r: Reading, item: str) -> None:
    key, _, value = item.partition("=")
    key = key.strip().lower()
    if key in ("walltime", "h_rt"):
        r.flags["--time"] = _duration(value)
    elif key in ("mem", "vmem", "pvmem", "pmem", "h_vmem", "mem_free", "virtual_free"):
        kib = _size_kib(value, item)
        if key in ("h_vmem", "pmem", "pvmem") or (r.family == "sge" and key in ("mem_free", "virtual_free")):
            r.per_slot_mem = kib          # per slot (SGE) or per process (PBS): times the slots
        else:
            r.flags["--mem"] = f"{kib}K"
    elif key == "nodes":
        _nodes(r, value, item)
    elif key == "select":
        _select(r, value, item)
    elif key in ("ncpus", "ppn"):
        r.flags["--cpus"] = value
        r.slots = int(value) if value.isdigit() else r.slots
    elif key in ("gpu", "gpus", "ngpus", "nvidia_gpu"):
        r.flags["--gpus"] = value
    else:
        r.ignored.append(f"-l {item}")


def _nodes(r: Reading, value: str, item: str) -> None:
    """Torque's nodes=N[:ppn=C][:gpus=G][:feature]; a host name instead of N is ignored."""
    head, *props = value.split(":")
    if head.isdigit():
        if int(head) > 1:
            r.flags["--nodes"] = head
    else:
        r.ignored.append(f"-l nodes={head}")
    for p in props:
        k, _, v = p.partition("=")
        if k == "ppn" and v.isdigit():
            r.flags["--cpus"], r.slots = v, int(v)
        elif k == "gpus" and v.isdigit():
            r.flags["--gpus-per-node"] = v
        else:
            r.ignored.append(f"-l nodes=…:{p}")


def _select(r: Reading, value: str, item: str) -> None:
    """PBS Pro's select=N:ncpus=C:ngpus=G:mem=M (per chunk, one chunk per node here)."""
    head, *props = value.split(":")
    if not head.isdigit():
        props, head = [head, *props], "1"
    if int(head) > 1:
        r.flags["--nodes"] = head
    for p in props:
        k, _, v = p.partition("=")
        if k == "ncpus" and v.isdigit():
            r.flags["--cpus"], r.slots = v, int(v)
        elif k == "ngpus" and v.isdigit():
            r.flags["--gpus-per-node"] = v
        elif k == "mem":
            r.flags["--mem"] = f"{_size_kib(v, item)}K"
        else:
            r.ignored.append(f"-l select=…:{p}")


def _w(r: Reading, value: str, shown: str) -> None:
    key, _, v = value.partition("=")
    if key == "depend":
        parts = []
        for clause in v.split(","):
            kind, _, ids = clause.partition(":")
            if kind not in ("afterok", "afternotok", "afterany"):
                raise UsageError(f"-W depend={clause}: labq takes afterok, afternotok and afterany")
            parts.append(f"{kind}:{':'.join(_ids(ids, shown))}")
        r.flags["--dependency"] = ",".join(parts)
    elif key == "block":
        r.wait = v.lower() == "true"
    else:
        r.ignored.append(shown)


def _ids(text: str, shown: str) -> list[str]:
    """`1234.server:1235[]` or SGE's `1234,1235` → ["1234", "1235"]."""
    out = []
    for tok in re.split(r"[:,]", text):
        m = re.fullmatch(r"(\d+)(\[\d*\])?(\.[\w.-]+)?", tok.strip())
        if not m:
            raise UsageError(f"{shown}: expected job ids like 1234 or 1234.server, got {tok!r} "
                             f"(labq does not wait on job names)")
        out.append(m.group(1) + (f"_{m.group(2)[1:-1]}" if m.group(2) and len(m.group(2)) > 2 else ""))
    return out


def _array(value: str, shown: str) -> str:
    if re.fullmatch(r"\d+(-\d+)?(:\d+)?(%\d+)?", value):
        return value
    raise UsageError(f"{shown}: labq takes arrays as LO-HI[:STEP][%N], like 0-11%4 (no index lists)")


def _duration(v: str) -> str:
    """HH:MM:SS or seconds (PBS and SGE) → labq's HH:MM:SS."""
    return v if ":" in v else f"{v}s" if v.isdigit() else v


_UNITS = {"b": 1 / 1024, "w": 8 / 1024, "k": 1, "kb": 1, "m": 1024, "mb": 1024, "g": 1 << 20, "gb": 1 << 20,
          "t": 1 << 30, "tb": 1 << 30, "": 1 / 1024}


def _size_kib(v: str, item: str) -> int:
    """PBS's 12gb, 512mb; SGE's 12G, 512M → KiB (both count in powers of 1024)."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([a-zA-Z]*)", v.strip())
    if not m or m.group(2).lower() not in _UNITS:
        raise UsageError(f"-l {item}: expected a size like 12gb or 12G")
    return max(1, int(float(m.group(1)) * _UNITS[m.group(2).lower()]))
