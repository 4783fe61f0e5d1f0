"""Config validation: every error names its key; nothing half-loaded."""
import pytest

from labq.scheduler.errors import ConfigError
from labq.scheduler.settings import config


@pytest.mark.parametrize("text,key", [
    ("[scheduler]\nkill_wiat = 3\n", "scheduler.kill_wiat"),
    ("[scheduler]\nkill_wait = 'soon'\n", "scheduler.kill_wait"),
    ("[scheduler]\nbudget_mode = 'yolo'\n", "scheduler.budget_mode"),
    ("[scheduler]\nmax_pending = 0\n", "scheduler.max_pending"),
    ("[[budgets]]\nname='b'\nlimit=1\nunit='eur'\n", "budgets.b.unit"),
    ("[[budgets]]\nname='b'\n", "budgets.b.limit"),
    ("[[budgets]]\nlimit=3\n", "budgets[0].name"),
    ("[[budgets]]\nname='b'\nlimit=1\nreserve=1.5\n", "budgets.b.reserve"),
    ("[accounts.eta]\nmax_gpus = -1\n", "accounts.eta.max_gpus"),
    ("[worker]\nmem = 'big'\n", "worker.mem"),
    ("[worker]\ngpus = 'many'\n", "worker.gpus"),
    ("[redis]\nurl = 'http://x'\n", "redis.url"),
    ("[qos.low]\npriority = 1\n", "qos.normal"),
    ("[rates]\ngpu_hour = 'cheap'\n", "rates.gpu_hour"),
    ("nonsense = 1\n", ".nonsense"),
])
def test_errors_name_the_key(text, key):
    with pytest.raises(ConfigError) as e:
        config.loads(text)
    assert key in str(e.value)


def test_defaults_and_accounts():
    c = config.loads("[accounts.eta]\nusers = ['alice', 'bob']\n[accounts.phi]\nusers = ['bob']\n")
    assert c.default_account("bob") == "eta" and c.default_account("carol") == "default"
    assert c.kill_wait == 30 and c.default_time == 86400 and c.qos_named("normal").priority == 100


def test_invalid_toml_is_a_config_error(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text("[scheduler\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        config.load(str(p))
