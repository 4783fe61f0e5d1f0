"""The systemd units in systemd/ pass `systemd-analyze verify` with no output at all.

systemd: a bad value or unknown key only prints "…, ignoring" on stderr with exit code 0,
so the check fails on ANY output, not just on a non-zero exit. verify also needs ExecStart's binary
to exist and be executable on this machine, so each unit is copied to a temporary directory with
/usr/local/bin/labq replaced by the real `labq` (or `python -m labq.cli.main` when labq is not installed
as a console script).

Environment noise: in the development container (systemd 252, no systemd as PID 1, no D-Bus)
verify prints nothing for these units, so no output is filtered. Restricting the unit search path
(SYSTEMD_UNIT_PATH) to avoid a host's own broken units is not an option: verify then fails with
"Unit sysinit.target not found".

Both units are Type=notify with a watchdog; the last test checks that the daemons really send
READY=1, WATCHDOG=1 and STOPPING=1 from their main PID (a notify unit whose daemon never says
READY would be killed after TimeoutStartSec).
"""
import configparser
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

import pytest

from tests.harness import ROOT

UNITS = ("labq-scheduler.service", "labq-worker.service")
INSTALLED = "/usr/local/bin/labq"


def _analyze() -> str:
    exe = shutil.which("systemd-analyze")
    if not exe:
        (pytest.fail if os.environ.get("CI") else pytest.skip)(
            "systemd-analyze is not installed (apt-get install systemd); CI must have it")
    return exe


def _labq_command() -> str:
    """What replaces /usr/local/bin/labq: an executable that exists here."""
    for cand in (shutil.which("labq"), os.path.join(os.path.dirname(sys.executable), "labq"),
                 os.path.join(ROOT, ".venv", "bin", "labq")):
        if cand and os.access(cand, os.X_OK):
            return cand
    return f"{sys.executable} -m labq.cli.main"


def _unit_text(name: str) -> str:
    with open(os.path.join(ROOT, "systemd", name)) as f:
        return f.read()


def _verify(text: str, name: str, tmp_path) -> tuple[int, str]:
    path = tmp_path / name
    path.write_text(text.replace(INSTALLED, _labq_command()))
    p = subprocess.run([_analyze(), "verify", "--man=no", str(path)], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, SYSTEMD_PAGER="", SYSTEMD_COLORS="0"))
    return p.returncode, (p.stdout + p.stderr).strip()


def _service(name: str) -> dict[str, list[str]]:
    """[Service] key -> values (a key may repeat), parsed strictly."""
    out: dict[str, list[str]] = {}
    section = None
    for line in _unit_text(name).splitlines():
        s = line.strip()
        if not s or s.startswith(("#", ";")):
            continue
        if s.startswith("["):
            section = s
            continue
        k, _, v = s.partition("=")
        if section == "[Service]":
            out.setdefault(k, []).append(v)
    return out


@pytest.mark.parametrize("name", UNITS)
def test_unit_verifies_without_any_output(name, tmp_path):
    rc, out = _verify(_unit_text(name), name, tmp_path)
    assert rc == 0 and out == "", f"systemd-analyze verify {name}: exit {rc}\n{out}"


def test_the_check_catches_a_bad_value_that_exits_0(tmp_path):
    """The trap itself: KillMode=bogus is only a warning with exit 0; the output check must see it."""
    bad = _unit_text("labq-worker.service").replace("KillMode=mixed", "KillMode=bogus")
    rc, out = _verify(bad, "labq-worker.service", tmp_path)
    assert rc == 0 and "bogus" in out


def test_a_missing_binary_fails(tmp_path):
    bad = _unit_text("labq-worker.service").replace(INSTALLED, "/nonexistent/labq", 1)
    _analyze()
    path = tmp_path / "labq-worker.service"
    path.write_text(bad)
    p = subprocess.run([_analyze(), "verify", "--man=no", str(path)], capture_output=True, text=True, timeout=120)
    assert p.returncode != 0


@pytest.mark.parametrize("name", UNITS)
def test_comments_are_on_their_own_lines(name):
    """systemd does not strip a trailing `# …` from a value: it would become part of it."""
    for n, line in enumerate(_unit_text(name).splitlines(), 1):
        if "=" in line and not line.lstrip().startswith(("#", ";")):
            assert not re.search(r"\s[#;]", line), f"{name}:{n}: inline comment in {line!r}"


@pytest.mark.parametrize("name,sub", [("labq-scheduler.service", "scheduler"), ("labq-worker.service", "worker")])
def test_execstart_puts_the_group_option_before_the_subcommand(name, sub):
    (cmd,) = _service(name)["ExecStart"]
    assert cmd == f"{INSTALLED} --config /etc/labq/labq.toml {sub}"
    # The CLI accepts exactly this order (the group's --config, then the command).
    p = subprocess.run([sys.executable, "-m", "labq.cli.main", "--config", "/nonexistent.toml", sub, "--help"],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr


def _seconds(v: str) -> int:
    m = re.fullmatch(r"(\d+)(s|min)", v)
    assert m, f"expected a duration like 60s or 2min, got {v!r}"
    return int(m.group(1)) * (60 if m.group(2) == "min" else 1)


# The daemons' Redis calls may block up to this long (scheduler/store/conn.py socket_timeout):
# a watchdog shorter than that would kill a healthy daemon waiting on a slow Redis.
REDIS_SOCKET_TIMEOUT = 30


@pytest.mark.parametrize("name", UNITS)
def test_notify_and_watchdog(name):
    s = _service(name)
    assert s["Type"] == ["notify"] and s["NotifyAccess"] == ["main"]   # see test_daemons_send_ready…
    assert _seconds(s["WatchdogSec"][0]) > REDIS_SOCKET_TIMEOUT
    assert s["Restart"] == ["on-failure"] and "2" in s["RestartPreventExitStatus"][0].split()


def test_worker_unit_signal_and_cgroup_semantics():
    s = _service("labq-worker.service")
    assert s["KillMode"] == ["mixed"]       # SIGTERM to the agent only, SIGKILL to the rest after
    assert s["Delegate"] == ["yes"]
    assert s["OOMPolicy"] == ["continue"]
    assert _seconds(s["TimeoutStopSec"][0]) >= 300, "must exceed QoS grace + kill_wait"
    # Options that break jobs must not appear in the worker unit.
    for bad in ("PrivateDevices", "ProtectHome", "PrivateTmp", "MemoryDenyWriteExecute", "SystemCallFilter",
                "RestrictNamespaces", "RestrictAddressFamilies", "ProtectControlGroups", "DevicePolicy"):
        assert bad not in s, bad
    assert s["ProtectSystem"] == ["full"]


def test_scheduler_unit_is_unprivileged():
    s = _service("labq-scheduler.service")
    assert s["User"] == ["labq"] and s["NoNewPrivileges"] == ["yes"] and s["CapabilityBoundingSet"] == [""]


@pytest.mark.parametrize("name", UNITS)
def test_unit_parses_as_ini_with_install_section(name):
    cp = configparser.ConfigParser(strict=False, interpolation=None)
    cp.optionxform = str
    cp.read_string(_unit_text(name))
    assert cp.get("Install", "WantedBy") == "multi-user.target"


# -- Type=notify is only right if the daemons really notify ------------------------------------
DAEMON_CONFIG = """
[redis]
url = "{url}"
prefix = "{prefix}"
[scheduler]
tick = 0.2
[worker]
name = "sdnotify-node"
gpus = 0
cpus = 2
mem = "1G"
slots = 1
spool = "{spool}"
run_as = "self"
"""


def _recv(sock, timeout: float):
    """(message, sender pid) of the next datagram; the pid from SCM_CREDENTIALS, as systemd sees it."""
    sock.settimeout(timeout)
    data, anc, _, _ = sock.recvmsg(4096, socket.CMSG_SPACE(struct.calcsize("3i")))
    pid = next((struct.unpack("3i", d[:12])[0] for lvl, typ, d in anc
                if lvl == socket.SOL_SOCKET and typ == socket.SCM_CREDENTIALS), None)
    return data.decode(), pid


@pytest.mark.redis
@pytest.mark.parametrize("sub", ["scheduler", "worker"])
def test_daemons_send_ready_watchdog_and_stopping_from_the_main_pid(sub, redis_server, tmp_path):
    """What Type=notify + NotifyAccess=main + WatchdogSec rely on: READY=1, then WATCHDOG=1 pings,
    then STOPPING=1 on SIGTERM, all from the main process (messages from other PIDs are dropped)."""
    d = tempfile.mkdtemp(prefix="labq-sd-", dir="/tmp")     # a unix socket path must stay short
    try:
        path = os.path.join(d, "notify.sock")
        cfg = tmp_path / "labq.toml"
        cfg.write_text(DAEMON_CONFIG.format(url=redis_server.url, prefix=f"sd{os.getpid()}{sub[0]}",
                                            spool=tmp_path / "spool"))
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as srv:
            srv.bind(path)
            srv.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            env = {k: v for k, v in os.environ.items() if not k.startswith(("LABQ_", "WATCHDOG_"))}
            env.update(NOTIFY_SOCKET=path, WATCHDOG_USEC="20000000", PYTHONPATH=ROOT)
            p = subprocess.Popen([sys.executable, "-m", "labq.cli.main", "--config", str(cfg), sub], cwd=ROOT, env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            try:
                seen, pids = [], set()
                end = time.monotonic() + 60
                while not (any(m.startswith("READY=1") for m in seen)
                           and sum("WATCHDOG=1" in m for m in seen) >= 2):
                    assert time.monotonic() < end and p.poll() is None, (seen, p.poll())
                    msg, pid = _recv(srv, 60)
                    seen.append(msg)
                    pids.add(pid)
                assert seen[0].startswith("READY=1"), seen      # nothing counts before READY
                p.send_signal(signal.SIGTERM)
                while not any("STOPPING=1" in m for m in seen):
                    msg, pid = _recv(srv, 60)
                    seen.append(msg)
                    pids.add(pid)
                assert p.wait(60) == 0, p.stderr.read()
                assert pids == {p.pid}, f"notifications from {pids}, main pid {p.pid}"
            finally:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    finally:
        shutil.rmtree(d, ignore_errors=True)
