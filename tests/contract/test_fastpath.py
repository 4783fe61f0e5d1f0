"""The fast path of the hot commands (cli/fast.py): it parses exactly as click does or leaves the
argv to click, and imports neither click nor redis-py nor asyncio (tests/e2e/test_fastpath_e2e.py:
each hot command prints the same through both paths on a real stack)."""
import json
import os
import re
import subprocess
import sys
import time

import click
import pytest
from hypothesis import given, settings, strategies as st

from labq.cli import fast, spec
from labq.cli.group import COMMANDS, cli
from labq.scheduler.store.keys import Keys
from tests.harness import ROOT, BudgetBench


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
# nor `json`, `re` or `enum` (~12 ms of CPU of a ~45 ms `labq stat`: scheduler/cjson.py, jobs/codes.py)
LEAN = re.compile(r"\|\s+(json|re|enum|shutil|shlex)$", re.M)


@pytest.mark.parametrize("argv", [["sub", "--test-only", "--", "true"], ["stat"], ["show", "1"], ["del", "1"],
                                  ["wait", "1"], ["logs", "1"], ["q", "-u", "ann"], ["acct"],
                                  ["acct", "-S", "today", "-s", "CD", "-o", "csv"], ["budget", "--json"],
                                  ["report", "--by", "user", "--format", "csv"], ["hold", "1"], ["release", "1", "2"],
                                  ["requeue", "1"], ["alerts"], ["alerts", "--budget", "b", "-n", "5", "--json"],
                                  ["nodes"], ["nodes", "--json"], ["prio"], ["prio", "-u", "ann", "-r", "--json"],
                                  ["share"], ["share", "-A", "a,b", "-P", "-n"], ["drain", "n1"], ["resume", "n1"]])
def test_hot_commands_import_no_redis_py_asyncio_or_click(argv):
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "labq", *argv], env=_env(), cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 4 and "does not answer" in p.stderr, p.stderr[-500:]
    assert not HEAVY.findall(p.stderr), sorted(set(HEAVY.findall(p.stderr)))
    if argv[0] in ("sub", "stat", "q", "del"):
        assert not RECORDS.findall(p.stderr), sorted(set(RECORDS.findall(p.stderr)))
        assert not LEAN.findall(p.stderr), sorted(set(LEAN.findall(p.stderr)))


def test_help_and_odd_forms_still_go_to_click():
    p = subprocess.run([sys.executable, "-m", "labq", "sub", "-HW", "--help"], env=_env(), cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "--test-only" in p.stdout



# A help call needs none of it: neither click, nor a command's module, nor the config and the job model.
HELP_HEAVY = ("click", "redis", "asyncio", "dataclasses", "tomllib", "labq.scheduler.settings.config",
              "labq.scheduler.jobs.model", "re", "json", "enum", "shutil")


@pytest.mark.parametrize("name", ["acct", "budget", "report", "show", "sub", "nodes", "admin", "simulate"])
def test_a_first_help_call_imports_no_click_nor_a_command(tmp_path, name):
    """`labq CMD --help` with nothing kept yet (a fresh install, an empty cache): read from the pages
    shipped with labq (cli/helppages.txt), issue 39 item 4."""
    code = ("import sys; sys.argv = ['/usr/bin/labq', sys.argv[1], '--help']; from labq.cli.main import main; main(); "
            "print(' '.join(sorted(sys.modules)), file=sys.stderr)")
    p = subprocess.run([sys.executable, "-c", code, name], env=_env(XDG_CACHE_HOME=str(tmp_path), COLUMNS="80"),
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.startswith(f"Usage: labq {name} "), p.stderr[-500:]
    mods = p.stderr.split()
    heavy = sorted(m for m in mods if m.partition(".")[0] in HELP_HEAVY or m in HELP_HEAVY)
    assert not heavy, heavy
    commands = sorted(m for m in mods if m.startswith("labq.cli.") and m not in
                      ("labq.cli.main", "labq.cli.fast", "labq.cli.spec", "labq.cli.ctx", "labq.cli.helppage"))
    assert not commands, commands
    assert not (tmp_path / "labq").exists(), "nothing to keep: the page came with labq"


CONFIG_MODULES = re.compile(r"\|\s+(labq\.scheduler\.(settings\.config|client)|tomllib)$", re.M)


@pytest.mark.parametrize("argv", [["acct", "--bogus"], ["budget", "--bogus"],
                                  ["report", "--format", "xml"], ["report", "--since", "nonsense"],
                                  ["report", "--by", "nonsense"]])
def test_a_refused_rare_command_imports_no_redis_py_nor_the_config(argv):
    """A rare command that refuses its command line (exit 2) says so before it reads anything: no
    redis-py, asyncio, config (issue 39 item 4), and click only where click refuses it; click's own
    refusals not the job model either.
    (`labq acct --since nonsense`: the fast path's, test_an_acct_refusal_imports_nothing_heavy.)"""
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "labq", *argv], env=_env(), cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr[-500:]
    heavy = {m for m, _dot in HEAVY.findall(p.stderr)} | set(CONFIG_MODULES.findall(p.stderr))
    # click says what it refuses; what the fast path parses (report --since/--by) refuses without click
    assert heavy == ({"click"} if argv[1] in ("--bogus", "--format") else set()), sorted(heavy)
    if argv[1] in ("--bogus", "--format"):
        assert not RECORDS.findall(p.stderr), sorted(set(RECORDS.findall(p.stderr)))


@pytest.mark.parametrize("argv", [["show", "1"], ["wait", "1"], ["logs", "1"]])
def test_a_job_is_shown_without_the_config(argv):
    """`labq show` renders a job record (cli/render.py) and resolves its id (refs.resolve_ref):
    neither needs the whole config (~20 ms of CPU, issue 39 item 4)."""
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "labq", *argv], env=_env(), cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 4 and "does not answer" in p.stderr, p.stderr[-500:]
    assert not CONFIG_MODULES.findall(p.stderr), sorted(set(CONFIG_MODULES.findall(p.stderr)))


def test_an_acct_refusal_imports_nothing_heavy():
    """`labq acct` parses on the fast path (spec.ACCT): its refusals import neither click nor redis-py
    nor the config."""
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "labq", "acct", "--since", "nonsense"], env=_env(),
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--since" in p.stderr, p.stderr[-500:]
    heavy = {m for m, _dot in HEAVY.findall(p.stderr)} | set(CONFIG_MODULES.findall(p.stderr))
    assert not heavy, sorted(heavy)


# argv, what its output shows of the bench's budget, node and ended job
LIVE_READS = [(["budget"], "eta-sweep"), (["budget", "--json"], '"eta-sweep"'), (["report"], "eta "),
              (["report", "--by", "user,gpu_type", "--json"], '"fake"'),
              (["report", "--by", "status", "--format", "csv"], "CD,1,1"), (["report", "--forecast-accuracy"], "*  ")]


@pytest.mark.redis
def test_budget_and_report_read_without_redis_py(redis_server, tmp_path):
    """`labq budget` and `labq report` read a live Redis (a budget, a node, an ended job) through the
    thin client (store/thinreads.py): redis-py's import (asyncio, ssl) alone cost ~8x `labq sub`
    (issue 39 item 4); and parse on the fast path (spec.BUDGET, spec.REPORT), without click."""
    bench = BudgetBench(redis_server, tmp_path)
    bench.run_job(20, tags=[["model", "eta"]])
    env = {**_env(), "LABQ_REDIS_URL": redis_server.url}
    for argv, shown in LIVE_READS:
        p = subprocess.run([sys.executable, "-X", "importtime", "-m", "labq", "--config", str(bench.cfg_path), *argv],
                           env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and shown in p.stdout, (argv, p.stdout, p.stderr[-800:])
        heavy = {m for m, _dot in HEAVY.findall(p.stderr)}       # nor click: both run on the fast path
        assert not heavy, (argv, sorted(heavy))


# What `labq budget` needs no more once the client settings cache holds the config's budgets
# (clientcache.books): the whole config, TOML, the job model and dataclasses, the ledger module.
BOOKS_HEAVY = re.compile(r"\|\s+(labq\.scheduler\.(settings\.config|jobs\.model|money\.ledger)|tomllib|dataclasses)$",
                         re.M)


@pytest.mark.redis
def test_budget_reads_its_budgets_from_the_settings_cache(redis_server, tmp_path):
    """The first `labq budget` loads the whole config (which validates it) and keeps its budgets
    beside the client settings; the next ones read them there and add the balances up without the
    job model (ThinClient.budget_balances), with a job holding a commitment (issue 39 item 4)."""
    bench = BudgetBench(redis_server, tmp_path)
    bench.run_job(20)
    env = {**_env(XDG_CACHE_HOME=str(tmp_path / "cache")), "LABQ_REDIS_URL": redis_server.url}
    argv = [sys.executable, "-X", "importtime", "-m", "labq", "--config", str(bench.cfg_path), "budget", "--json"]
    outs = []
    for _ in range(2):
        p = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and '"eta-sweep"' in p.stdout, p.stderr[-800:]
        outs.append((p.stdout, p.stderr))
    assert BOOKS_HEAVY.findall(outs[0][1]), "the first call loads the config"
    assert not BOOKS_HEAVY.findall(outs[1][1]), sorted(set(BOOKS_HEAVY.findall(outs[1][1])))
    assert outs[0][0] == outs[1][0]
    # `labq report` prints the currency from the same cache: the job model yes, the config no
    p = subprocess.run(argv[:-2] + ["report"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "cost in USD" in p.stdout, p.stderr[-800:]
    assert not CONFIG_MODULES.findall(p.stderr), sorted(set(CONFIG_MODULES.findall(p.stderr)))


@pytest.mark.redis
def test_share_reads_its_shares_from_the_settings_cache(redis_server, tmp_path):
    """`labq share` takes the accounts' shares and the fair-share half-life from the client settings
    cache as `labq budget` takes its budgets: the first call loads the whole config, the next ones
    neither parse TOML nor build it; books an older labq kept (without shares) and a new share in the
    file are each seen at once (issue 39 item 4)."""
    bench = BudgetBench(redis_server, tmp_path)
    bench.run_job(20)
    env = {**_env(XDG_CACHE_HOME=str(tmp_path / "cache")), "LABQ_REDIS_URL": redis_server.url}
    base = [sys.executable, "-X", "importtime", "-m", "labq", "--config", str(bench.cfg_path)]

    def share():
        p = subprocess.run(base + ["share", "--json"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr[-800:]
        return [(d["account"], d["raw_shares"]) for d in json.loads(p.stdout)], CONFIG_MODULES.findall(p.stderr)

    first, second = share(), share()
    assert first[0] == second[0] == [("eta", 1.0)]
    assert first[1], "the first call loads the config"
    assert not second[1], sorted(set(second[1]))
    cache = tmp_path / "cache" / "labq" / "client-settings.json"
    kept = json.loads(cache.read_text())
    del kept["settings"]["books"]["shares"]
    cache.write_text(json.dumps(kept))
    older = share()
    assert older[0] == [("eta", 1.0)] and older[1], "books without shares: the config is loaded again"
    bench.cfg_path.write_text(bench.cfg_path.read_text().replace('users = ["', 'share = 3\nusers = ["'))
    changed = share()
    assert changed[0] == [("eta", 3.0)] and changed[1]


@pytest.mark.redis
def test_sub_and_stat_on_a_live_queue_import_no_json_re_or_enum(redis_server, tmp_path):
    """A submit with a time limit and memory, then `labq stat` with the job running (its row's live
    figures are JSON): neither imports `json`, `re` or `enum` (scheduler/cjson.py, jobs/codes.py,
    units.py's forms by hand), which were ~12 ms of a ~45 ms `stat` (issue 39 item 4). (`labq show`
    decodes the whole job record, model.Job: it still imports them.)"""
    bench = BudgetBench(redis_server, tmp_path)
    bench.run_job(20)
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "PYTHONPROFILEIMPORTTIME": "1"}
    bench.labq("stat", env=env)                          # the settings cache filled, as after a first command
    code, out, err = bench.labq("sub", "-A", "eta", "-t", "2h", "--mem", "1G", "--parsable", "--", "sleep", "60", env=env)
    assert code == 0 and out.strip().isdigit(), err[-800:]
    assert not LEAN.findall(err), sorted(set(LEAN.findall(err)))
    jid = out.strip()
    bench.r.delete(Keys().wake)           # as the run loop drains it: nothing else is waiting, so it plans now
    bench.s.tick(time.time())
    assert bench.s.jobs[int(jid)].state == "R", (bench.s.jobs[int(jid)].reason, bench.s.jobs[int(jid)].detail)
    for argv in (["stat"], ["stat", "-t", "running,pending"]):
        code, out, err = bench.labq(*argv, env=env, scheduler=False)
        assert code == 0 and jid in out, (argv, out, err[-800:])
        assert "import time:" in err and not LEAN.findall(err), (argv, sorted(set(LEAN.findall(err))))
