"""redis.sentinels / redis.service / redis.sentinel_auth / redis.min_replicas_ack: validated like the
other keys (one line naming the key), the same for the daemons (config.py) and the thin client
(clientconf.py), and turned into the one sentinel:// URL every process is handed."""
import pytest

from labq.scheduler.errors import ConfigError
from labq.scheduler.settings import clientconf, config
from labq.scheduler.store import resp, sentinel

THREE = '["10.0.0.1:26379", "10.0.0.2:26379", "r3.lab:26380"]'


def both(text: str):
    """The daemons' config and the thin client's settings of the same text."""
    import tomllib
    return config.loads(text), clientconf._settings(tomllib.loads(text))


def test_sentinels_become_one_url_with_the_ack_default_of_one():
    cfg, thin = both(f'[redis]\nsentinels = {THREE}\nservice = "labq-main"\n')
    url = "sentinel://10.0.0.1:26379,10.0.0.2:26379,r3.lab:26380/labq-main?ack=1"
    assert cfg.redis_url == thin["redis_url"] == url
    assert cfg.min_replicas_ack == thin["min_replicas_ack"] == 1
    o = resp.url_parts(url)
    assert o["sentinels"] == [("10.0.0.1", 26379), ("10.0.0.2", 26379), ("r3.lab", 26380)]
    assert (o["service"], o["ack"], o["sentinel_auth"]) == ("labq-main", 1, False)


def test_without_sentinels_nothing_changes():
    cfg, thin = both('[redis]\nurl = "redis://h:6379/0"\n')
    assert cfg.redis_url == thin["redis_url"] == "redis://h:6379/0"
    assert cfg.min_replicas_ack == 0
    assert config.loads("").redis_url == "" and config.loads("").min_replicas_ack == 0


def test_explicit_ack_and_sentinel_auth():
    cfg, _ = both(f'[redis]\nsentinels = {THREE}\nmin_replicas_ack = 2\nsentinel_auth = true\n')
    assert cfg.redis_url.endswith("/labq?ack=2&sentinel_auth=1") and cfg.min_replicas_ack == 2
    assert sentinel.parse(cfg.redis_url)["sentinel_auth"] is True
    cfg, _ = both('[redis]\nurl = "unix:///r.sock"\nmin_replicas_ack = 1\n')   # a replica without Sentinel
    assert cfg.min_replicas_ack == 1


@pytest.mark.parametrize("table,key,says", [
    ('sentinels = "h:26379"', "redis.sentinels", "list"),
    ('sentinels = ["h"]', "redis.sentinels", "host:port"),
    ('sentinels = ["h:0"]', "redis.sentinels", "host:port"),
    ('sentinels = ["h:26379"]\nurl = "redis://h:6379"', "redis.url", "not both"),
    ('sentinels = ["h:26379"]\nservice = "a b"', "redis.service", "master's name"),
    ('sentinels = ["h:26379"]\nmin_replicas_ack = -1', "redis.min_replicas_ack", "0 to 16"),
    ('min_replicas_ack = "one"', "redis.min_replicas_ack", "auto"),
    ('sentinel_auth = "yes"', "redis.sentinel_auth", "true or false"),
    ('sentinel = ["h:26379"]', "redis.sentinel", "unknown key"),
])
def test_bad_values_name_their_key_in_one_line(table, key, says):
    import tomllib
    for load in (config.loads, lambda t: clientconf._settings(tomllib.loads(t))):
        with pytest.raises(ConfigError) as e:
            load(f"[redis]\n{table}\n")
        assert e.value.key == key and says in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_a_jobs_url_keeps_the_sentinels_and_drops_the_login():
    from labq.worker.launch import public_url
    url = "sentinel://lab-sched:s3cret@h1:26379,h2:26379/labq?ack=1"
    assert public_url(url) == "sentinel://h1:26379,h2:26379/labq?ack=1"
    o = sentinel.parse(url)
    assert (o["username"], o["password"]) == ("lab-sched", "s3cret")
