"""Trace files → `TraceJob`s, validated row by row. Pure apart from reading the file.

The format is `/work/shared/traces/README.md`'s: a CSV with a header,

    job_id,submit_s,duration_s,gpus,cpus,mem_gib,user,group,status

`job_id`, `submit_s` and `duration_s` are required; the other columns may be missing or empty
(unknown): gpus 0, cpus 1, mem 0, user "user", account from the group. Optional columns the
simulator also reads: `time_limit_s`, `account`, `qos`, `gpu_type`. Unknown columns are ignored.
An `extra` file keyed by `job_id` (like `kth_sp2_1996_extra.csv`) adds its columns to each row.

Malformed input is one UsageError (exit 2) naming the file, the line and the column: a missing
column or value, a row with more or fewer fields than the header, a quoted value across lines
(an unclosed quote), NaN, a negative or non-numeric
value, a number past the bounds below, a job_id twice, a row submitted before the
row above it (a trace is in submit order; `sort=True`, `labq simulate --sort`, replays it sorted)
and a file that is not UTF-8 text. A job larger than the cluster is sim/fit.py's (it needs the
cluster).
"""
import csv
import math
from dataclasses import dataclass, field
from sys import intern

from ..errors import UsageError
from ..jobs.bounds import MAX_AHEAD, MAX_INT

REQUIRED = ("job_id", "submit_s", "duration_s")
GIB = 1 << 30
MAX_SECONDS = MAX_AHEAD          # 100 years: a submit time, run time or limit past it is no trace's
MAX_COUNT = MAX_INT              # GPUs, CPUs: 2^53, as every integer a request carries (bounds.py)
MAX_GIB = MAX_INT / GIB          # memory: 2^53 bytes


@dataclass(frozen=True, slots=True)
class TraceJob:
    name: str             # the trace's job_id
    submit: float         # seconds after the trace's start
    duration: float       # the recorded service time: how long the job runs if nothing stops it
    time_limit: int       # seconds; the job times out there
    gpus: int = 0
    cpus: int = 1
    mem: int = 0          # bytes
    user: str = "user"
    account: str = ""     # "" = the config's default account of the user
    qos: str = "normal"
    gpu_type: str = ""
    status: str = ""      # the trace's own outcome (informational)
    gpus_asked: float | None = None   # the trace's own request where it was a fraction (gpus: rounded up)
    cpus_asked: float | None = None   # the same for CPUs (a cgroup's CPU quota in the trace's cluster)
    nodes: int = 1        # a multi-node job: gpus, cpus and mem are then per node (labq plan --file)
    row: int = field(default=0, compare=False)   # its line in the trace file (0: not read from a file)


def read_numbered(path: str, what: str, strict: bool = False):
    """(header, [(line, row)]): each row with the line of the file it starts on (blank lines and
    # comments skipped but counted). `strict`: a row with more or fewer fields than the header is
    refused, naming its line (a truncated or shifted row would otherwise read as defaults)."""
    with _open(path, what) as f:
        header, rows = _numbered(f, path, what, strict)
        return header, list(rows)


def _open(path: str, what: str):
    try:
        return open(path, newline="", encoding="utf-8-sig")     # a BOM (spreadsheet exports) is not a column
    except FileNotFoundError:
        raise UsageError(f"{what}: no such file: {path}") from None
    except OSError as e:
        raise UsageError(f"{what}: cannot read {path}: {e.strerror}") from None


def _numbered(f, path: str, what: str, strict: bool):
    """read_numbered's (header, rows) of the open file `f`, the rows read as they are asked for: a
    long trace is never held as rows (a dict of strings each) beside its jobs."""
    kept: list[int] = []       # the file's line number of each line the reader is given

    def lines():
        for n, line in enumerate(f, start=1):
            if line.strip() and not line.lstrip().startswith("#"):
                kept.append(n)
                yield line
    reader = csv.DictReader(lines())
    try:
        header = [h.strip() for h in reader.fieldnames or []]
    except (csv.Error, UnicodeDecodeError) as e:
        raise UsageError(f"{what}: {path}: not a CSV file ({e})") from None

    def rows():
        try:
            while True:
                first = reader.line_num          # lines read so far: the next record starts after them
                try:
                    row = next(reader)
                except StopIteration:
                    break
                line = kept[first] if first < len(kept) else kept[-1]
                broken = strict and next((h for h, v in zip(header, row.values())
                                          if isinstance(v, str) and ("\n" in v or "\r" in v)), None)
                if broken:                # a quoted value across lines: no trace has one
                    raise UsageError(f"{what}: {path}:{line}: {broken}: a quoted value holds a line break "
                                     "(an unclosed quote?)")
                if strict and (None in row or None in row.values()):
                    _fields(path, what, line, header, row)
                yield line, row
        except (csv.Error, UnicodeDecodeError) as e:
            raise UsageError(f"{what}: {path}: not a CSV file ({e})") from None
    return header, rows()


def _fields(path: str, what: str, line: int, header: list[str], row: dict):
    extra = row.get(None) or []              # DictReader: the fields past the header's
    have = len(header) + len(extra) - sum(1 for k, v in row.items() if k is not None and v is None)
    if extra:
        raise UsageError(f"{what}: {path}:{line}: {have} fields, the header has {len(header)} "
                         f"(first extra value {extra[0]!r}; a comma in an unquoted value?)")
    col = next(h for h, k in zip(header, row) if row[k] is None)
    raise UsageError(f"{what}: {path}:{line}: {col}: missing: {have} field{'s' * (have != 1)}, the header has {len(header)} "
                     "(a truncated row?)")


def read_extra(path: str) -> dict[str, dict]:
    """job_id → the row of an extra file."""
    header, rows = read_numbered(path, "--extra", strict=True)
    if "job_id" not in header:
        raise UsageError(f"--extra: {path}: missing column 'job_id' (have: {', '.join(header) or 'none'})")
    return {(r.get("job_id") or "").strip(): r for _, r in rows}


def _num(row: dict, col: str, where: str, default=None, lo=0.0, hi=float(MAX_COUNT)):
    raw = (row.get(col) or "").strip()
    if raw == "":
        if default is None:
            raise UsageError(f"{where}: {col}: missing value")
        return default
    try:
        v = float(raw)
    except ValueError:
        raise UsageError(f"{where}: {col}: expected a number, got {raw!r}") from None
    if not math.isfinite(v) or v < lo:
        raise UsageError(f"{where}: {col}: expected a number ≥ {lo:g}, got {raw!r}")
    if v > hi:
        raise UsageError(f"{where}: {col}: {raw} is past the most a trace may give, {hi:,.0f}"
                         + (" s (100 years)" if hi == MAX_SECONDS else ""))
    return v


def load(path: str, extra: str | None = None, time_column: str | None = None, time_factor: float = 1.0,
         cpus_as_gpus: bool = False, sort: bool = False) -> list[TraceJob]:
    """The trace's jobs in submit order. A row submitted before the row above it is refused (a
    trace is written in submit order, so it is a mistake), unless `sort`: then the jobs are sorted
    by submit time (stable). Time limits: `time_column` (from the trace or the extra file;
    `time_limit_s` when the trace has it), else ceil(duration × time_factor); a row whose limit is
    empty or not positive falls back to the factor. At least 1 s."""
    if not (time_factor > 0 and math.isfinite(time_factor)):
        raise UsageError(f"--time-factor: expected a number > 0, got {time_factor!r}")
    with _open(path, "trace") as f:
        header, rows = _numbered(f, path, "trace", strict=True)
        return _load(path, header, rows, extra, time_column, time_factor, cpus_as_gpus, sort)


def _load(path, header, rows, extra, time_column, time_factor, cpus_as_gpus, sort) -> list[TraceJob]:
    if not header:
        raise UsageError(f"trace: {path}: empty: expected a header line with at least {', '.join(REQUIRED)}")
    twice = next((h for k, h in enumerate(header) if h in header[:k]), None)
    if twice is not None:
        raise UsageError(f"trace: {path}: header: column {twice!r} appears twice")
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise UsageError(f"trace: {path}: missing column {missing[0]!r} (have: {', '.join(header) or 'none'}; "
                         f"expected at least {', '.join(REQUIRED)})")
    joined = read_extra(extra) if extra else {}
    if joined:
        rows = list(rows)
    if joined and not {(r.get("job_id") or "").strip() for _, r in rows} & joined.keys():
        raise UsageError(f"--extra: {extra}: no job_id in it matches one of the trace's {len(rows)} jobs")
    extra_cols = set(next(iter(joined.values()), {})) if joined else set()
    if time_column is None and "time_limit_s" in header:
        time_column = "time_limit_s"
    if time_column and time_column not in header and time_column not in extra_cols:
        raise UsageError(f"--time-column: no column {time_column!r} in the trace"
                         + (" or the extra file" if extra else ""))
    jobs: list[TraceJob] = []
    seen: set[str] = set()
    for i, row in rows:
        where = f"trace: {path}:{i}"
        name = (row.get("job_id") or "").strip()
        if not name:
            raise UsageError(f"{where}: job_id: missing value")
        if name in seen:
            raise UsageError(f"{where}: job_id: {name!r} appears twice")
        seen.add(name)
        if joined:
            row = {**joined.get(name, {}), **{k: v for k, v in row.items() if (v or "").strip()}}
        job = _job(row, name, where, time_column, time_factor, cpus_as_gpus, i)
        if jobs and job.submit < jobs[-1].submit and not sort:
            before = jobs[-1]
            raise UsageError(f"{where}: submit_s: {job.submit:g} is before {before.submit:g}, line {before.row}'s "
                             "(a trace is in submit order; --sort replays it sorted)")
        jobs.append(job)
    if sort:
        jobs.sort(key=lambda j: j.submit)
    return jobs


def _job(row, name, where, time_column, time_factor, cpus_as_gpus, line=0) -> TraceJob:
    duration = _num(row, "duration_s", where, hi=MAX_SECONDS)
    limit = None
    if time_column:
        raw = (row.get(time_column) or "").strip()
        try:
            limit = float(raw) if raw else None
        except ValueError:
            raise UsageError(f"{where}: {time_column}: expected a number, got {raw!r}") from None
        if limit is not None and not (math.isfinite(limit) and limit > 0):
            limit = None      # SWF writes -1 for unknown
        elif limit is not None and limit > MAX_SECONDS:
            raise UsageError(f"{where}: {time_column}: {raw} is past the most a trace may give, "
                             f"{MAX_SECONDS:,} s (100 years)")
    if limit is None:
        limit = duration * time_factor
    # A fraction of a GPU (a shared or MIG slice in the trace's cluster) holds a whole device in labq:
    # rounded up, and the job remembers what it asked for (the report counts the rounded ones).
    asked = _num(row, "gpus", where, default=0.0)
    gpus = math.ceil(asked)
    # Fractional CPUs (a container's CPU quota, e.g. 3.152 in Alibaba's and Helios' traces) hold whole
    # cores, as SLURM and labq allocate them and as those clusters' node-hour billing counts them:
    # rounded up, remembered like the GPUs'. Memory stays as given (bytes: no rounding needed).
    cpus_asked = _num(row, "cpus", where, default=1.0)
    cpus = math.ceil(cpus_asked)
    if cpus == 0 and not cpus_as_gpus:
        cpus = 1       # as `labq sub` and SLURM: every job holds at least one CPU (GPU traces often say 0)
    if cpus_as_gpus:
        gpus, cpus = cpus, 1
    return TraceJob(
        name=name, submit=_num(row, "submit_s", where, hi=MAX_SECONDS), duration=duration,
        time_limit=max(1, math.ceil(limit)), gpus=gpus, cpus=cpus,
        gpus_asked=asked if asked != gpus and not cpus_as_gpus else None,
        cpus_asked=cpus_asked if cpus_asked != int(cpus_asked) else None,
        mem=int(_num(row, "mem_gib", where, default=0.0, hi=MAX_GIB) * GIB),
        # A trace has few users, accounts and outcomes: one string each, not one per job.
        user=intern((row.get("user") or "").strip() or "user"),
        account=intern((row.get("account") or "").strip() or (row.get("group") or "").strip()),
        qos=intern((row.get("qos") or "").strip() or "normal"),
        gpu_type=intern((row.get("gpu_type") or "").strip()),
        status=intern((row.get("status") or "").strip()), row=line)
