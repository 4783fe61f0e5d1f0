"""Against a real stack, each hot command prints and exits the same through the fast path
(cli/fast.py, the thin client) and through click with the full client (LABQ_FAST=0)."""
import subprocess

from tests.harness import E2E, E2E_MARKS

pytestmark = E2E_MARKS


PARKED = """
[scheduler]
tick = 0.2
[accounts.parked]
users = ["{user}"]
[worker]
name = "fast-node"
gpus = 0
cpus = 2
mem = "1G"
slots = 1
spool = "{spool}"
run_as = "self"
"""


def test_each_hot_command_says_the_same_through_both_paths():
    """Jobs stay pending (held), so every column is stable between the two runs."""
    e = E2E(PARKED)
    try:
        def both(*args, stdin=""):
            fast_p = e.labq(*args, stdin=stdin)
            env = dict(e.stack.env(), LABQ_FAST="0")
            slow_p = subprocess.run(e.stack.command(*args), env=env, cwd=e.work, input=stdin, capture_output=True,
                                    text=True, timeout=120)
            return fast_p, slow_p

        a, b = both("sub", "-A", "parked", "-H", "-J", "same", "--", "true")
        assert a.returncode == b.returncode == 0, (a.stderr, b.stderr)
        first, second = (int(p.stdout.split()[-1]) for p in (a, b))
        assert (a.stdout, b.stdout) == (f"Submitted job {first}\n", f"Submitted job {second}\n")
        a, b = both("sub", "-A", "parked", "-H", "--parsable", stdin="#!/bin/sh\n#LABQ -J fromscript -a 1-3\ntrue\n")
        assert a.returncode == b.returncode == 0 and a.stdout.strip().isdigit(), (a.stderr, b.stderr)
        for args in (("stat",), ("stat", "-t", "PD", "-A", "parked"), ("stat", "--json"), ("q", "--me"),
                     ("show", str(first)), ("show", f"{a.stdout.strip()}_2", "--json"),
                     ("sub", "-A", "parked", "--test-only", "--", "true"), ("wait", str(first), "--timeout", "1"),
                     ("logs", str(first)), ("show", "999999"), ("del", "999999"), ("budget",), ("budget", "--json"),
                     ("report",), ("report", "--by", "user", "--format", "json"), ("report", "--since", "x"),
                     ("alerts",), ("alerts", "--json", "-n", "3"), ("alerts", "-n", "0"), ("hold", str(first)),
                     ("release", "999999"), ("requeue", "999999", str(first)), ("nodes",),
                     ("share",), ("share", "-P", "-n"), ("prio", "-u", "nobody", "--json"),
                     ("drain", "nosuchnode"), ("resume", "nosuchnode")):
            a, b = both(*args)
            assert (a.returncode, a.stdout, a.stderr) == (b.returncode, b.stdout, b.stderr), args
        rows = e.client.store.r.hlen(e.client.k.stat_rows)
        assert rows == len(e.client.read.active()) == 8
        a, b = both("del", str(first))
        assert (a.returncode, a.stdout) == (0, f"job {first}: cancelled\n")
        assert (b.returncode, b.stderr) == (2, f"labq: job {first} already ended\n")   # the second cancel
    finally:
        e.close()
