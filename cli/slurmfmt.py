"""squeue's `-o "%.18i %.8j %T"` and sacct's `--format=JobID,JobName%30,State` for labq's jobs.

One place for the field letters and names, so `stat`, `acct` (and a thin client) print the same
thing. Pure: jobs and `now` in, text out.
"""
import re
import time

from labq.scheduler.errors import UsageError
from labq.scheduler.jobs import states
from labq.scheduler.jobs.hostlist import compact
from labq.scheduler.units import fmt_duration, fmt_money, fmt_size

from . import render
from .statview import exit_code


def _gres(j) -> str:
    if not j.gpus:
        return "N/A"
    return f"gres/gpu:{j.gpu_type}:{j.gpus}" if j.gpu_type else f"gres/gpu:{j.gpus}"


def _ts(t) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t)) if t else "N/A"


def _limit(j) -> str:
    return fmt_duration(j.time_limit) if j.time_limit else "UNLIMITED"


def _left(j, now) -> str:
    if not j.time_limit:
        return "UNLIMITED"
    return fmt_duration(max(0, j.time_limit - render.elapsed(j, now)))


def _nodelist(j) -> str:
    """The job's node(s): a gang's in SLURM's compact form (a `stat` row has it so already)."""
    parts = getattr(j, "parts", ())
    return compact([n for n, _ in parts]) if parts else j.node or ""


def _n(j) -> int:
    return getattr(j, "nodes", 1) or 1     # rows from before multi-node jobs have no node count


def _nodes(j) -> str:
    return str(_n(j))


def _where(j) -> str:
    return f"({j.reason})" if j.state == states.PENDING else _nodelist(j)


# squeue letter -> (header, value(job, now, shown id))
SQUEUE = {
    "i": ("JOBID", lambda j, now, shown: shown), "A": ("JOBID", lambda j, now, shown: str(j.id)),
    "F": ("ARRAY_JOB_ID", lambda j, now, shown: str(j.array_id if j.array_id is not None else j.id)),
    "K": ("ARRAY_TASK_ID", lambda j, now, shown: shown.partition("_")[2] or "N/A"),
    "j": ("NAME", lambda j, now, shown: j.name), "u": ("USER", lambda j, now, shown: j.user),
    "a": ("ACCOUNT", lambda j, now, shown: j.account), "q": ("QOS", lambda j, now, shown: j.qos),
    "P": ("PARTITION", lambda j, now, shown: "labq"),
    "T": ("STATE", lambda j, now, shown: states.LONG.get(j.state, j.state)),
    "t": ("ST", lambda j, now, shown: j.state),
    "M": ("TIME", lambda j, now, shown: fmt_duration(render.elapsed(j, now))),
    "l": ("TIME_LIMIT", lambda j, now, shown: _limit(j)), "L": ("TIME_LEFT", lambda j, now, shown: _left(j, now)),
    "D": ("NODES", lambda j, now, shown: _nodes(j)), "C": ("CPUS", lambda j, now, shown: str(j.cpus)),
    "m": ("MIN_MEMORY", lambda j, now, shown: fmt_size(j.mem) if j.mem else "0"),
    "b": ("TRES_PER_NODE", lambda j, now, shown: _gres(j)),
    "R": ("NODELIST(REASON)", lambda j, now, shown: _where(j)),
    "r": ("REASON", lambda j, now, shown: j.reason if j.state == states.PENDING else "None"),
    "N": ("NODELIST", lambda j, now, shown: _nodelist(j)),
    "V": ("SUBMIT_TIME", lambda j, now, shown: _ts(j.submit_time)),
    "S": ("START_TIME", lambda j, now, shown: _ts(j.start_time)),
    "e": ("END_TIME", lambda j, now, shown: _ts(j.end_time)),
    "Z": ("WORK_DIR", lambda j, now, shown: j.workdir),
    "o": ("COMMAND", lambda j, now, shown: " ".join(j.argv) if not j.has_script else "<script>"),
    "$": ("COST", None),       # squeue() fills it in: money is printed in the client's currency
}
_FIELD = re.compile(r"%(\.?)(\d*)([A-Za-z$%])")


def squeue(fmt: str, rows, now: float, header: bool = True, *, currency: str) -> str:
    """`rows`: (shown id, job) pairs. Fields `%[.][width]X`: `.` right-aligns; a width truncates
    and pads, as squeue does; other text is copied."""
    parts, pos = [], 0
    for m in _FIELD.finditer(fmt):
        parts.append(fmt[pos:m.start()])
        if m.group(3) == "%":
            parts.append("%")
        elif m.group(3) not in SQUEUE:
            raise UsageError(f"--format: unknown field %{m.group(3)} (known: "
                             f"{' '.join('%' + k for k in SQUEUE)})")
        else:
            parts.append((m.group(3), m.group(1) == ".", int(m.group(2)) if m.group(2) else None))
        pos = m.end()
    parts.append(fmt[pos:])

    def line(values):
        out = []
        for p in parts:
            if isinstance(p, str):
                out.append(p)
                continue
            letter, right, width = p
            v = values(letter)
            out.append(v if width is None else (v[:width].rjust(width) if right else v[:width].ljust(width)))
        return "".join(out).rstrip()

    fields = {**SQUEUE, "$": ("COST", lambda j, now, shown: fmt_money(j.cost + render.running_cost(j, now),
                                                                   currency=currency))}
    lines = [line(lambda k: fields[k][0])] if header else []
    lines += [line(lambda k, j=j, s=s: str(fields[k][1](j, now, s))) for s, j in rows]
    return "\n".join(lines)


# sacct field (lower case) -> (header, value(job, extra)); `extra` carries costs computed by the caller.
SACCT = {
    "jobid": ("JobID", lambda j, x: j.display_id), "jobidraw": ("JobIDRaw", lambda j, x: str(j.id)),
    "jobname": ("JobName", lambda j, x: j.name), "user": ("User", lambda j, x: j.user),
    "account": ("Account", lambda j, x: j.account), "qos": ("QOS", lambda j, x: j.qos),
    "partition": ("Partition", lambda j, x: "labq"),
    "state": ("State", lambda j, x: x.get("state") or states.LONG.get(j.state, j.state)),
    "exitcode": ("ExitCode", lambda j, x: exit_code(j)),
    "submit": ("Submit", lambda j, x: _ts(j.submit_time)), "start": ("Start", lambda j, x: _ts(j.start_time)),
    "end": ("End", lambda j, x: _ts(j.end_time)),
    "elapsed": ("Elapsed", lambda j, x: fmt_duration(render.elapsed(j, j.end_time or 0))),
    "elapsedraw": ("ElapsedRaw", lambda j, x: str(int(render.elapsed(j, j.end_time or 0)))),
    "timelimit": ("Timelimit", lambda j, x: _limit(j)),
    "alloccpus": ("AllocCPUS", lambda j, x: str(j.cpus)), "reqcpus": ("ReqCPUS", lambda j, x: str(j.cpus)),
    "reqmem": ("ReqMem", lambda j, x: fmt_size(j.mem) if j.mem else "0"),
    "reqtres": ("ReqTRES", lambda j, x: f"cpu={j.cpus * _n(j)},mem={fmt_size(j.mem * _n(j))},node={_n(j)}"
                + (f",gres/gpu={j.gpus * _n(j)}" if j.gpus else "")),
    "nnodes": ("NNodes", lambda j, x: _nodes(j)), "nodelist": ("NodeList", lambda j, x: _nodelist(j) or "None assigned"),
    "restarts": ("Restarts", lambda j, x: str(j.restart_count)), "workdir": ("WorkDir", lambda j, x: j.workdir),
    "reason": ("Reason", lambda j, x: j.reason), "cost": ("Cost", lambda j, x: x.get("cost", "")),
    "committed": ("Committed", lambda j, x: x.get("committed", "")),
    "maxrss": ("MaxRSS", lambda j, x: _max_rss(j)),
}


def _max_rss(j) -> str:
    """sacct's MaxRSS (in K, as sacct prints it): the peak of the job's attempts, "" where none was
    recorded (an attempt that never started, a row archived before labq kept it)."""
    peaks = [(a.usage or {}).get("max_rss_bytes") for a in j.attempts]
    peak = max((p for p in peaks if p), default=None)
    return f"{peak // 1024}K" if peak else ""
DEFAULT_SACCT = "JobID,JobName,Account,AllocCPUS,State,ExitCode,Elapsed,Cost"


def sacct_fields(text: str) -> list[tuple[str, int | None]]:
    """`jobid,jobname%30,state` → [(key, width or None)]; an unknown field is a UsageError."""
    out = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        name, _, width = item.partition("%")
        key = name.lower()
        if key not in SACCT:
            raise UsageError(f"--format: unknown field {name!r} (known: {', '.join(v[0] for v in SACCT.values())})")
        out.append((key, int(width) if width.isdigit() else None))
    if not out:
        raise UsageError(f"--format: expected fields like JobID,JobName,State, got {text!r}")
    return out


def sacct(fields, jobs, extra: dict | list, header: bool = True, sep: str | None = None, trailing: bool = False) -> str:
    """Aligned columns (a field's width truncates, sacct's default is 10... we fit the widest), or
    `sep`-separated (`|` for --parsable2; --parsable adds a trailing one)."""
    head = [SACCT[k][0] for k, _ in fields]
    # `extra`: by job id, or a list beside `jobs` (--duplicates: a job's rows have costs of their own)
    extras = extra if isinstance(extra, list) else [extra.get(j.id, {}) for j in jobs]
    rows = [[str(SACCT[k][1](j, x)) for k, _ in fields] for j, x in zip(jobs, extras)]
    if sep is not None:
        end = sep if trailing else ""
        return "\n".join(sep.join(r) + end for r in ([head] if header else []) + rows)
    widths = [w or max([len(h)] + [len(r[i]) for r in rows]) for i, (h, (_, w)) in enumerate(zip(head, fields))]
    lines = ([" ".join(h[:w].rjust(w) for h, w in zip(head, widths)),
              " ".join("-" * w for w in widths)] if header else [])
    lines += [" ".join(v[:w].rjust(w) for v, w in zip(r, widths)) for r in rows]
    return "\n".join(lines)
