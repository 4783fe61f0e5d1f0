"""Alert rules (pure) and their delivery: alerts.command with LABQ_ALERT_* and a timeout, the webhook
POSTed to a local http.server; a failing or hanging hook never raises into the scheduler."""
import http.server
import json
import threading

from labq.scheduler.daemon.hooks import Hooks, alert_env
from labq.scheduler.money import alerts
from labq.scheduler.money.alerts import Status
from labq.scheduler.money.ledger import Override

M = 1_000_000


def st(spent=0, accrued=0, committed=0, limit=100 * M, period="2026-11", warn=(0.7, 0.9)):
    return Status("b", "usd", period, limit, spent, accrued, committed, warn)


def kinds(got):
    return [(a.kind, a.data.get("threshold")) for a in got]


def test_each_threshold_fires_once_per_budget_and_period():
    assert alerts.evaluate([st(spent=69 * M)], set(), 0, "USD") == []
    got = alerts.evaluate([st(spent=60 * M, accrued=10 * M)], set(), 5, "USD")
    assert kinds(got) == [("warn", 0.7)] and got[0].key == "b|2026-11|warn:0.7" and got[0].ts == 5
    fired = {a.key for a in got}
    assert alerts.evaluate([st(spent=71 * M)], fired, 6, "USD") == []
    # A jump past both levels and the limit raises every one not yet raised, in order.
    got = alerts.evaluate([st(spent=95 * M, accrued=6 * M)], fired, 7, "USD")
    assert kinds(got) == [("warn", 0.9), ("exhausted", None)] and got[1].level == "critical"
    fired |= {a.key for a in got}
    assert alerts.evaluate([st(spent=200 * M)], fired, 8, "USD") == []
    # The next period starts again.
    assert kinds(alerts.evaluate([st(spent=75 * M, period="2026-12")], fired, 9, "USD")) == [("warn", 0.7)]


def test_forecast_alert_before_exhaustion_only():
    got = alerts.evaluate([st(spent=10 * M, committed=95 * M, warn=())], set(), 0, "USD")
    assert kinds(got) == [("forecast", None)] and "$105.00" in got[0].message
    assert kinds(alerts.evaluate([st(spent=100 * M, committed=5 * M, warn=())], set(), 0, "USD")) == [("exhausted", None)]
    assert alerts.evaluate([st(limit=0, warn=())], set(), 0, "USD") == []      # an empty zero budget is not news


def test_stream_fields_and_override_alerts():
    a = alerts.evaluate([st(spent=80 * M)], set(), 3, "USD")[0]
    f = a.fields()
    assert set(f) == {"kind", "scope", "level", "message", "ts", "key", "data"} and f["scope"] == "budget:b"
    assert json.loads(f["data"])["spent"] == 80.0
    o = Override(3, "b", 20 * M, "pi", "deadline", "root", 100.0, 200.0)
    for kind in ("override", "override_expired", "override_revoked"):
        x = alerts.override_alert(o, kind, 150.0, "usd", "root", currency="USD")
        assert x.key == f"override:3:{kind}" and x.level == "info" and "$20.00" in x.message


def test_agent_alert_events():
    a = alerts.from_event("1-0", "n1", {"kind": "idle_gpu", "level": "warn", "message": "idle", "data": {"g": 1}}, 9)
    assert (a.key, a.kind, a.scope, a.data) == ("event:1-0", "idle_gpu", "node:n1", {"g": 1, "node": "n1"})
    assert alerts.from_event("1-1", "n1", {"kind": "x", "level": "bogus", "message": "m", "scope": "job:4"}, 9).level == "warn"
    assert alerts.from_event("1-2", "n1", {"message": "no kind"}, 9) is None
    assert alerts.from_event("1-3", "n1", {"kind": "gpu_lost", "level": "error", "message": "m"}, 9).level == "error"


class _Recorder(http.server.BaseHTTPRequestHandler):
    got: list = []

    def do_POST(self):
        n = int(self.headers["Content-Length"])
        _Recorder.got.append((self.headers["Content-Type"], json.loads(self.rfile.read(n))))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_webhook_and_command_get_the_alert(tmp_path):
    server = http.server.HTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    out = tmp_path / "env.txt"
    try:
        h = Hooks({"command": f"env | grep ^LABQ_ALERT_ | sort > {out}",
                   "webhook": f"http://127.0.0.1:{server.server_port}/hook", "timeout": 10})
        a = alerts.evaluate([st(spent=75 * M)], set(), 1234.5, "USD")[0].fields()
        h.deliver(a)
        h.join()
    finally:
        server.shutdown()
    ctype, body = _Recorder.got[-1]
    assert ctype == "application/json" and body["kind"] == "warn" and body["data"]["threshold"] == 0.7
    env = dict(line.split("=", 1) for line in out.read_text().splitlines())
    assert env["LABQ_ALERT_KIND"] == "warn" and env["LABQ_ALERT_BUDGET"] == "b"
    assert env["LABQ_ALERT_PERIOD"] == "2026-11" and env["LABQ_ALERT_LEVEL"] == "warn"
    assert json.loads(env["LABQ_ALERT_DATA"])["spent"] == 75.0 and env == alert_env(a) | {}


def test_a_failing_or_hanging_hook_is_logged_never_raised(tmp_path, caplog):
    h = Hooks({"command": "sleep 30", "webhook": "http://127.0.0.1:9/nothing-listens", "timeout": 1})
    h.deliver({"kind": "warn", "scope": "budget:b", "level": "warn", "message": "m", "ts": 1, "key": "k", "data": "{}"})
    h.join(20)
    assert not h.threads
    text = caplog.text
    assert "alerts.command ran over 1s" in text and "post failed" in text
    h = Hooks({"command": "exit 3", "webhook": "", "timeout": 5})
    h.deliver({"kind": "warn", "key": "k2", "data": "{}"})
    h.join()
    assert "exited 3" in caplog.text
