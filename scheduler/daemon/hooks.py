"""Delivering alerts beyond the stream: the log, `alerts.command` and `alerts.webhook`.

The stream entry is the record (written with the state change that raised it); these deliveries
run after that transaction, each in a daemon thread with a timeout, so a slow or failing hook never
delays or stops the scheduler. A delivery lost to a crash between the two is not retried: the
alert is in the stream (`labq alerts`) either way.
"""
import json
import logging
import os
import signal
import subprocess
import threading
import urllib.request
from collections.abc import Mapping
from typing import Any

log = logging.getLogger("labq.alerts")
MAX_IN_FLIGHT = 16          # beyond this many deliveries still running, new ones are dropped (logged)
_LOG_LEVEL = {"info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR, "critical": logging.ERROR}
_KEEP_ENV = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ")


def alert_env(alert: dict) -> dict:
    """LABQ_ALERT_* for the alert command: the stream fields, plus BUDGET and PERIOD where the data has them."""
    env = {f"LABQ_ALERT_{k.upper()}": str(alert.get(k, "")) for k in ("kind", "scope", "level", "message", "ts", "key")}
    env["LABQ_ALERT_DATA"] = alert.get("data") if isinstance(alert.get("data"), str) else json.dumps(alert.get("data") or {})
    data = _data(alert)
    for k in ("budget", "period"):
        if k in data:
            env[f"LABQ_ALERT_{k.upper()}"] = str(data[k])
    return env


def _data(alert: dict) -> dict:
    d = alert.get("data")
    if isinstance(d, str):
        try:
            d = json.loads(d)
        except ValueError:
            return {}
    return d if isinstance(d, dict) else {}


class Hooks:
    def __init__(self, settings: Mapping[str, Any]):
        self.command = settings.get("command") or ""
        self.webhook = settings.get("webhook") or ""
        self.timeout = float(settings.get("timeout") or 10)
        self._slots = threading.BoundedSemaphore(MAX_IN_FLIGHT)
        self.threads: list[threading.Thread] = []     # the deliveries started, so tests can join them

    def deliver(self, alert: dict) -> None:
        level = _LOG_LEVEL.get(alert.get("level"), logging.WARNING)
        log.log(level, "alert %s %s: %s", alert.get("kind"), alert.get("scope"), alert.get("message"))
        if self.command:
            self._spawn(self._run_command, alert)
        if self.webhook:
            self._spawn(self._post, alert)

    def join(self, timeout: float = 30.0) -> None:
        for t in self.threads:
            t.join(timeout)
        self.threads = [t for t in self.threads if t.is_alive()]

    def _spawn(self, fn, alert: dict) -> None:
        if not self._slots.acquire(blocking=False):
            log.warning("alert %s: %d deliveries still running; not delivered to %s", alert.get("key"),
                        MAX_IN_FLIGHT, fn.__name__.strip("_"))
            return
        self.threads = [t for t in self.threads if t.is_alive()]
        t = threading.Thread(target=self._guarded, args=(fn, alert), name="labq-alert", daemon=True)
        self.threads.append(t)
        t.start()

    def _guarded(self, fn, alert: dict) -> None:
        try:
            fn(alert)
        except Exception as e:   # a hook's failure is logged, never raised into the scheduler
            log.warning("alert %s: %s failed: %s", alert.get("key"), fn.__name__.strip("_"), e)
        finally:
            self._slots.release()

    def _run_command(self, alert: dict) -> None:
        env = {k: os.environ[k] for k in _KEEP_ENV if k in os.environ}
        env.update(alert_env(alert))
        p = subprocess.Popen(["/bin/sh", "-c", self.command], env=env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        try:
            _, err = p.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)     # its own session: the shell and whatever it started
            p.wait()
            raise TimeoutError(f"alerts.command ran over {self.timeout:g}s; killed") from None
        if p.returncode:
            raise RuntimeError(f"alerts.command exited {p.returncode}: {err.decode(errors='replace').strip()[:200]}")

    def _post(self, alert: dict) -> None:
        body = json.dumps({**alert, "data": _data(alert)}, separators=(",", ":")).encode()
        req = urllib.request.Request(self.webhook, data=body, method="POST",
                                     headers={"Content-Type": "application/json", "User-Agent": "labq"})
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:
            resp.read(1024)
