"""PBS/Torque's and Grid Engine's commands as labq speaks them: `qsub`, `qstat`, `qdel`, `qhold`,
`qrls`, `qacct` (shim.py dispatches here; the worker and `make install-pbs-compat` install them).

Each translates to labq's own `sub`, `stat`, `show`, `del`, `hold`, `release` (shim.call) and
prints what PBS or SGE would: qsub the job id as `1234.labq` (an array's `1234[].labq`), or SGE's
`Your job 1234 ("name") has been submitted` when the job is SGE-style (#$ lines, -cwd, -pe…);
qstat Torque's layout and state letters (Q queued, H held or waiting on a dependency, R running,
E exiting, C completed), -a/-u its wide layout, -f its full listing, -t one line per array task,
and SGE's `qstat -j ID` (with LABQ_QSTAT=sge, plain `qstat` prints Grid Engine's layout: the two
systems' commands share the name); qacct -j SGE's accounting record.
"""
import json
import os
import re
import sys
import time

from labq.scheduler.errors import UsageError

from . import pbsdirs
from .compat import call, refuse, script_text

SERVER = "labq"
_SGE_ONLY = {"cwd", "pe", "hold_jid", "tc", "terse", "wd", "b", "notify", "now", "sync"}


def pbs_id(d: dict) -> str:
    """1234.labq, an array task's 1234[3].labq."""
    if d.get("array_job_id") is not None:
        return f"{d['array_job_id']}[{d['array_task_id']}].{SERVER}"
    return f"{d['job_id']}.{SERVER}"


def labq_id(text: str) -> str:
    """1234.server, 1234[].server, 1234[3] → labq's 1234, 1234, 1234_3."""
    m = re.fullmatch(r"(\d+)(?:\[(\d*)\])?(?:\.[\w.-]+)?", text.strip())
    if not m:
        raise UsageError(f"expected a job id like 1234 or 1234.{SERVER}, got {text!r}")
    return m.group(1) + (f"_{m.group(2)}" if m.group(2) else "")


# -- qsub --------------------------------------------------------------------------------------
def qsub(argv: list[str]) -> int:
    opt_tokens, script, args = _split(argv)
    text = script_text([script] if script else []) if "-b" not in opt_tokens else None   # a file or stdin
    family, script_tokens = pbsdirs.directives(text) if text else (None, [])
    names = {n for n, _ in pbsdirs.options(opt_tokens)}
    family = family or ("sge" if names & _SGE_ONLY else "pbs")
    flags, ignored, given = pbsdirs.translate(opt_tokens, family)
    if ignored:
        sys.stderr.write(f"qsub: warning: options labq ignores: {' '.join(ignored)}\n")
    _, _, both = pbsdirs.translate(script_tokens + opt_tokens, family)
    flags = _default_logs(both) + flags
    binary = dict(pbsdirs.options(opt_tokens)).get("b", "n").lower().startswith("y")
    rest = (["--", script, *args] if binary else [script, *args]) if script else []
    rc, out = call(["sub", *flags, "--parsable", *rest], capture=True)
    if rc != 0:
        return rc
    jid = out.strip()
    array = both.flags.get("--array")
    if "terse" in names:
        print(f"{jid}.{array.split('%')[0]}" if array else jid)
    elif family == "sge":
        name = both.flags.get("--name") or (script.rsplit("/", 1)[-1] if script else "STDIN")
        print(f'Your job-array {jid}.{_sge_range(array)} ("{name}") has been submitted' if array else
              f'Your job {jid} ("{name}") has been submitted')
    else:
        print(f"{jid}[].{SERVER}" if array else f"{jid}.{SERVER}")
    sys.stdout.flush()
    if given.wait:
        return call(["wait", jid])[0]
    return 0


def _split(argv: list[str]) -> tuple[list[str], str | None, list[str]]:
    """(option tokens, the script or None for stdin, its arguments: SGE's trailing ones or -F's)."""
    i, opts, extra = 0, [], []
    while i < len(argv):
        tok = argv[i]
        if tok == "--":
            return opts, (argv[i + 1] if i + 1 < len(argv) else None), argv[i + 2:] + extra
        if not tok.startswith("-") or tok == "-":
            return opts, tok, argv[i + 1:] + extra
        name = tok[1:]
        if name == "F" and i + 1 < len(argv):
            import shlex
            extra += shlex.split(argv[i + 1])
            i += 2
            continue
        width = 3 if name == "pe" else 1 if name in pbsdirs._NO_VALUE else 2
        opts += argv[i:i + width]
        i += width
    return opts, None, extra


def _default_logs(r: "pbsdirs.Reading") -> list[str]:
    """PBS's and SGE's log names where none is given: NAME.oID, and NAME.eID unless joined."""
    out = [] if "--output" in r.flags else ["--output", r.default_name("o")]
    if not r.joined and "--error" not in r.flags:
        out += ["--error", r.default_name("e")]
    return out


def _sge_range(array: str) -> str:
    rng, _, step = array.split("%")[0].partition(":")
    lo, _, hi = rng.partition("-")
    return f"{lo}-{hi or lo}:{step or 1}"


# -- qstat -------------------------------------------------------------------------------------
LETTER = {"PD": "Q", "R": "R", "CG": "E", "PR": "E"}


def letter(d: dict) -> str:
    if d["state"] == "PD":
        return "H" if d.get("reason") in ("Held", "Dependency") else "Q"
    return LETTER.get(d["state"], "C")


def hms(seconds: float) -> str:
    s = int(max(0, seconds))
    return f"{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}"


def _elapsed(d: dict, now: float) -> float:
    if not d.get("start_time"):
        return 0.0
    return (d.get("end_time") or now) - d["start_time"]


def _jobs(ids: list[str], user: str | None, expand: bool) -> list[dict]:
    args = ["stat", "--json", "-r"] + (["-u", user] if user else []) + (["-j", ",".join(ids)] if ids else [])
    rc, out = call(args, capture=True)
    if rc != 0:
        sys.exit(rc)
    jobs = json.loads(out or "[]")
    found = {str(d["job_id"]) for d in jobs} | {str(d["array_job_id"]) for d in jobs}
    missing = [i for i in ids if i.split("_")[0] not in found]
    if missing:                                   # ended: what `labq acct` still knows
        jobs += _ended(missing)
        if not jobs:
            sys.stderr.write(f"qstat: Unknown Job Id {missing[0]}.{SERVER}\n")
            sys.exit(153)
    if not expand:
        jobs = _fold(jobs)
    return jobs


def _ended(ids: list[str]) -> list[dict]:
    rc, out = call(["acct", "--json", "-j", ",".join(ids)], capture=True)
    return json.loads(out or "[]") if rc == 0 else []


def _fold(jobs: list[dict]) -> list[dict]:
    """An array as one line, `1234[]` (Torque without -t): R while any task runs, else E, Q, H, and C
    once every task has ended."""
    out, seen = [], {}
    order = "REQHC"
    for d in jobs:
        a = d.get("array_job_id")
        if a is None:
            out.append(d)
            continue
        if a not in seen:
            seen[a] = {**d, "array_task_id": "", "_letter": letter(d)}
            out.append(seen[a])
        elif order.index(letter(d)) < order.index(seen[a]["_letter"]):
            seen[a]["_letter"] = letter(d)
    return out


def default_layout(jobs: list[dict], now: float) -> str:
    """Torque's `qstat`: Job ID, Name, User, Time Use, S, Queue."""
    lines = [f"{'Job ID':<25} {'Name':<16} {'User':<15} {'Time Use':<8} S Queue",
             f"{'-' * 25} {'-' * 16} {'-' * 15} {'-' * 8} - -----"]
    for d in jobs:
        lines.append(f"{pbs_id(d)[:25]:<25} {d['name'][:16]:<16} {d['user'][:15]:<15} "
                     f"{hms(_elapsed(d, now)):>8} {d.get('_letter') or letter(d)} {d['qos']}")
    return "\n".join(lines)


def wide_layout(jobs: list[dict], now: float) -> str:
    """Torque's `qstat -a` (and -u): requested memory and time, elapsed time."""
    # "Req'd"/"Elap" right-aligned over Memory (ends at column 91), Time (101) and Elap Time (113)
    head = ["", f"{SERVER}: ", f"{'Req' + chr(39) + 'd':>91} {'Req' + chr(39) + 'd':>9}   {'Elap':>9}",
            f"{'Job ID':<23} {'Username':<11} {'Queue':<8} {'Jobname':<16} {'SessID':>6} {'NDS':>5} {'TSK':>6} "
            f"{'Memory':>9} {'Time':>9} {'S'} {'Time':>9}",
            f"{'-' * 23} {'-' * 11} {'-' * 8} {'-' * 16} {'-' * 6} {'-' * 5} {'-' * 6} {'-' * 9} {'-' * 9} - {'-' * 9}"]
    rows = []
    for d in jobs:
        req = d["request"]
        mem = f"{req['mem'] >> 20}mb" if req.get("mem") else "--"
        limit = hms(req["time_limit"]) if req.get("time_limit") else "--"
        rows.append(f"{pbs_id(d)[:23]:<23} {d['user'][:11]:<11} {d['qos'][:8]:<8} {d['name'][:16]:<16} "
                    f"{'--':>6} {req.get('nodes') or 1:>5} {req['cpus']:>6} {mem:>9} {limit:>9} "
                    f"{d.get('_letter') or letter(d)} {hms(_elapsed(d, now)) if d.get('start_time') else '--':>9}")
    return "\n".join(head + rows)


SGE_STATE = {"PD": "qw", "R": "r", "CG": "dr", "PR": "dr"}


def sge_layout(jobs: list[dict]) -> str:
    """Grid Engine's `qstat`: job-ID, prior, name, user, state (qw, hqw, r, dr), submit/start at,
    queue, slots, ja-task-ID; ended jobs are not listed."""
    lines = ["job-ID  prior   name       user         state submit/start at     queue                          "
             "slots ja-task-ID",
             "-" * 113]
    for d in jobs:
        if d["state"] not in SGE_STATE:
            continue
        state = ("h" if d.get("reason") in ("Held", "Dependency") else "") + SGE_STATE[d["state"]]
        at = d.get("start_time") if d["state"] != "PD" else d["submit_time"]
        queue = f"{d['qos']}@{(d.get('nodelist') or [''])[0]}" if d["state"] != "PD" else ""
        jid = d["array_job_id"] if d.get("array_job_id") is not None else d["job_id"]
        task = d.get("array_task_id")
        lines.append(f"{jid:>7} 0.50000 {d['name'][:10]:<10} {d['user'][:12]:<12} {state:<5} "
                     f"{time.strftime('%m/%d/%Y %H:%M:%S', time.localtime(at or 0))} {queue[:30]:<30} "
                     f"{d['request']['cpus'] * (d['request'].get('nodes') or 1):>5} {'' if task is None else task}".rstrip())
    return "\n".join(lines)


def full(d: dict, now: float) -> str:
    """`qstat -f ID`: one attribute a line, as Torque prints them."""
    req = d["request"]
    nodes = f"{req.get('nodes') or 1}:ppn={req['cpus']}" + (f":gpus={req['gpus']}" if req["gpus"] else "")
    attrs = [("Job_Name", d["name"]), ("Job_Owner", f"{d['user']}@{SERVER}"), ("job_state", letter(d)),
             ("queue", d["qos"]), ("server", SERVER), ("Account_Name", d["account"]),
             ("ctime", _ctime(d["submit_time"])), ("Resource_List.nodes", nodes),
             ("Resource_List.walltime", hms(req["time_limit"]) if req.get("time_limit") else None),
             ("Resource_List.mem", f"{req['mem'] >> 20}mb" if req.get("mem") else None),
             ("resources_used.walltime", hms(_elapsed(d, now)) if d.get("start_time") else None),
             ("exec_host", "+".join(f"{n}/0-{req['cpus'] - 1}" for n in d.get("nodelist") or []) or None),
             ("start_time", _ctime(d["start_time"]) if d.get("start_time") else None),
             ("comp_time", _ctime(d["end_time"]) if d.get("end_time") else None),
             ("exit_status", d["exit_code"] if d.get("end_time") and d.get("exit_code") is not None else None),
             ("init_work_dir", d["workdir"]), ("job_array_id", d.get("array_task_id")),
             ("depend", d.get("dependency"))]
    return "\n".join([f"Job Id: {pbs_id(d)}"] + [f"    {k} = {v}" for k, v in attrs if v not in (None, "")]) + "\n"


def _ctime(t) -> str:
    return time.strftime("%a %b %e %H:%M:%S %Y", time.localtime(t)) if t else ""


def sge_job(d: dict) -> str:
    """SGE's `qstat -j ID`."""
    req = d["request"]
    res = ",".join(x for x in (f"h_rt={int(req['time_limit'])}" if req.get("time_limit") else "",
                               f"h_vmem={req['mem'] >> 20}M" if req.get("mem") else "",
                               f"gpu={req['gpus']}" if req["gpus"] else "") if x)
    rows = [("job_number", d["job_id"] if d.get("array_job_id") is None else d["array_job_id"]),
            ("submission_time", _ctime(d["submit_time"])), ("owner", d["user"]), ("sge_o_workdir", d["workdir"]),
            ("account", d["account"]), ("job_name", d["name"]), ("hard resource_list", res or None),
            ("parallel environment", f"smp range: {req['cpus']}" if req["cpus"] > 1 else None),
            ("job_state", letter(d)), ("usage", f"wallclock={hms(_elapsed(d, time.time()))}")]
    return "=" * 62 + "\n" + "\n".join(f"{k + ':':<28}{v}" for k, v in rows if v not in (None, ""))


def qstat(argv: list[str]) -> int:
    # Grid Engine's layout where the user asks for it (LABQ_QSTAT=sge): the command name is the same
    ids, user, mode, expand = [], None, "sge-list" if os.environ.get("LABQ_QSTAT") == "sge" else "default", False
    i = 0
    while i < len(argv):
        a = argv[i]
        i += 1
        if a == "-u":
            user, i = (argv[i] if i < len(argv) else ""), i + 1
            mode = "wide" if mode == "default" else mode     # Torque: -u implies -a; SGE keeps its layout
        elif a == "-a":
            mode = "wide"
        elif a == "-f":
            mode = "full"
        elif a == "-j":
            mode = "sge"
        elif a == "-t":
            expand = True
        elif a in ("-x", "-1", "-w"):
            continue
        elif a.startswith("-"):
            refuse("qstat", f"labq's qstat does not take {a} (it takes -u USER, -a, -f [ID], -t, -j ID; "
                            f"queues and servers: `labq nodes`)")
        else:
            ids.append(labq_id(a))
    now = time.time()
    jobs = _jobs(ids, user, expand or mode in ("full", "sge", "sge-list"))
    if mode == "full":
        print("\n".join(full(d, now) for d in jobs), end="")
    elif mode == "sge":
        if not ids:
            refuse("qstat", "-j needs a job id (qstat -j 1234)")
        print("\n".join(sge_job(d) for d in jobs))
    elif mode == "sge-list":
        if any(d["state"] in SGE_STATE for d in jobs):
            print(sge_layout(jobs))
    elif jobs:
        print(default_layout(jobs, now) if mode == "default" else wide_layout(jobs, now))
    return 0


# -- qdel, qhold, qrls, qacct ------------------------------------------------------------------
def control(labq_cmd: str, name: str, argv: list[str]) -> int:
    ids = []
    for a in argv:
        if a.startswith("-"):
            if a in ("-W", "-p", "-m"):      # PBS's delay/purge/message: not labq's
                refuse(name, f"labq's {name} does not take {a} (it takes job ids)")
            continue
        ids += [labq_id(x) for x in a.split(",") if x]
    if not ids:
        refuse(name, f"no job id given ({name} 1234.{SERVER})")
    return call([labq_cmd, *ids], capture=True)[0]       # PBS's and SGE's say nothing when it worked


def qacct(argv: list[str]) -> int:
    """SGE's `qacct -j ID`: the accounting record of an ended job."""
    if len(argv) != 2 or argv[0] != "-j":
        refuse("qacct", "labq's qacct takes -j ID (for reports: labq acct, labq report)")
    recs = _ended([labq_id(argv[1])])
    if not recs:
        sys.stderr.write(f"error: job id {argv[1]} not found\n")
        return 1
    for d in recs:
        if not d.get("end_time"):
            continue
        code = d.get("exit_code")
        rows = [("qname", d["qos"]), ("hostname", ",".join(d.get("nodelist") or []) or "-"), ("owner", d["user"]),
                ("project", d.get("project") or "NONE"), ("account", d["account"]), ("jobname", d["name"]),
                ("jobnumber", d["array_job_id"] if d.get("array_job_id") is not None else d["job_id"]),
                ("taskid", d["array_task_id"] if d.get("array_task_id") is not None else "undefined"),
                ("qsub_time", _ctime(d["submit_time"])), ("start_time", _ctime(d.get("start_time"))),
                ("end_time", _ctime(d["end_time"])), ("slots", d["request"]["cpus"]),
                ("failed", 0 if d["state"] in ("CD", "F") else 100), ("exit_status", code if code is not None else 137),
                ("ru_wallclock", f"{int(_elapsed(d, d['end_time']))}s")]
        print("=" * 62 + "\n" + "\n".join(f"{k:<13}{v}" for k, v in rows))
    return 0


def main(name: str, argv: list[str]) -> int:
    try:
        if name == "qsub":
            return qsub(argv)
        if name == "qstat":
            return qstat(argv)
        if name == "qacct":
            return qacct(argv)
        return control({"qdel": "del", "qhold": "hold", "qrls": "release"}[name], name, argv)
    except UsageError as e:
        refuse(name, str(e), e.exit_code)
    return 2
