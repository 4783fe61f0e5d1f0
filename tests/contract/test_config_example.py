"""config.example.toml documents every key scheduler/settings/config.py accepts, loads cleanly, and states
the real defaults; bad values in it are refused with an error that names the key.

The set of accepted keys is read from config.py's source (each `_check_keys(section, table,
allowed)` call), so a key added there without being documented here fails this test.
"""
import ast
import os
import re
import subprocess
import sys
import tomllib

import pytest

from labq.scheduler.errors import ConfigError
from labq.scheduler.settings import config, configcheck
from tests.harness import ROOT

EXAMPLE = os.path.join(ROOT, "config.example.toml")


def _example_text() -> str:
    with open(EXAMPLE) as f:
        return f.read()


# -- the accepted keys, from config.py's source ------------------------------------------------
def _pattern(node: ast.expr) -> str:
    """A section name from a string or f-string: f"qos.{name}" -> "qos.*"."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "*" for v in node.values)
    raise AssertionError(f"config.py line {node.lineno}: cannot read a section name from {ast.dump(node)}")


def _module_dict_keys(tree: ast.Module, name: str) -> set[str]:
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
            assert isinstance(stmt.value, ast.Dict), f"{name} is not a dict literal"
            return {k.value for k in stmt.value.keys}
    raise AssertionError(f"config.py: no module-level dict {name}")


def _allowed(tree: ast.Module, node: ast.expr) -> set[str]:
    if isinstance(node, ast.Set):
        return {e.value for e in node.elts}
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "set"
            and len(node.args) == 1 and isinstance(node.args[0], ast.Name)):
        return _module_dict_keys(tree, node.args[0].id)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "keys_"
            and isinstance(node.func.value, ast.Name)):
        return getattr(config, node.func.value.id).keys_()     # a typed section (sections.py): its fields
    raise AssertionError(f"config.py line {node.lineno}: cannot read the allowed keys from {ast.dump(node)}")


def _section(func: ast.FunctionDef, call: ast.Call) -> str:
    arg = call.args[0]
    if not isinstance(arg, ast.Name):
        return _pattern(arg)
    # A variable: its last assignment before the call (in _budget, `k` is reassigned afterwards).
    last = None
    for n in ast.walk(func):
        if (isinstance(n, ast.Assign) and n.lineno < call.lineno
                and any(isinstance(t, ast.Name) and t.id == arg.id for t in n.targets)):
            if last is None or n.lineno > last.lineno:
                last = n
    assert last is not None, f"config.py line {call.lineno}: {arg.id} is never assigned"
    return _pattern(last.value)


def accepted_keys() -> dict[str, set[str]]:
    """section pattern ("" = top level, "qos.*", "budgets[*]") -> the keys config.py accepts there."""
    out: dict[str, set[str]] = {}
    for module in (config, configcheck):       # configcheck.py holds the [[budgets]] and [alerts] sections
        with open(module.__file__) as f:
            tree = ast.parse(f.read())
        for func in (n for n in tree.body if isinstance(n, ast.FunctionDef)):
            for call in ast.walk(func):
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and \
                        call.func.id in ("_check_keys", "check_keys"):
                    out.setdefault(_section(func, call), set()).update(_allowed(tree, call.args[2]))
    return out


def example_keys(data: dict) -> dict[str, set[str]]:
    """The same shape, for the keys the example actually sets (the union over qos/accounts/budgets)."""
    out: dict[str, set[str]] = {"": set(data)}
    for sec, v in data.items():
        if sec in ("qos", "accounts", "users"):
            for table in v.values():
                out.setdefault(f"{sec}.*", set()).update(table)
        elif sec == "budgets":
            for table in v:
                out.setdefault("budgets[*]", set()).update(table)
        else:
            out[sec] = set(v)
    return out


def test_introspection_finds_every_section():
    acc = accepted_keys()
    assert set(acc) == {"", "redis", "scheduler", "priority", "qos.*", "rates", "accounts.*", "users.*", "budgets[*]",
                        "worker", "alerts", "security", "estimate"}
    assert {"kill_wait", "budget_mode"} <= acc["scheduler"] and "allow_root" in acc["worker"]
    assert {"name", "limit", "unit", "on_exhaust"} <= acc["budgets[*]"]


def test_example_loads():
    cfg = config.load(EXAMPLE)
    assert cfg.source == EXAMPLE
    assert cfg.account_named("eta") is not None and cfg.default_account("alice") == "eta"
    assert {b.name for b in cfg.budgets} >= {"eta-sweep"}
    eta = next(b for b in cfg.budgets if b.name == "eta-sweep")
    assert eta.account == "eta" and eta.unit == "usd" and eta.limit == 120_000_000 and eta.reserve == 0.1


def test_example_sets_every_accepted_key():
    with open(EXAMPLE, "rb") as f:
        have = example_keys(tomllib.load(f))
    missing = sorted(f"{sec}.{k}" if sec else k
                     for sec, keys in accepted_keys().items() for k in keys - have.get(sec, set()))
    assert not missing, f"config.example.toml does not document: {', '.join(missing)}"


def test_every_key_has_a_comment():
    """The first time a key is set in its section, it carries a comment on its line or just above."""
    lines = _example_text().splitlines()
    seen, undocumented, section = set(), [], ""
    for i, line in enumerate(lines):
        s = line.strip()
        if m := re.match(r"^\[\[?([^\]]+)\]\]?$", s):
            name = m.group(1)
            section = "qos.*" if name.startswith("qos.") else "accounts.*" if name.startswith("accounts.") \
                else "budgets[*]" if s.startswith("[[") else name
            continue
        if m := re.match(r"^([A-Za-z_]+)\s*=", s):
            key = (section, m.group(1))
            if key in seen:
                continue
            seen.add(key)
            above = lines[i - 1].strip() if i else ""
            if "#" not in line.split("=", 1)[1] and not above.startswith("#"):
                undocumented.append(f"{section}.{m.group(1)} (line {i + 1})")
    assert not undocumented, undocumented


def test_example_states_the_real_defaults():
    """Every value the example sets outside accounts, budgets and per-model rates is the default."""
    ex, d = config.load(EXAMPLE), config.Config()
    for f in ("redis_url", "prefix", "tick", "max_pending", "max_pending_per_user", "node_lease", "default_time",
              "kill_wait", "budget_mode", "priority", "qos", "worker", "alerts", "security"):
        assert getattr(ex, f) == getattr(d, f), f
    from dataclasses import replace
    assert replace(ex.rates, gpu_hour_by_model=(), node_hour=()) == d.rates


# -- validation: bad values in the example name their key --------------------------------------
def _mutated(old: str, new: str) -> str:
    text = _example_text()
    assert re.search(old, text, re.M), old
    return re.sub(old, new, text, count=1, flags=re.M)


BAD = [
    (r'^kill_wait = "30s"', 'kill_wait = "abc"', "scheduler.kill_wait"),
    (r'^kill_wait = "30s"', 'kill_wiat = "30s"', "scheduler.kill_wiat"),
    (r'^unit = "usd"', 'unit = "eur"', "budgets.eta-sweep.unit"),
    (r'^tick = "1s"', "tick = 0.01", "scheduler.tick"),
    (r'^budget_mode = "safe"', 'budget_mode = "yolo"', "scheduler.budget_mode"),
    (r'^max_gpus = 4', "max_gpus = -1", "accounts.eta.max_gpus"),
    (r'^reserve = 0.1', "reserve = 1.5", "budgets.eta-sweep.reserve"),
    (r'^slots = 0', 'slots = "four"', "worker.slots"),
    (r'^url = ""', 'url = "http://redis:6379"', "redis.url"),
    (r'^\[qos\.normal\]', "[qos.regular]", "qos.normal"),
    (r'^users = \["alice", "bob"\]', 'users = "alice"', "accounts.eta.users"),
]


@pytest.mark.parametrize("old,new,key", BAD, ids=[b[2] + ":" + b[1].split("=")[0].strip() for b in BAD])
def test_bad_value_names_its_key(old, new, key):
    with pytest.raises(ConfigError) as e:
        config.loads(_mutated(old, new))
    assert e.value.key == key and key in str(e.value)


def test_unknown_key_lists_the_known_ones():
    with pytest.raises(ConfigError) as e:
        config.loads(_mutated(r'^kill_wait = "30s"', 'kill_wiat = "30s"'))
    assert "unknown key" in str(e.value) and "kill_wait" in str(e.value)


# -- `labq config check` -----------------------------------------------------------------------
def _check(path):
    env = {k: v for k, v in os.environ.items() if k != "LABQ_CONFIG"}
    return subprocess.run([sys.executable, "-m", "labq.cli.main", "config", "check", str(path)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


def test_config_check_accepts_the_example():
    p = _check(EXAMPLE)
    assert p.returncode == 0, p.stderr
    assert "ok" in p.stdout and p.stderr == ""


@pytest.mark.parametrize("old,new,key", [BAD[0], BAD[2], BAD[1]], ids=["bad-duration", "bad-unit", "typo"])
def test_config_check_refuses_a_bad_file_in_one_line(old, new, key, tmp_path):
    bad = tmp_path / "labq.toml"
    bad.write_text(_mutated(old, new))
    p = _check(bad)
    assert p.returncode == 2, (p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and key in lines[0], p.stderr
    assert "Traceback" not in p.stderr + p.stdout and p.stdout == ""


def test_config_check_on_invalid_toml(tmp_path):
    bad = tmp_path / "labq.toml"
    bad.write_text(_example_text().replace("[scheduler]", "[scheduler", 1))
    p = _check(bad)
    assert p.returncode == 2 and "not valid TOML" in p.stderr and "Traceback" not in p.stderr
