"""The command table of `labq`, and the top-level help page rendered without click.

`labq --help` listed its commands by importing every command module for its short help (110-140 ms
of CPU, issue 39); click itself costs ~25 ms more. The fast path (fast.py) prints this page instead,
laid out as click's HelpFormatter lays out the group's page; tests/unit/test_cli_help.py compares
the two at several terminal widths, and anything but a bare `labq --help` goes to click.
"""
import textwrap

from .helppage import width as _width

# command name -> (module, attribute)
COMMANDS = {
    "sub": ("labq.cli.submit", "sub"),
    "stat": ("labq.cli.query", "stat"), "q": ("labq.cli.query", "stat"),
    "show": ("labq.cli.query", "show"), "logs": ("labq.cli.query", "logs"), "wait": ("labq.cli.query", "wait"),
    "del": ("labq.cli.control", "delete"), "hold": ("labq.cli.control", "hold"), "release": ("labq.cli.control", "release"), "requeue": ("labq.cli.control", "requeue"), "acct": ("labq.cli.acctcmd", "acct"),
    "nodes": ("labq.cli.query", "nodes"), "drain": ("labq.cli.control", "drain"), "resume": ("labq.cli.control", "resume"), "budget": ("labq.cli.budgetcmd", "budget"),
    "alerts": ("labq.cli.budgetcmd", "alerts"), "report": ("labq.cli.reportcmd", "report"), "ledger": ("labq.cli.ledgercmd", "ledger"),
    "config": ("labq.cli.configcmd", "config"),
    "up": ("labq.cli.daemons", "up"), "scheduler": ("labq.cli.daemons", "scheduler"), "worker": ("labq.cli.daemons", "worker"),
    "demo": ("labq.cli.demo", "demo"), "checkpoint": ("labq.cli.control", "checkpoint"), "plan": ("labq.cli.whatif", "plan"),
    "prio": ("labq.cli.faircmd", "prio"), "share": ("labq.cli.faircmd", "share"),
    "simulate": ("labq.cli.simulate", "simulate"),
    "admin": ("labq.cli.admin", "admin"),
}


# Each command's line in `labq --help`, so that listing them imports none of their modules (110 ms of
# CPU to import them all, issue 39). tests/unit/test_cli_help.py checks each against the command's own.
SHORT = {
    "acct": "History of ended jobs with their costs (sacct-like): your own, or every user's for admins.",
    "admin": "Administration: Redis ACL roles (`labq admin acl`), dead letters, accept-loss.",
    "alerts": "Alerts: budget warnings, forecast overruns, exhaustion, overrides, and the agents' (idle GPUs, …).",
    "budget": "Budgets: limit, spent, accrued, committed (what running jobs may still spend), available, alerts.",
    "checkpoint": "From inside a job: record that it has just saved a checkpoint (lost work counts from now).",
    "config": "Configuration.",
    "del": "Cancel jobs (your own; admins any), or with -u every job of a user.",
    "demo": "Run the 12-job sweep demo end to end and show waves, costs and the budget.",
    "drain": "Take no new jobs on NODE; running ones finish (admins).",
    "hold": "Keep pending jobs from starting (reason Held) until released.",
    "ledger": "The budget ledger: import bills, verify balances, show entries.",
    "logs": "A job's output.",
    "nodes": "Nodes with free/total GPUs, CPUs and memory.",
    "plan": "Concurrency per resource, waves, makespan, cost and what is left of the budget.",
    "prio": "Pending jobs in the order the scheduler considers them, with each factor's weighted part.",
    "q": "The queue: pending and running jobs, with a capacity header.",
    "release": "Let held jobs start again.",
    "report": "Cost reports: GPU-hours, cost, success rate, cost per success, failed and preempted cost, idle GPUs.",
    "requeue": "Stop running jobs and put them back in the queue with the same id (your own; admins any).",
    "resume": "Let NODE take jobs again (admins).",
    "scheduler": "The scheduler daemon (one is active; a second waits for the leader lease).",
    "share": "Accounts' shares, decayed usage and fair-share factors (sshare-like).",
    "show": "One job in full: request, state and the reason with its numbers, attempts, cost.",
    "simulate": "Replay a workload trace (docs/internals.md, \"The simulator\") through the scheduler's own plan() "
                "on a virtual clock: makespan, utilisation, wait, bounded slowdown, completion time, cost, "
                "refusals, budget holds, preemptions and lost work.",
    "stat": "The queue: pending and running jobs, with a capacity header.",
    "sub": "Submit a job: `labq sub [opts] -- CMD…`, `labq sub SCRIPT [ARGS]`, or a script on stdin.",
    "up": "Everything on this machine, in the foreground: a private Redis (unless redis.url is set), the "
          "scheduler and a worker.",
    "wait": "Block until the jobs end; exit with the (first failing) job's exit code.",
    "worker": "The node agent: registers this machine and runs admitted jobs on it.",
}

ABOUT = "labq — a job queue for GPU machines with quotas and budgets."
OPTIONS = (("--config FILE", "Config file (default: $LABQ_CONFIG, /etc/labq/labq.toml, built-in defaults)."),
           ("--version", "Show the version and exit."),
           ("-h, --help", "Show this message and exit."))


def short_help(text: str, limit: int) -> str:
    """A command's line cut to `limit` as click cuts it: its first sentence, then whole words and "..."."""
    words = text.partition("\n\n")[0].split()
    for i, word in enumerate(words):
        if word.endswith(".") and (i == len(words) - 1 or not words[i + 1][0].islower()):
            words = words[:i + 1]
            break
    text = " ".join(words)
    if len(text) <= limit:
        return text
    return "..." if limit < 3 else textwrap.shorten(text, limit, placeholder="...", break_on_hyphens=False)


def _wrap(text: str, width: int, first: str = "", rest: str = "") -> list[str]:
    return textwrap.TextWrapper(width, initial_indent=first, subsequent_indent=rest,
                                replace_whitespace=False).wrap(text)


def _dl(rows, width: int, indent: int = 2) -> list[str]:
    first_col = min(max(len(a) for a, _ in rows), 30) + 2
    out = []
    for a, b in rows:
        pad = " " * (first_col - len(a)) if len(a) <= first_col - 2 else "\n" + " " * (first_col + indent)
        lines = _wrap(b, max(width - first_col - 2, 10)) or [""]
        out.append(" " * indent + a + pad + lines[0])
        out += [" " * (first_col + indent) + line for line in lines[1:]]
    return out


def page() -> str | None:
    """`labq --help`, or None where a command has no line in SHORT (click then lists it)."""
    if set(COMMANDS) - set(SHORT):
        return None
    width = _width()
    usage = "Usage: labq "
    lines = (_wrap("[OPTIONS] COMMAND [ARGS]...", width, usage, " " * len(usage)) if width >= len(usage) + 20
             else None)
    if lines is None:
        return None
    names = sorted(COMMANDS)
    limit = width - 6 - max(map(len, names))
    lines += ["", *_wrap(ABOUT, width, "  ", "  "), "", "Options:", *_dl(OPTIONS, width), "", "Commands:",
              *_dl([(n, short_help(SHORT[n], limit)) for n in names], width)]
    return "\n".join(lines) + "\n"
