"""Issue 34, the CLI's part: `labq admin dead` is for admins and shows what a dead letter held as
sizes, never values (also letters written before the scheduler redacted them); four inputs that
gave tracebacks (`ledger import` of a file that is not UTF-8 or not CSV, `admin dead -n 10^20`, `alerts -n
10^20`, `config check` of a TOML nested 5,000 deep) give one line and exit 2. The CLI as a user
runs it, on the real redis-server fixture."""
import json
import os
import subprocess
import sys
import time

import pytest

from labq.scheduler.client import current_user
from labq.scheduler.errors import ConfigError
from labq.scheduler.settings import config
from labq.scheduler.store.keys import Keys
from tests.harness import ROOT

pytestmark = pytest.mark.redis
K = Keys()
SECRET = "hunter2-db-password"


@pytest.fixture
def cli(redis_server, tmp_path):
    redis_server.client().flushall()

    def labq(*args, admins=(current_user(),)):
        cfg = tmp_path / "labq.toml"
        cfg.write_text(f"[security]\nadmins = {json.dumps(list(admins))}\n")
        return subprocess.run([sys.executable, "-m", "labq.cli.main", "--config", str(cfg), *args], cwd=ROOT,
                              env={**os.environ, "LABQ_REDIS_URL": redis_server.url, "PYTHONPATH": ROOT},
                              capture_output=True, text=True, timeout=120)
    labq.r = redis_server.client()
    return labq


def one_line(p, code: int) -> str:
    err = p.stderr.strip()
    assert p.returncode == code, (p.returncode, p.stdout, p.stderr)
    assert err and "\n" not in err and "Traceback" not in err, err
    return err


def test_admin_dead_is_for_admins_and_shows_sizes_not_values(cli):
    body = json.dumps({"script": f"export DB_PASSWORD={SECRET}\n", "argv": []})
    # As an older scheduler wrote it: the whole entry, credential and body included.
    cli.r.xadd(K.dead, {"source": K.taken, "id": "1-1", "reason": "body: not a submit", "ts": time.time(),
                        "entry": json.dumps({"rid": "r-bob", "op": "submit", "body": body, "cred": f"MUNGE:{SECRET}"})})
    cli.r.xadd(K.dead, {"source": K.events, "id": "2-1", "reason": "not UTF-8", "ts": time.time(),
                        "entry": json.dumps({"kind": "finished", "body": "<4096 bytes>"})})
    cli.r.xadd(K.dead, {"source": K.events, "id": "3-1", "reason": "junk", "ts": time.time(), "entry": SECRET})
    text = cli("admin", "dead")
    assert text.returncode == 0, text.stderr
    assert SECRET not in text.stdout and "r-bob" in text.stdout and "not a submit" in text.stdout
    assert f'"body": "<{len(body)} bytes>"' in text.stdout and "<4096 bytes>" in text.stdout
    rows = json.loads(cli("admin", "dead", "--json").stdout)
    assert SECRET not in json.dumps(rows) and [r["id"] for r in rows] == ["1-1", "2-1", "3-1"]
    assert json.loads(rows[0]["entry"]) == {"rid": "r-bob", "op": "submit", "body": f"<{len(body)} bytes>",
                                            "cred": f"<{len('MUNGE:' + SECRET)} bytes>"}
    assert rows[2]["entry"] == f"<{len(SECRET)} bytes>"
    refused = one_line(cli("admin", "dead", admins=["someone-else"]), 3)
    assert "labq admin dead is for admins (security.admins: someone-else)" in refused


@pytest.mark.parametrize("args", [("admin", "dead", "-n", str(10 ** 20)), ("alerts", "-n", str(10 ** 20)),
                                  ("admin", "dead", "-n", "0"), ("alerts", "-n", "-5")])
def test_a_count_out_of_range_is_one_line(cli, args):
    assert "-n/--count: expected a count from 1 to 100,000" in one_line(cli(*args), 2)


def test_a_bill_that_is_not_utf8_csv_is_one_line(cli, tmp_path):
    latin = tmp_path / "bill-latin1.csv"
    latin.write_bytes("date,account,amount\n2026-11-01,équipe,12.50\n".encode("latin-1"))
    assert "not UTF-8 text (byte 31)" in one_line(cli("ledger", "import", str(latin)), 2)
    huge = tmp_path / "bill-huge-field.csv"
    huge.write_text('date,account,amount\n2026-11-01,"' + "x" * 200_000 + '",1\n')
    assert "not a CSV file of date, account or tag, amount: field larger than field limit" in \
        one_line(cli("ledger", "import", str(huge)), 2)


def test_a_config_nested_5000_deep_is_one_line(cli, tmp_path):
    for name, text in (("arrays", "a = " + "[" * 5000 + "]" * 5000), ("tables", "a = " + "{b = " * 5000 + "1" + "}" * 5000)):
        deep = tmp_path / f"deep-{name}.toml"
        deep.write_text(text + "\n")
        assert "nested too deeply" in one_line(cli("config", "check", str(deep)), 2)
        with pytest.raises(ConfigError, match="nested too deeply"):
            config.loads(text)
