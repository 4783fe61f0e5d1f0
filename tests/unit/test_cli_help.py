"""`labq --help` is rendered without click and without importing a command module (issue 39: it
cost 110-140 ms of CPU): the page must stay the one click renders, at every terminal width."""
import json
import os
import subprocess
import sys

import click
import pytest

from labq.cli.commands import COMMANDS, SHORT, page, short_help
from labq.cli.group import cli
from tests.harness import ROOT

LABQ = os.path.join(os.path.dirname(sys.executable), "labq")     # the installed command: click's prog name


def test_every_command_has_its_own_line():
    ctx = click.Context(cli)
    assert set(SHORT) == set(COMMANDS)
    for name in COMMANDS:
        assert SHORT[name] == cli.get_command(ctx, name).get_short_help_str(limit=10_000), name


@pytest.mark.parametrize("columns", [30, 52, 60, 80, 81, 120, 300])
def test_the_page_is_clicks_at_any_width(monkeypatch, columns):
    """Compared with click's page in a real process (CliRunner forces its own width)."""
    env = {**os.environ, "COLUMNS": str(columns), "PYTHONPATH": ROOT}
    fast, slow = (subprocess.run([LABQ, "--help"], capture_output=True, text=True, cwd=ROOT,
                                 timeout=60, env={**env, "LABQ_FAST": f}) for f in ("1", "0"))
    assert slow.returncode == 0 and slow.stdout.startswith("Usage: labq"), slow.stderr
    assert fast.stdout == slow.stdout
    monkeypatch.setenv("COLUMNS", str(columns))
    assert page() == slow.stdout


@pytest.mark.parametrize("limit", [0, 2, 3, 10, 45, 1000])
def test_short_help_cuts_as_click_does(limit):
    from click.utils import _make_default_short_help  # click's own (private) rule, compared here only
    for text in list(SHORT.values()) + ["One. Two.", "vs. the rest. More", "a-very-long-hyphenated-word and more"]:
        assert short_help(text, limit) == _make_default_short_help(text, limit), (text, limit)


def test_help_imports_neither_click_nor_a_command():
    code = ("import sys; sys.argv = ['/usr/bin/labq', '--help']; from labq.cli.main import main; main(); "
            "print(sorted(m for m in sys.modules if m == 'click' or m.startswith('labq.cli.') "
            "and m not in ('labq.cli.main', 'labq.cli.fast', 'labq.cli.spec', 'labq.cli.ctx', 'labq.cli.commands', "
            "'labq.cli.helppage')), file=sys.stderr)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stderr.strip() == "[]" and p.stdout.startswith("Usage: labq [OPTIONS] COMMAND")


def test_a_command_without_a_line_falls_back_to_click(monkeypatch):
    monkeypatch.setitem(COMMANDS, "zz", ("labq.cli.control", "hold"))
    assert page() is None


@pytest.mark.parametrize("columns", [52, 80, 120])
def test_a_commands_kept_help_page_is_clicks(tmp_path, columns):
    """`labq CMD --help` (issue 39 item 4): the page made and kept the first time, then read back, is
    click's for every command, at each width; a stamp that no longer holds sends it back to click."""
    from labq.cli import helppage
    env = {**os.environ, "COLUMNS": str(columns), "PYTHONPATH": ROOT, "XDG_CACHE_HOME": str(tmp_path)}
    for name in ("acct", "sub", "nodes"):           # whole processes: the fast path's own checks included
        slow = subprocess.run([LABQ, name, "--help"], capture_output=True, text=True, cwd=ROOT, timeout=60,
                              env={**env, "LABQ_FAST": "0"})
        assert slow.returncode == 0 and slow.stdout.startswith(f"Usage: labq {name}"), slow.stderr
        for _ in ("made", "kept"):
            fast = subprocess.run([LABQ, name, "--help"], capture_output=True, text=True, cwd=ROOT, timeout=60, env=env)
            assert (fast.returncode, fast.stdout) == (0, slow.stdout)
        # from 80 columns on (click's width is 78 there) the page shipped with labq (helppages.txt) is
        # read: nothing made, nothing kept
        assert (tmp_path / "labq" / "help" / f"{name}.txt").exists() == (columns < 80)
    os.environ["XDG_CACHE_HOME"], was = str(tmp_path), os.environ.get("XDG_CACHE_HOME")
    os.environ["COLUMNS"], was_cols = str(columns), os.environ.get("COLUMNS")
    try:
        # Every command's page at 80 columns, made in a fresh process (click caches a command's help
        # option on first use: in this process an earlier test's contexts would decide it), against
        # click's own in a process of its own
        names = list(COMMANDS) if columns == 80 else ["acct"]
        code = ("import json, sys; from labq.cli import helppage; from labq.cli.group import cli; "
                "print(json.dumps({n: helppage.made(n, cli) for n in sys.argv[1:]}))")
        made = subprocess.run([sys.executable, "-c", code, *names], capture_output=True, text=True, cwd=ROOT,
                              timeout=120, env=env)
        assert made.returncode == 0, made.stderr
        pages = json.loads(made.stdout)
        for name in names:
            want = subprocess.run([LABQ, name, "--help"], capture_output=True, text=True, cwd=ROOT, timeout=60,
                                  env={**env, "LABQ_FAST": "0"}).stdout
            assert pages[name] == want, name
            assert helppage.kept(name) == want, name
        with open(tmp_path / "labq" / "help" / "acct.txt", "r+") as f:
            f.write("0")                             # another labq's page: not this one's
        assert helppage.kept("acct") is None
        nope = subprocess.run([LABQ, "nope", "--help"], capture_output=True, text=True, cwd=ROOT, timeout=60, env=env)
        assert nope.returncode == 2 and "No such command 'nope'" in nope.stderr and helppage.kept("nope") is None
    finally:
        for k, v in (("XDG_CACHE_HOME", was), ("COLUMNS", was_cols)):
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.mark.parametrize("name", ["stat", "q"])
def test_stat_h_stays_noheader_with_a_page_kept(tmp_path, name):
    """`labq stat -h` is squeue's -h (--noheader), a query, not help: neither the group on a miss
    (which makes the page) nor the fast path (which reads it back) may take it for --help. At 60
    columns: no shipped page, so the kept one is made and read."""
    env = {**os.environ, "PYTHONPATH": ROOT, "XDG_CACHE_HOME": str(tmp_path), "COLUMNS": "60",
           "LABQ_REDIS_URL": "unix:///nonexistent/labq.sock", "LABQ_NO_SYSTEM_CONFIG": "1"}
    env.pop("LABQ_CONFIG", None)
    helped = subprocess.run([LABQ, name, "--help"], capture_output=True, text=True, cwd=ROOT, timeout=60, env=env)
    assert helped.returncode == 0 and helped.stdout.startswith(f"Usage: labq {name}"), helped.stderr
    for _ in ("page kept", "again"):
        p = subprocess.run([LABQ, name, "-h"], capture_output=True, text=True, cwd=ROOT, timeout=60, env=env,
                           stdin=subprocess.DEVNULL)
        assert p.returncode == 4 and "Usage" not in p.stdout, (p.returncode, p.stdout[:200], p.stderr[-300:])
    assert (tmp_path / "labq" / "help" / f"{name}.txt").exists()
    sub = subprocess.run([LABQ, "sub", "-h"], capture_output=True, text=True, cwd=ROOT, timeout=60, env=env)
    assert sub.returncode == 0 and sub.stdout.startswith("Usage: labq sub"), sub.stderr


def test_stat_h_without_a_page_is_a_query_too(tmp_path):
    env = {**os.environ, "PYTHONPATH": ROOT, "XDG_CACHE_HOME": str(tmp_path),
           "LABQ_REDIS_URL": "unix:///nonexistent/labq.sock", "LABQ_NO_SYSTEM_CONFIG": "1"}
    env.pop("LABQ_CONFIG", None)
    p = subprocess.run([LABQ, "stat", "-h"], capture_output=True, text=True, cwd=ROOT, timeout=60, env=env,
                       stdin=subprocess.DEVNULL)
    assert p.returncode == 4 and "Usage" not in p.stdout, (p.returncode, p.stdout[:200], p.stderr[-300:])
    assert not (tmp_path / "labq" / "help" / "stat.txt").exists(), "no page made for a query"


def test_a_page_that_cannot_be_kept_leaves_no_temporary_file(tmp_path, monkeypatch):
    """made() keeps its page best effort: where the rename fails (here the page's path is a
    directory), the half-step file it wrote goes too, not one per process left in the cache."""
    from labq.cli import helppage
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    (tmp_path / "labq" / "help" / "acct.txt").mkdir(parents=True)
    assert helppage.made("acct", cli).startswith("Usage: labq acct")
    assert sorted(p.name for p in (tmp_path / "labq" / "help").iterdir()) == ["acct.txt"]


def test_the_shipped_pages_are_current(tmp_path):
    """helppages.txt is what click makes now from these sources: else `labq CMD --help` quietly pays
    click on its first call again (the checksum no longer holds). `make helppages` writes it."""
    from labq.cli import helppage
    code = ("import sys; from labq.cli import helppage; from labq.cli.commands import COMMANDS; "
            "from labq.cli.group import cli; helppage.write_shipped(cli, COMMANDS, sys.argv[1])")
    made = subprocess.run([sys.executable, "-c", code, str(tmp_path / "pages.txt")], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, env={**os.environ, "PYTHONPATH": ROOT})
    assert made.returncode == 0, made.stderr
    with open(helppage.SHIPPED, encoding="utf-8") as f:
        assert f.read() == (tmp_path / "pages.txt").read_text(), "cli/helppages.txt is stale: run `make helppages`"


def test_shipped_pages_hold_only_for_their_sources_and_width(tmp_path, monkeypatch):
    from labq.cli import helppage
    monkeypatch.setenv("COLUMNS", "80")
    assert helppage.shipped("acct").startswith("Usage: labq acct [OPTIONS]")
    assert helppage.shipped("nope") is None
    monkeypatch.setenv("COLUMNS", "200")
    assert helppage.shipped("acct").startswith("Usage: labq acct [OPTIONS]")     # click's width: 78 still
    monkeypatch.setenv("COLUMNS", "79")
    assert helppage.shipped("acct") is None              # laid out for 78 columns only
    monkeypatch.setenv("COLUMNS", "80")
    stale = tmp_path / "pages.txt"
    stale.write_text("00000000:1\n" + open(helppage.SHIPPED, encoding="utf-8").read().partition("\n")[2])
    monkeypatch.setattr(helppage, "SHIPPED", str(stale))
    assert helppage.shipped("acct") is None              # other sources: click decides, and its page is kept
    monkeypatch.setattr(helppage, "SHIPPED", str(tmp_path / "absent.txt"))
    assert helppage.shipped("acct") is None


def test_the_help_page_at_the_shipped_width_is_read_not_laid_out():
    """`labq --help` at the shipped width (an 80-column terminal) is read from helppages.txt as the
    commands' pages are: commands.page()'s textwrap imports re and enum, ~40 % of the call (issue 39
    item 4). The page is click's; a command named like the page's key is click's refusal still."""
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": ROOT, "PYTHONPROFILEIMPORTTIME": "1"}
    fast, slow = (subprocess.run([LABQ, "--help"], capture_output=True, text=True, cwd=ROOT, timeout=60,
                                 env={**env, "LABQ_FAST": f}) for f in ("1", "0"))
    assert fast.returncode == 0 and fast.stdout == slow.stdout
    heavy = sorted({line.rsplit("|", 1)[1].strip() for line in fast.stderr.splitlines() if "|" in line}
                   & {"re", "enum", "textwrap", "click", "labq.cli.commands"})
    assert not heavy, heavy
    odd = subprocess.run([LABQ, "labq", "--help"], capture_output=True, text=True, cwd=ROOT, timeout=60, env=env)
    assert odd.returncode == 2 and "No such command 'labq'" in odd.stderr, odd.stderr[-300:]
