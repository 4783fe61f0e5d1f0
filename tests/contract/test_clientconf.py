"""The client's settings (scheduler/settings/clientconf.py): the same values and errors as config.py for the
[redis] and [security] tables, and kept in the user's cache while the file is unchanged, so that the
hot commands need not import tomllib."""
import os
import subprocess
import sys

import pytest

from labq.scheduler.errors import ConfigError
from labq.scheduler.settings import clientcache, clientconf, config
from tests.harness import ROOT

GOOD = '[redis]\nurl = "unix:///tmp/x.sock"\nprefix = "lab"\n[security]\nadmins = ["ann"]\ncredential_ttl = "2m"\n'


@pytest.fixture(autouse=True)
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _settings_of(cfg):
    return {"redis_url": cfg.redis_url, "prefix": cfg.prefix, "redis_password_file": cfg.redis_password_file,
            "security": dict(cfg.security)}


def test_same_values_as_the_full_config_fresh_and_cached(tmp_path):
    p = tmp_path / "labq.toml"
    p.write_text(GOOD)
    want = _settings_of(config.load(str(p)))
    want["security"]["admins"] = list(want["security"]["admins"])
    want["history_url"], want["currency"] = "", "USD"
    fresh = clientcache.client_settings(str(p))
    cached = clientcache.client_settings(str(p))
    for got in (fresh, cached):
        got["security"]["admins"] = list(got["security"]["admins"])
        assert {k: got[k] for k in want} == want
    assert cached == fresh


def test_a_changed_file_is_read_again(tmp_path):
    p = tmp_path / "labq.toml"
    p.write_text(GOOD)
    assert clientcache.client_settings(str(p))["prefix"] == "lab"
    st = p.stat()
    p.write_text(GOOD.replace('"lab"', '"lbq"'))
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 1))     # even within the clock's resolution
    assert clientcache.client_settings(str(p))["prefix"] == "lbq"


@pytest.mark.parametrize("text,key", [('[redis]\nurl = "http://x"\n', "redis.url"), ("[redis]\nbogus = 1\n", "redis.bogus"),
                                      ('[security]\nauth = "kerberos"\n', "security.auth"),
                                      ("[security]\nacl = true\n", "security.acl"), ("[redis\n", "not valid TOML")])
def test_bad_values_are_refused_like_the_full_config(tmp_path, text, key):
    p = tmp_path / "labq.toml"
    p.write_text(text)
    for load in (config.load, clientcache.client_settings, clientcache.client_settings):   # and not cached
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            load(str(p))


def test_a_cached_config_spares_the_toml_parser(tmp_path, cache_home):
    p = tmp_path / "labq.toml"
    p.write_text(GOOD)
    env = dict(os.environ, XDG_CACHE_HOME=str(cache_home), PYTHONPATH=ROOT)
    argv = [sys.executable, "-X", "importtime", "-m", "labq", "--config", str(p), "stat"]
    first = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    second = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert first.returncode == second.returncode == 4, second.stderr[-300:]
    assert "| tomllib" in first.stderr and "| tomllib" not in second.stderr


def test_the_currency_comes_from_the_cache_too(tmp_path):
    """The thin commands print money in the settings' currency (ThinClient.currency): read from the
    file, then from the cache. (It set a process-wide currency before issue 40.)"""
    from labq.scheduler import units
    p = tmp_path / "labq.toml"
    p.write_text(GOOD + '[rates]\ncurrency = "EUR"\n')
    for _ in range(2):              # parsed, then cached
        currency = clientcache.client_settings(str(p))["currency"]
        assert units.fmt_money(2_000_000, currency=currency).startswith("€")


BOOKS = GOOD + '[rates]\ncurrency = "EUR"\nnode_hour = {n1 = 3.5}\n[[budgets]]\nname = "b"\nlimit = 5.0\nperiod = "month"\n'


def test_the_books_are_the_full_configs_and_kept_once_it_accepted_the_file(tmp_path):
    """clientcache.books (`labq budget`, `labq report`): the budgets, currency and node prices of
    config.load, which is called again only when the file changed; a file it refuses is never kept."""
    p = tmp_path / "labq.toml"
    p.write_text(BOOKS)
    loads = []

    def full(path):
        loads.append(path)
        return config.load(path, system=False)
    first = clientcache.books(str(p), False, full)
    assert first == clientconf.books_of(config.load(str(p)))
    assert (first["currency"], first["node_hour"], first["source"]) == ("EUR", {"n1": 3.5}, str(p))
    assert [(b["name"], b["limit"], b["period"]) for b in first["budgets"]] == [("b", 5_000_000, "month")]
    assert clientcache.books(str(p), False, full) == first and len(loads) == 1
    assert clientcache.client_settings(str(p))["prefix"] == "lab"      # the settings beside them still read
    assert clientcache.books(str(p), False, full) == first and len(loads) == 1
    p.write_text(BOOKS.replace("limit = 5.0", "limit = 7.0"))
    assert clientcache.books(str(p), False, full)["budgets"][0]["limit"] == 7_000_000 and len(loads) == 2
    p.write_text(BOOKS + "[scheduler]\nbogus = 1\n")
    for _ in range(2):
        with pytest.raises(ConfigError, match="bogus"):
            clientcache.books(str(p), False, full)
    assert len(loads) == 4
    assert clientcache.books(None, False, full) == clientconf.books_of(config.load(None, system=False))
