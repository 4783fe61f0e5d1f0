"""Accounts and budgets have members (issue 34): `-A`, `--budget` and `--project` name whose money a
job spends, so the daemon refuses (exit 3) a submitter its config does not list, naming what they
may use; `open = true` lets anyone in; admins may charge anything. On fakeredis and on a real
redis-server (the conns fixture), with the daemon's own request path."""
import time

import pytest

from labq.scheduler.daemon.loop import Scheduler
from labq.scheduler.errors import ConfigError
from labq.scheduler.jobs.model import Gpu
from labq.scheduler.settings import config
from labq.scheduler.store.agentside import AgentStore
from tests.harness import FROZEN, K, reply, submit, woke

TEAMS = """
[security]
admins = ["root"]
[accounts.vision]
users = ["alice"]
[accounts.speech]
users = ["bob"]
[accounts.shared]
open = true
[[budgets]]
name = "vision-main"
account = "vision"
limit = 100.0
[[budgets]]
name = "vision-b"
users = ["alice"]
limit = 50.0
[[budgets]]
name = "pretrain-q3"
project = "pretrain"
users = ["alice"]
limit = 50.0
[[budgets]]
name = "anyone"
open = true
limit = 50.0
"""
# No account tables: -A names a free label, unless a budget is scoped to it.
NO_TABLES = """
[[budgets]]
name = "ghost-team"
account = "ghost"
limit = 50.0
"""
BODY = {"argv": ["true"], "workdir": "/tmp", "gpus": 0, "cpus": 1, "mem": 1 << 20, "time_limit": 60}


def answers(conns, sends: list[tuple[str, dict]], text: str = TEAMS) -> list[dict]:
    """The daemon's replies to `sends` ((user, body changes) in order)."""
    r, raw = conns
    AgentStore(r, K).register("n1", 16, 64 << 30, 16, [Gpu(f"GPU-{i}", i, "fake") for i in range(2)], "h", 1, 3600)
    s = Scheduler(r, config.loads(text), me="s1", clock=FROZEN)
    now = time.time()
    s.tick(now)
    for i, (user, extra) in enumerate(sends):
        submit(r, user, {**BODY, **extra}, f"r{i}")
    s.tick(now + 1, woke(r))
    return [reply(r, f"r{i}") for i in range(len(sends))]


def test_a_non_member_cannot_charge_another_teams_account(conns):
    ok, refused, theirs, shared, plain = answers(conns, [
        ("alice", {"account": "vision"}), ("mallory", {"account": "vision"}), ("bob", {"account": "vision"}),
        ("mallory", {"account": "shared"}), ("mallory", {})])
    assert ok["ok"] and shared["ok"] and plain["ok"], (ok, shared, plain)
    assert refused["code"] == theirs["code"] == 3
    assert "account 'vision': mallory is not one of its users" in refused["error"]
    assert "accounts mallory may use: default, shared" in refused["error"]
    assert "accounts bob may use: speech, shared" in theirs["error"]


def test_budgets_joined_by_name_or_project_take_membership_too(conns):
    got = answers(conns, [("alice", {"budget": "vision-b"}), ("mallory", {"budget": "vision-b"}),
                          ("alice", {"project": "pretrain"}), ("mallory", {"project": "pretrain"}),
                          ("mallory", {"budget": "anyone"}), ("mallory", {"project": "a-label-of-mine"})])
    assert [g.get("code", 0) if not g["ok"] else 0 for g in got] == [0, 3, 0, 3, 0, 0], got
    assert "budget 'vision-b' (--budget vision-b): mallory is not one of its users" in got[1]["error"]
    assert "budgets mallory may join: anyone" in got[1]["error"]
    assert "budget 'pretrain-q3' (--project pretrain)" in got[3]["error"]


def test_admins_may_charge_any_account_and_join_any_budget(conns):
    got = answers(conns, [("root", {"account": "vision", "budget": "vision-b"}),
                          ("root", {"account": "speech", "project": "pretrain"})])
    assert [g["ok"] for g in got] == [True, True], got


def test_without_account_tables_an_account_a_budget_is_scoped_to_has_no_members(conns):
    got = answers(conns, [("alice", {"account": "ghost"}), ("alice", {"account": "a-free-label"}),
                          ("root", {"account": "ghost"})], NO_TABLES)
    assert [g.get("code", 0) if not g["ok"] else 0 for g in got] == [3, 0, 0], got
    assert "account 'ghost': alice is not one of its users; accounts alice may use: default" in got[0]["error"]


def test_an_accounts_budget_follows_its_account():
    with pytest.raises(ConfigError, match="an account's budget has its account's users"):
        config.loads('[[budgets]]\nname = "x"\naccount = "a"\nlimit = 1.0\nusers = ["alice"]\n')
    with pytest.raises(ConfigError, match="accounts.a.open"):
        config.loads('[accounts.a]\nopen = "yes"\n')
    assert config.loads('[accounts.a]\nopen = true\n').accounts[0].open


def test_config_check_names_the_accounts_and_budgets_nobody_may_charge(tmp_path):
    """Closed by default: `labq config check` says which tables only admins may charge."""
    import subprocess
    import sys
    path = tmp_path / "labq.toml"
    path.write_text(TEAMS + '[accounts.legacy]\nmax_gpus = 4\n[[budgets]]\nname = "sweep"\nlimit = 5.0\n')
    p = subprocess.run([sys.executable, "-m", "labq", "config", "check", str(path)], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    warned = [line.split("warning: ", 1)[1] for line in p.stderr.splitlines()]
    assert warned == ["accounts.legacy lists no users and is not open: only admins may charge it (-A legacy); "
                      "list its users, or set open = true",
                      "budget sweep lists no users and is not open: only admins may join it (--budget sweep); "
                      "list its users, or set open = true"], p.stderr
