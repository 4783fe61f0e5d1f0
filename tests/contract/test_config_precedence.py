"""Where the CLI's settings come from: flags > environment > config file, and $LABQ_NO_SYSTEM_CONFIG
(which the suite sets, tests/conftest.py) keeps a machine's /etc/labq/labq.toml out of everything."""
import os
import subprocess
import sys

import pytest

from labq.cli.out import config_source, url_or_default
from labq.scheduler.settings import clientcache, clientconf, config
from tests.harness import ROOT

HOSTILE = '[redis]\nurl = "{url}"\nprefix = "hostile"\n[rates]\ncurrency = "EUR"\n'


@pytest.fixture
def system_file(tmp_path, monkeypatch):
    """A hostile system config where the code looks for /etc/labq/labq.toml."""
    p = tmp_path / "labq.toml"
    p.write_text(HOSTILE.format(url="unix:///hostile/redis.sock"))
    monkeypatch.setattr(clientconf, "DEFAULT_PATH", str(p))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("LABQ_CONFIG", raising=False)
    return p


def test_the_suite_runs_with_the_switch_set():
    assert os.environ.get("LABQ_NO_SYSTEM_CONFIG") == "1"


def test_the_switch_keeps_the_system_file_out(system_file, monkeypatch):
    monkeypatch.setenv("LABQ_NO_SYSTEM_CONFIG", "1")
    s = clientcache.client_settings(*config_source(None))
    assert (s["redis_url"], s["prefix"], s["currency"]) == ("", "labq", "USD")
    assert config.load(*config_source(None)).source != str(system_file)


@pytest.mark.parametrize("value", ["", "0"])
def test_without_the_switch_the_system_file_is_read(system_file, monkeypatch, value):
    monkeypatch.setenv("LABQ_NO_SYSTEM_CONFIG", value)
    s = clientcache.client_settings(*config_source(None))
    assert (s["redis_url"], s["prefix"], s["currency"]) == ("unix:///hostile/redis.sock", "hostile", "EUR")
    assert config.load(*config_source(None)).source == str(system_file)


def test_a_named_file_is_read_with_the_switch_set(system_file, tmp_path, monkeypatch):
    mine = tmp_path / "mine.toml"
    mine.write_text('[redis]\nprefix = "mine"\n')
    monkeypatch.setenv("LABQ_NO_SYSTEM_CONFIG", "1")
    monkeypatch.setenv("LABQ_CONFIG", str(mine))
    assert clientcache.client_settings(*config_source(None))["prefix"] == "mine"
    # the flag beats the environment
    assert config_source(str(system_file))[0] == str(system_file)


def test_environment_url_beats_the_config_file(monkeypatch):
    monkeypatch.setenv("LABQ_REDIS_URL", "unix:///env/redis.sock")
    assert url_or_default("redis://db.lab:6379/0") == "unix:///env/redis.sock"
    # the same server: redis.url's login (an ACL role a job's address-only variable lacks) is kept
    monkeypatch.setenv("LABQ_REDIS_URL", "redis://db.lab:6379/0")
    assert url_or_default("redis://labq-client:pw@db.lab:6379/0") == "redis://labq-client:pw@db.lab:6379/0"
    monkeypatch.setenv("LABQ_REDIS_URL", "unix:///run/redis/redis.sock")
    assert url_or_default("unix://labq-client:pw@/run/redis/redis.sock") == "unix://labq-client:pw@/run/redis/redis.sock"
    # an environment URL with its own login is taken as given
    monkeypatch.setenv("LABQ_REDIS_URL", "redis://other:x@db.lab:6379/0")
    assert url_or_default("redis://labq-client:pw@db.lab:6379/0") == "redis://other:x@db.lab:6379/0"
    monkeypatch.delenv("LABQ_REDIS_URL")
    assert url_or_default("redis://db.lab:6379/0") == "redis://db.lab:6379/0"


@pytest.mark.parametrize("fast", ["1", "0"])
def test_cli_environment_beats_config_and_flag_beats_environment(redis_server, tmp_path, fast):
    """A config naming a live Redis, $LABQ_REDIS_URL naming none: the environment wins (exit 4)."""
    live = tmp_path / "live.toml"
    live.write_text(HOSTILE.format(url=redis_server.url))
    env = dict(os.environ, PYTHONPATH=ROOT, LABQ_FAST=fast, XDG_CACHE_HOME=str(tmp_path / "cache"),
               LABQ_CONFIG=str(tmp_path / "missing.toml"))

    def labq(*args, **over):
        return subprocess.run([sys.executable, "-m", "labq.cli.main", *args], env={**env, **over}, cwd=ROOT,
                              capture_output=True, text=True, timeout=60)
    p = labq("--config", str(live), "stat", LABQ_REDIS_URL="unix:///nonexistent/labq.sock")
    assert p.returncode == 4 and "nonexistent" in p.stderr and "Traceback" not in p.stderr, p.stderr
    env.pop("LABQ_REDIS_URL", None)
    p = labq("--config", str(live), "stat")     # --config beats $LABQ_CONFIG (a missing file)
    assert p.returncode == 0, p.stderr
    p = labq("stat")
    assert p.returncode == 2 and "missing.toml" in p.stderr, p.stderr
