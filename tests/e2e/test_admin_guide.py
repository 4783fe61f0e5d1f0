"""docs/admin.md is run, not just read: every `sh docs-check` block runs in a scratch directory
(the guide's system paths moved there) against a real Redis, scheduler and worker started from the
labq the guide installed; the other shell blocks may only use system tools (apt-get, systemctl,
useradd) — so every labq command the guide shows is exercised here."""
import os
import pathlib
import re
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile

import pytest

from tests.harness import ROOT, wait_for

GUIDE = pathlib.Path(ROOT) / "docs" / "admin.md"
SYSTEM_TOOLS = {"apt-get", "systemctl", "useradd", "sqlite3"}
pytestmark = [pytest.mark.e2e, pytest.mark.skipif(os.geteuid() != 0, reason="make install-system runs as root")]


def blocks(text: str) -> list[tuple[str, str]]:
    return [(m.group(1).strip(), m.group(2)) for m in re.finditer(r"^```([^\n]*)\n(.*?)^```", text, re.M | re.S)]


def test_unchecked_blocks_use_only_system_tools():
    for info, body in blocks(GUIDE.read_text()):
        if info.split()[:1] == ["sh"] and "docs-check" not in info:
            for line in body.splitlines():
                word = shlex.split(line, comments=True)[:1]
                assert not word or word[0] in SYSTEM_TOOLS, f"a labq step the test does not run: {line}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def scratch():
    d = pathlib.Path(tempfile.mkdtemp(prefix="labq-guide-", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_every_checked_block_of_the_admin_guide_runs(scratch):
    s, port = scratch, _free_port()
    moves = [("make install-system", f"make -s install-system PREFIX={s}/opt/labq BINDIR={s}/usr/local/bin "
                                     f"SYSCONFDIR={s}/etc/labq UNITDIR={s}/units DOCDIR={s}/doc"),
             ("/usr/local/bin", f"{s}/usr/local/bin"), ("/opt/labq", f"{s}/opt/labq"), ("/etc/labq", f"{s}/etc/labq"),
             ("/var/backups", f"{s}/var/backups"), ("/var/lib/redis", f"{s}/var/lib/redis"),
             ("/run/redis", f"{s}/run/redis"), ("127.0.0.1:9464", f"127.0.0.1:{port}")]
    for d in ("etc/labq", "var/lib/redis", "run/redis", "spool"):
        (s / d).mkdir(parents=True)
    sock = s / "run/redis/redis-server.sock"
    (s / "etc/labq/labq.toml").write_text(
        f'[redis]\nurl = "unix://{sock}"\n[scheduler]\nmetrics = "127.0.0.1:{port}"\n'
        f'[worker]\nname = "node1"\ngpus = 1\nspool = "{s}/spool"\nrun_as = "self"\nallow_root = true\n')
    env = dict(os.environ, PATH=f"{s}/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    env.pop("PYTHONPATH", None)
    procs, log = [], open(s / "daemons.log", "w")

    table = dict(moves)
    pattern = re.compile("|".join(re.escape(a) for a, _ in moves))

    def run(body):
        body = pattern.sub(lambda m: table[m.group(0)], body)    # one pass: a moved path is not moved twice
        p = subprocess.run(["bash", "-euo", "pipefail", "-c", body], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=600)
        assert p.returncode == 0, f"{body}\n--- exit {p.returncode}\n{p.stdout}\n{p.stderr}"
        return p.stdout

    checked = [body for info, body in blocks(GUIDE.read_text()) if "docs-check" in info]
    assert len(checked) >= 8
    try:
        assert "labq" in run(checked[0])          # the install, before anything is running
        procs.append(subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", str(sock), "--dir",
                                       str(s / "run/redis"), "--appendonly", "yes", "--save", ""], stdout=log))
        wait_for(sock.exists, 20, what="redis")
        for role in ("scheduler", "worker"):
            procs.append(subprocess.Popen([f"{s}/usr/local/bin/labq", role], stdout=log, stderr=subprocess.STDOUT,
                                          env=dict(env, LABQ_CONFIG=f"{s}/etc/labq/labq.toml")))
        env["LABQ_CONFIG"] = f"{s}/etc/labq/labq.toml"
        wait_for(lambda: "node1" in run("labq nodes"), 60, what="node1 to register")
        jid = run("labq sub --parsable -W -- true").strip()
        assert jid == "1", "the guide's `labq show 1` names the first job"
        for body in checked[1:]:
            run(body)
        aof = list((s / "var/lib/redis").glob("appendonlydir/*")) + list((s / "var/lib/redis").glob("appendonly*"))
        assert aof, "the restore wrote the snapshot out as an append-only file"
    finally:
        for p in reversed(procs):
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
        log.close()
