"""The fast path of the hot commands (cli/fast.py): it parses exactly as click does or leaves the
argv to click; it imports neither click nor redis-py nor asyncio; and against a real stack each hot
command prints and exits the same through both paths (LABQ_FAST=0 forces click)."""
import os
import re
import subprocess
import sys

import click
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labq.cli import fast, spec
from labq.cli.group import COMMANDS
from labq.cli.main import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _click_command(name):
    import importlib
    mod, attr = COMMANDS[name]
    return getattr(importlib.import_module(mod), attr)


def _tokens(name):
    options = spec.COMMANDS[name][0]
    flags = [f for decls, *_ in options for d in decls if d.startswith("-") for f in d.split("/")]
    return st.sampled_from(flags + ["--", "-", "x", "7", "-7", "a b", "--bogus", "-HW", "-t2h", "--json=1",
                                    "--name=n", "--retries=x", "--tag=k=v", "-h", "--help", ""])


@pytest.mark.parametrize("name", sorted(spec.COMMANDS))
def test_fast_parse_is_clicks_or_nothing(name):
    cmd = _click_command(name)

    @settings(max_examples=150, deadline=None)
    @given(st.lists(_tokens(name), max_size=8))
    def check(argv):
        mine = fast.parse(name, list(argv))
        try:
            ctx = cmd.make_context(name, list(argv), parent=click.Context(cli), resilient_parsing=False)
        except (click.exceptions.ClickException, click.exceptions.Exit):
            assert mine is None, f"click refuses {argv}, the fast path took it: {mine}"
            return
        if mine is None:
            return          # left to click: always allowed
        dashdash = mine.pop("dashdash")
        assert mine == ctx.params, argv
        if name == "sub":
            assert dashdash == ctx.meta["dashdash"]
    check()


def test_click_builds_its_options_from_the_same_spec():
    for name, (options, _pos, _n) in spec.COMMANDS.items():
        params = {p.name: p for p in _click_command(name).params if isinstance(p, click.Option)}
        assert sorted(params) == sorted(spec.dest(d) for d, *_ in options), name


def _env(**kw):
    e = dict(os.environ, LABQ_REDIS_URL="unix:///nonexistent/labq.sock", PYTHONPATH=ROOT, **kw)
    e.pop("LABQ_CONFIG", None)
    return e


HEAVY = re.compile(r"\|\s+(redis|asyncio|click|rq|ssl)(\.|$)", re.M)
# sub, stat and del need no job record, so neither the model nor the config (no config file here)
RECORDS = re.compile(r"\|\s+(labq\.scheduler\.(config|model)|tomllib|dataclasses)$", re.M)


@pytest.mark.parametrize("argv", [["sub", "--test-only", "--", "true"], ["stat"], ["show", "1"], ["del", "1"],
                                  ["wait", "1"], ["logs", "1"], ["q", "-u", "ann"]])
def test_hot_commands_import_no_redis_py_asyncio_or_click(argv):
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "labq", *argv], env=_env(), cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 4 and "does not answer" in p.stderr, p.stderr[-500:]
    assert not HEAVY.findall(p.stderr), sorted(set(HEAVY.findall(p.stderr)))
    if argv[0] in ("sub", "stat", "q", "del"):
        assert not RECORDS.findall(p.stderr), sorted(set(RECORDS.findall(p.stderr)))


def test_help_and_odd_forms_still_go_to_click():
    p = subprocess.run([sys.executable, "-m", "labq", "sub", "-HW", "--help"], env=_env(), cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "--test-only" in p.stdout


PARKED = """
[scheduler]
tick = 0.2
[accounts.parked]
users = ["{user}"]
max_running = 0
[worker]
name = "fast-node"
gpus = 0
cpus = 2
mem = "1G"
slots = 1
spool = "{spool}"
run_as = "self"
"""


@pytest.mark.e2e
@pytest.mark.redis
def test_each_hot_command_says_the_same_through_both_paths():
    """Jobs stay pending (max_running = 0), so every column is stable between the two runs."""
    from tests.test_e2e import E2E
    e = E2E(PARKED)
    try:
        def both(*args, stdin=""):
            fast_p = e.labq(*args, stdin=stdin)
            env = dict(e.stack.env(), LABQ_FAST="0")
            slow_p = subprocess.run(e.stack.command(*args), env=env, cwd=e.work, input=stdin, capture_output=True,
                                    text=True, timeout=120)
            return fast_p, slow_p

        a, b = both("sub", "-A", "parked", "-J", "same", "--", "true")
        assert a.returncode == b.returncode == 0, (a.stderr, b.stderr)
        first, second = (int(p.stdout.split()[-1]) for p in (a, b))
        assert (a.stdout, b.stdout) == (f"Submitted job {first}\n", f"Submitted job {second}\n")
        a, b = both("sub", "-A", "parked", "--parsable", stdin="#!/bin/sh\n#LABQ -J fromscript -a 1-3\ntrue\n")
        assert a.returncode == b.returncode == 0 and a.stdout.strip().isdigit(), (a.stderr, b.stderr)
        for args in (("stat",), ("stat", "-t", "PD", "-A", "parked"), ("stat", "--json"), ("q", "--me"),
                     ("show", str(first)), ("show", f"{a.stdout.strip()}_2", "--json"),
                     ("sub", "-A", "parked", "--test-only", "--", "true"), ("wait", str(first), "--timeout", "1"),
                     ("logs", str(first)), ("show", "999999"), ("del", "999999")):
            a, b = both(*args)
            assert (a.returncode, a.stdout, a.stderr) == (b.returncode, b.stdout, b.stderr), args
        rows = e.client.r.hlen(e.client.k.stat_rows)
        assert rows == len(e.client.read.active()) == 8
        a, b = both("del", str(first))
        assert (a.returncode, a.stdout) == (0, f"job {first}: cancelled\n")
        assert (b.returncode, b.stderr) == (2, f"labq: job {first} already ended\n")   # the second cancel
    finally:
        e.close()
