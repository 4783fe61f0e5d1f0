"""The flags of the hot commands (and of the rare `acct`, `budget`, `report`, `alerts`, `hold`, `release`,
`requeue`, `nodes`, `prio`, `share`, `drain`, `resume`), declared once: click builds its options from these (submit.py,
query.py), and the fast path (fast.py) parses argv with them without importing click.

An option is (declarations, kind, help, default), the declarations exactly as click takes them
(flags, an optional destination name, or "--x/--no-x"). Kinds: "str", "int", "flag" (is_flag),
"bool" (a --x/--no-x pair), "multi" (repeatable string), "choice" (one of CHOICES), "path" (a file
name: not a directory).
"""
from labq.scheduler.errors import UsageError

SUB = [
    (("-J", "--name", "--job-name", "name"), "str", "Job name.", None),
    (("-A", "--account"), "str", "Account (team) to charge.", None),
    (("--project",), "str", "Project, for project budgets and reports.", None),
    (("-q", "--qos"), "str", "QoS class (default: normal).", None),
    (("--budget", "budget_name"), "str", "A named batch budget to charge as well.", None),
    (("-G", "--gpus"), "str", "GPUs: N or MODEL:N.", None),
    (("--gres",), "str", "SLURM's gpu[:MODEL]:N (the same as --gpus [MODEL:]N).", None),
    (("-N", "--nodes"), "str", "Nodes of a multi-node job (a gang: all start together, share one fate); "
     "-G, -c and --mem are then per node unless -G gives the total.", None),
    (("--gpus-per-node",), "str", "GPUs on each node of the job: N or MODEL:N.", None),
    (("-c", "--cpus", "--cpus-per-task", "cpus"), "str", "CPUs (default 1).", None),
    (("--mem",), "str", "Memory, like 12G (default 0: no reservation).", None),
    (("--mem-per-cpu",), "str", "Memory per CPU, like 4G: the job gets CPUs × this (SLURM's; not with --mem).", None),
    (("--ntasks-per-node",), "str", "Only 1: labq starts one task per node (torchrun starts the per-GPU ranks).",
     None),
    (("-t", "--time", "time_"), "str", "Time limit: 2h, 90 (minutes), 1:30:00, 2-0.", None),
    (("--est",), "str", "Expected runtime (forecast budget mode).", None),
    (("--max-wait",), "str", "Give up (EX) if not started within this long.", None),
    (("--begin",), "str", "Not before: 16:00, tomorrow, now+30minutes, 2026-12-03T09:00, 30m.", None),
    (("-H", "--hold"), "flag", "Submit held (labq release ID starts it).", None),
    (("--deadline",), "str", "End the job (DL) once it could no longer finish by this time (forms of --begin).", None),
    (("-d", "--dependency"), "str", "afterok:ID[:ID],afternotok:ID,afterany:ID,singleton (',' = all of).", None),
    (("--kill-on-invalid-dep",), "flag",
     "Cancel the job when a dependency can never be satisfied (else it pends); =yes and =no as sbatch takes them.",
     None),
    (("--retries",), "int", "Retry up to N times on node failure and on --retry-on exit codes.", None),
    (("--retry-on",), "str", "Exit codes that are retried (with --retries), comma-separated: 3,75.", None),
    (("--requeue/--no-requeue",), "bool", "Requeue on node failure (default) or end NF.", None),
    (("--requeue-on-timeout",), "flag",
     "A timeout after a checkpoint taken in that attempt requeues the job.", None),
    (("--preemptible/--no-preemptible",), "bool", "Override the QoS's preemptibility.", None),
    (("--mem-limit",), "str", "Memory the job may use before it is killed (default: --mem).", None),
    (("-a", "--array"), "str", "Array: 1-12, 1-12:2, 1-12%4 (at most 4 at once).", None),
    (("--signal", "warn_signal"), "str", "[B:][SIG][@SECS]: send SIG (default USR1) SECS (default 60) "
     "before the time limit; B: to the batch shell only, else to all the job's processes.", None),
    (("--checkpoint-exit-code",), "int", "Exiting with this code requeues the job at once.", None),
    (("-o", "--output"), "str", "stdout pattern (default labq-%j.out; %j %A %a %x %u %r).", None),
    (("-e", "--error"), "str", "stderr pattern (default: with stdout).", None),
    (("-D", "--chdir"), "str", "Working directory (default: the current one).", None),
    (("--export",), "str", "Environment the job gets: ALL (default: yours, now), NONE, or VAR[,VAR=value…].", None),
    (("--tag",), "multi", "K=V tag, repeatable.", ()),
    (("--hold-until-budget",), "flag", "A job its budget could never pay today waits (PD BudgetExhausted) for a new "
     "period, a raised limit or an override, instead of being refused.", None),
    (("--test-only",), "flag", "Forecast and verdict; submit nothing.", None),
    (("-W", "--wait"), "flag", "Wait for the job; exit with its code.", None),
    (("--parsable",), "flag", "Print only the job id.", None),
    (("--json", "as_json"), "flag", "Print the reply as JSON.", None),
]

STAT = [
    (("-u", "--user"), "str", "Only this user's jobs.", None),
    (("-A", "--account"), "str", "Only this account's jobs.", None),
    (("-t", "--state", "--states", "state"), "str", "Only these states: PD,R or PENDING,RUNNING.", None),
    (("-j", "--jobs", "job_ids"), "str", "Only these jobs: 42,43_7,44_[1-3] (42: the job, or all its tasks).", None),
    (("--me",), "flag", "Only my jobs.", False),
    (("--start",), "flag", "Expected start of pending jobs (from running jobs' time limits).", False),
    (("-o", "--format", "fmt"), "str", 'squeue fields, like "%.10i %.9T %.8u %.10M %.10l %b %R".', None),
    (("-h", "--noheader"), "flag", "No header lines (squeue's -h; help is --help).", False),
    (("-r", "--array", "expand"), "flag", "One line per array task (else pending tasks compact).", False),
    (("--rid",), "str", "What became of request RID (a client that gave up prints it): submitted as job N, or not.",
     None),
    (("--json", "as_json"), "flag", None, False),
]
SHOW = [
    (("--script", "script"), "flag", "Print the job's script as submitted (its owner and admins only: the scheduler "
     "reads it for them).", False),
    (("--env", "env"), "flag", "Print the variables its submitter exported, NAME=value a line (its owner and admins "
     "only, until the job is archived).", False),
    (("--json", "as_json"), "flag", None, False),
]
LOGS = [
    (("-f", "--follow"), "flag", "Keep printing as the job writes, until it ends.", False),
    (("--err",), "flag", "Show the stderr file (when -e gave one).", False),
]
# sbatch's `--kill-on-invalid-dep=yes|no`: labq's flag, or nothing
_YES_NO = {"--kill-on-invalid-dep"}


def sbatch_forms(argv: list[str]) -> list[str]:
    """`argv` with sbatch's `--FLAG=yes|no` spellings of labq's flags as labq takes them (the flag, or
    nothing), up to `--`; another value is a UsageError."""
    out = []
    for i, a in enumerate(argv):
        if a == "--":
            return out + argv[i:]
        name, eq, value = a.partition("=")
        if eq and name in _YES_NO:
            if value.lower() not in ("yes", "no"):
                raise UsageError(f"{name}: expected yes or no, got {value!r}")
            out += [name] if value.lower() == "yes" else []
            continue
        out.append(a)
    return out


ACCT = [
    (("-S", "--starttime", "start"), "str", "Ended at or after: 08:00, today, now-2days, 2026-12-01 "
     "(default: midnight today; all time with -j).", None),
    (("-E", "--endtime", "end"), "str", "Ended at or before (the forms of -S).", None),
    (("--since",), "str", "From this date (YYYY-MM-DD) or this long ago (7d).", None),
    (("--until",), "str", "Up to this date or this long ago.", None),
    (("-j", "--jobs", "job_ids"), "str", "Only these jobs: 42,43_7 (42: the job or every task of array 42).", None),
    (("-u", "--user"), "str", "Only this user's jobs (another user's: admins only).", None),
    (("-a", "--allusers"), "flag", "Every user's jobs (admins; the default for them).", False),
    (("-A", "--account"), "str", None, None),
    (("-s", "--state", "state"), "str", "Only these states: CD,F or COMPLETED,FAILED.", None),
    (("-o", "--format", "fmt"), "str",
     "table, csv or json; or sacct fields like JobID,JobName%30,State,ExitCode,Elapsed,Cost.", "table"),
    (("-P", "--parsable2"), "flag", "Fields separated by |.", False),
    (("-p", "--parsable"), "flag", "Fields separated by |, with a trailing |.", False),
    (("-n", "--noheader"), "flag", None, False),
    (("-X", "--allocations"), "flag", "Accepted for sacct habits (labq has no steps).", False),
    (("-D", "--duplicates"), "flag", "Each attempt of a requeued job its own row, with its own cost (as sacct -D).",
     False),
    (("--json", "as_json"), "flag", None, False),
]
# options click leaves out of the help page
HIDDEN = {"--allocations"}

BUDGET = [
    (("--period",), "str", "A past period's settled balance: 2026-11 (month), 2026-Q4, 2026-W47.", None),
    (("--json", "as_json"), "flag", None, False),
]
REPORT = [
    (("--by", "by_"), "str", "Group by account,user,qos,gpu_type,node,status,project,tag:KEY.", "account"),
    (("--since",), "str", "Attempts that ended from this date (YYYY-MM-DD) or this long ago (7d).", None),
    (("--until",), "str", "... up to this date or this long ago.", None),
    (("--format", "fmt"), "choice", None, "table"),
    (("--json", "as_json"), "flag", None, False),
    (("--forecast-accuracy",), "flag", "--est against actual run time per user: p50, p90, margin.", False),
    (("--reconcile",), "flag", "Imported bills (labq ledger import) against labq's costs.", False),
    (("--node-idle",), "flag", "Rented nodes (rates.node_hour): instance cost, paid by jobs, idle cost.", False),
    (("--tz",), "str", "Time zone of the days --reconcile compares (default UTC).", "UTC"),
    (("--plot", "plot_path"), "path", "Write spending against the limit to a PNG.", None),
    (("--budget", "budget_name"), "str", "The budget to --plot (default: all).", None),
    (("--period",), "str", "The period to --plot (default: the current one).", None),
]
# the values a "choice" option takes (click.Choice: case-sensitive), under each of its flags;
# a "path" is a file's name (click.Path(dir_okay=False): not a directory)
CHOICES = {"--format": ("table", "csv", "json")}

ALERTS = [
    (("--budget", "name"), "str", "Only this budget's alerts.", None),
    (("--since",), "str", "Only alerts from this long ago (7d) or this date (YYYY-MM-DD) on.", None),
    (("-n", "--count"), "int", "At most this many, the newest (default 50).", 50),
    (("--json", "as_json"), "flag", None, False),
]

NODES = [(("--json", "as_json"), "flag", None, False)]
PRIO = [
    (("-u", "--user"), "str", "Only this user's jobs.", None),
    (("-A", "--account"), "str", "Only this account's jobs.", None),
    (("-r", "--array", "expand"), "flag", "One line per array task.", False),
    (("--json", "as_json"), "flag", None, False),
]
SHARE = [
    (("-A", "--accounts", "account"), "str", "Only these accounts, comma-separated.", None),
    (("-n", "--noheader"), "flag", None, False),
    (("-P", "--parsable2"), "flag", "Fields separated by |.", False),
    (("--json", "as_json"), "flag", None, False),
]

WAIT = [(("--timeout",), "str", "Give up after this long (exit 1).", None)]
DEL = [(("-u", "--user"), "str", "Every pending and running job of this user (scancel -u; yours, or any for admins).",
        None)]

# command -> (options, positional name, how many: 1, "+" (one or more) or "*" (any, sub's argv))
COMMANDS = {
    "sub": (SUB, "args", "*"), "stat": (STAT, None, 0), "q": (STAT, None, 0), "show": (SHOW, "job_id", 1),
    "logs": (LOGS, "job_id", 1), "wait": (WAIT, "job_ids", "+"), "del": (DEL, "job_ids", "*"),
    # rare, but a rare command should cost what `sub` costs (issue 39 item 4); budget's subcommands
    # (set, override) are positionals here: left to click
    "acct": (ACCT, None, 0), "budget": (BUDGET, None, 0), "report": (REPORT, None, 0),
    "alerts": (ALERTS, None, 0), "hold": ([], "job_ids", "+"), "release": ([], "job_ids", "+"),
    "requeue": ([], "job_ids", "+"), "nodes": (NODES, None, 0), "prio": (PRIO, None, 0), "share": (SHARE, None, 0),
    "drain": ([], "node", 1), "resume": ([], "node", 1),
}


def asks_help(argv: list[str]) -> bool:
    """`labq CMD --help`, or `labq CMD -h` where CMD does not take -h itself (stat's and q's -h is
    squeue's --noheader: a query, never help)."""
    if len(argv) != 2 or argv[1] not in ("--help", "-h"):
        return False
    return argv[1] == "--help" or not any("-h" in decls for decls, *_ in COMMANDS.get(argv[0], ((),))[0])


def dest(decls) -> str:
    """The parameter name click gives an option: an explicit name, else the longest flag."""
    names = [d for d in decls if not d.startswith("-")]
    if names:
        return names[0]
    flags = [f for d in decls for f in d.split("/")[:1]]
    longest = max(flags, key=lambda f: (f.startswith("--"), len(f)))
    return longest.lstrip("-").replace("-", "_").lower()


def choices(decls) -> tuple[str, ...]:
    return next(CHOICES[d] for d in decls if d in CHOICES)


def click_options(spec):
    """The click decorators of a spec, in order (applied bottom-up, as a decorator list is)."""
    import click
    out = []
    for decls, kind, help_, default in spec:
        kw = {"help": help_} if help_ else {}
        if HIDDEN.intersection(decls):
            kw["hidden"] = True
        if kind in ("str", "int", "choice") and default is not None:
            kw["default"] = default
        if kind == "int":
            kw["type"] = int
        elif kind == "choice":
            kw["type"] = click.Choice(choices(decls))
        elif kind == "path":
            kw["type"] = click.Path(dir_okay=False)
        elif kind == "flag":
            kw.update(is_flag=True, default=default)
        elif kind == "bool":
            kw["default"] = default
        elif kind == "multi":
            kw["multiple"] = True
        out.append(click.option(*decls, **kw))
    return out


def with_options(spec):
    def deco(f):
        for opt in reversed(click_options(spec)):
            f = opt(f)
        return f
    return deco
