"""The fast path of the hot commands: `labq sub/stat/q/show/logs/wait/del` (and the rare `acct`,
`budget`, `report`, `alerts`, `hold`, `release`, `requeue`, `nodes`, `prio`, `share`, `drain`, `resume`) without click.

click costs more to import than the rest of `labq sub` together. This parses the argv of the hot
commands with their declared flags (spec.py, from which click builds the same options) and runs
them through the thin client. It handles the plain forms only: `--flag value`, `--flag=value`,
`-f value`, flags, `--x/--no-x`, positionals, `--`. Anything else — --help, `-t2h`, `-HW`, an
unknown or malformed flag, a missing value, `stat --start` — returns None, and the click group
handles the same argv, so its help and error messages stay exactly click's.
"""
import os
import sys

from labq.scheduler.errors import UsageError

from . import spec
from .ctx import thin_client

HOT = frozenset(spec.COMMANDS)


def _table(options) -> dict:
    """flag → (dest, kind, value for a flag)."""
    out = {}
    for decls, kind, _help, _default in options:
        dest = spec.dest(decls)
        for d in decls:
            if not d.startswith("-"):
                continue
            on, _, off = d.partition("/")
            out[on] = (dest, kind, True)
            if off:
                out[off] = (dest, kind, False)
    return out


def parse(command: str, argv: list[str]) -> dict | None:
    """click's params for `labq COMMAND argv`, with "dashdash", or None where click should decide."""
    options, pos_name, nargs = spec.COMMANDS[command]
    if command == "sub":
        try:
            argv = spec.sbatch_forms(argv)
        except UsageError:
            return None         # click's path says it (submit.py)
    flags = _table(options)
    params = {spec.dest(decls): default for decls, _k, _h, default in options}
    positional, after_dashdash, i = [], False, 0
    while i < len(argv):
        a = argv[i]
        i += 1
        if after_dashdash or a == "-" or not a.startswith("-"):
            positional.append(a)
            continue
        if a == "--":
            after_dashdash = True
            continue
        name, eq, value = a.partition("=") if a.startswith("--") else (a, "", "")
        if name not in flags:
            return None
        dest, kind, flag_value = flags[name]
        if kind in ("flag", "bool"):
            if eq:
                return None
            params[dest] = flag_value
            continue
        if not eq:
            if i >= len(argv):
                return None
            value = argv[i]
            i += 1
        value = _typed(kind, name, value)
        if value is None:
            return None         # click's message
        params[dest] = params[dest] + (value,) if kind == "multi" else value
    if (nargs == 0 and positional) or (nargs == 1 and len(positional) != 1) or (nargs == "+" and not positional):
        return None
    if pos_name:
        params[pos_name] = positional[0] if nargs == 1 else tuple(positional)
    params["dashdash"] = "--" in argv
    return params


def _typed(kind: str, flag: str, value: str):
    """`value` as click converts it for an option of `kind`, or None where click refuses it."""
    if kind == "int":
        try:
            return int(value)
        except ValueError:
            return None
    if kind == "choice" and value not in spec.CHOICES[flag]:
        return None
    if kind == "path" and os.path.isdir(value):    # click.Path(dir_okay=False)
        return None
    return value


def split_global(argv: list[str]):
    """(config path, command, its argv) when the group's own options are only --config; else None."""
    config, i = None, 0
    while i < len(argv) and argv[i].startswith("-"):
        a = argv[i]
        if a == "--config" and i + 1 < len(argv):
            config, i = argv[i + 1], i + 2
        elif a.startswith("--config="):
            config, i = a.split("=", 1)[1], i + 1
        else:
            return None
    if i >= len(argv) or argv[i] not in HOT:
        return None
    return config, argv[i], argv[i + 1:]


def run(argv: list[str]) -> bool:
    """Run a hot command here; False when the click group should take this argv."""
    if argv in (["--help"], ["-h"]) and os.path.basename(sys.argv[0]) == "labq":   # click's prog name: labq
        from .helppage import ROOT, shipped
        text = shipped(ROOT)        # at the shipped width; else laid out here
        if text is None:
            from .commands import page
            text = page()
        if text is not None:
            os.write(1, text.encode())
        return text is not None
    if spec.asks_help(argv) and os.path.basename(sys.argv[0]) == "labq":
        return _command_help(argv[0])
    g = split_global(argv)
    if g is None:
        return False
    config, command, rest = g
    params = parse(command, rest)
    if params is None or (command in ("stat", "q") and params.get("start")):
        return False
    from .out import guarded
    # acct's other forms and report --plot read through the full client (redis-py)
    guarded(lambda: _dispatch(config, command, params), _redis_errors if command in ("acct", "report") else None)
    return True


def _redis_errors():
    """redis-py's error classes: `labq acct --json` and `report --plot` read through the full client
    (common.redis_errors)."""
    from labq.scheduler.store.faults import ERRORS
    return ERRORS


def _command_help(name: str) -> bool:
    """`labq NAME --help` from its kept page (helppage.py); False on a miss: the click group prints
    it then, and keeps it (group.main)."""
    from . import helppage
    return helppage.show(name)


def _dispatch(config, command: str, params: dict) -> None:
    if command in ("acct", "budget", "report", "alerts", "prio", "share"):
        from .ctx import Ctx
        params.pop("dashdash")
        if command == "acct":
            from . import acct
            return acct.run(Ctx(config), **params)
        if command == "prio":
            from . import prio
            return prio.run(Ctx(config), **params)
        if command == "share":
            from . import share  # not prio's policy.priority, which imports the whole config
            return share.run(Ctx(config), **params)
        if command in ("budget", "alerts"):
            from . import budget
            return (budget.show if command == "budget" else budget.alerts)(Ctx(config), **params)
        from . import report
        return report.run(Ctx(config), **params)
    client = thin_client(config)
    if command == "sub":
        from . import subcore
        return subcore.run(client, params, params.pop("args"), params.pop("dashdash"), _merge)
    from . import hot
    params.pop("dashdash")
    if command in ("hold", "release", "requeue"):
        return hot.control(client, command, params["job_ids"])
    if command in ("nodes", "drain", "resume"):
        from . import nodeview
        return nodeview.nodes(client, **params) if command == "nodes" else nodeview.node_admin(client, command,
                                                                                              params["node"])
    {"stat": hot.stat, "q": hot.stat, "show": hot.show, "logs": hot.logs, "wait": hot.wait,
     "del": hot.delete}[command](client, **params)


def _merge(opts: dict, dirs: list[str], what: str) -> None:
    """A script's directives fill the flags the command line left unset; directives this parser does
    not take go to click's (submit.py), for click's message."""
    got = parse("sub", dirs + ["--", "true"])
    if got is None:
        import click

        from .submit import _merge_directives, sub
        return _merge_directives(click.Context(sub), opts, dirs, what)
    for k, v in got.items():
        if k not in ("args", "dashdash") and opts.get(k) in (None, ()) and v not in (None, ()):
            opts[k] = v


