"""docs/admin.md is run, not just read: every `sh docs-check` block runs in a scratch directory
(the guide's system paths moved there) against a real Redis, scheduler and worker started from the
labq the guide installed; the other shell blocks may only use system tools (apt-get, systemctl,
useradd) — so every labq command the guide shows is exercised here."""
import os
import pathlib
import pwd
import re
import shlex
import shutil
import socket
import subprocess
import tempfile
import textwrap

import pytest

from tests.harness import ROOT, wait_for
from tests.system.site import Site, system_user

GUIDE = pathlib.Path(ROOT) / "docs" / "admin.md"
SYSTEM_TOOLS = {"apt-get", "systemctl", "useradd", "sqlite3"}
pytestmark = [pytest.mark.e2e, pytest.mark.skipif(os.geteuid() != 0, reason="make install-system runs as root")]


def blocks(text: str) -> list[tuple[str, str]]:
    """(info, body) of each fenced block, an indented one (in a list item) included."""
    return [(m.group(1).strip(), textwrap.dedent(m.group(2)))
            for m in re.finditer(r"^ *```([^\n]*)\n(.*?)^ *```", text, re.M | re.S)]


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


def test_every_step_of_the_admin_guide_runs_as_deployed(scratch):
    """Issue 36: every block runs in order; the guide's own backup, restore (Debian's ownership), the
    rollback it causes (the scheduler refuses, exit 3, naming its state file in $STATE_DIRECTORY),
    accept-loss as root, the archive and its backup (0600), the upgrade. STEPS records each block's
    outcome for the note."""
    s, port = scratch, _free_port()
    moves = [("make install-system", f"make -s install-system PREFIX={s}/opt/labq BINDIR={s}/usr/local/bin "
                                     f"SYSCONFDIR={s}/etc/labq UNITDIR={s}/units DOCDIR={s}/doc"),
             ("/usr/local/bin", f"{s}/usr/local/bin"), ("/opt/labq", f"{s}/opt/labq"), ("/etc/labq", f"{s}/etc/labq"),
             ("/var/backups", f"{s}/var/backups"), ("/var/lib/redis", f"{s}/var/lib/redis"),
             ("/var/lib/labq-scheduler", f"{s}/var/lib/labq-scheduler"),
             ("/run/redis", f"{s}/run/redis"), ("127.0.0.1:9464", f"127.0.0.1:{port}")]
    user = system_user()
    redis_pw = pwd.getpwnam("redis")
    os.chmod(s, 0o755)
    for d in ("etc/labq", "var/lib/redis", "var/lib/labq-scheduler", "var/lib/labq", "run/redis"):
        (s / d).mkdir(parents=True)
        os.chmod(s / d, 0o755)
    os.chown(s / "var/lib/redis", redis_pw.pw_uid, redis_pw.pw_gid)
    os.chmod(s / "var/lib/redis", 0o750)
    os.chown(s / "var/lib/labq-scheduler", user.pw_uid, user.pw_gid)
    os.chmod(s / "var/lib/labq-scheduler", 0o750)            # StateDirectoryMode=0750
    conf = s / "etc/labq/labq.toml"
    conf.write_text(f'[redis]\nurl = "unix://{s}/run/redis/redis-server.sock"\n[scheduler]\n'
                    f'metrics = "127.0.0.1:{port}"\n[history]\nkeep = "0s"\n'
                    f'[worker]\nname = "node1"\ngpus = 1\nrun_as = "self"\nallow_root = true\n')
    os.chmod(conf, 0o644)                                    # as installed: every user's labq reads it
    site = Site(s, port, user)
    table = dict(moves)
    pattern = re.compile("|".join(re.escape(a) for a, _ in moves))

    def run(body, check=True):
        body = pattern.sub(lambda m: table[m.group(0)], body)    # one pass: a moved path is not moved twice
        p = subprocess.run(["bash", "-euo", "pipefail", "-c", body], cwd=ROOT, env=site.env, capture_output=True,
                           text=True, timeout=600)
        assert not check or p.returncode == 0, f"{body}\n--- exit {p.returncode}\n{p.stdout}\n{p.stderr}"
        return p.stdout

    def leading():
        wait_for(lambda: run("redis-cli -s /run/redis/redis-server.sock get labq:leader").strip(), 90,
                 what=f"the scheduler to lead (see {s}/daemons.log)")

    steps = [(info, body) for info, body in blocks(GUIDE.read_text()) if info.split()[:1] == ["sh"]]
    install = next(i for i, (info, _) in enumerate(steps) if "docs-check" in info)
    STEPS.clear()
    try:
        for info, body in steps[:install]:
            STEPS.append((body, "skipped (installs system packages)"))
        assert "labq" in run(steps[install][1])          # the install, before anything is running
        STEPS.append((steps[install][1], "worked"))
        for name in ("redis", "scheduler", "worker"):
            site.start(name)
        wait_for(lambda: "node1" in run("labq nodes"), 90, what="node1 to register")
        leading()
        assert run("labq sub --parsable -W -- true").strip() == "1", "the guide's `labq show 1` names the first job"
        run("labq admin archive --now")
        wait_for(lambda: run("redis-cli -s /run/redis/redis-server.sock zcard labq:history").strip() == "0", 90,
                 what="job 1 archived")
        backed_up = False
        for info, body in steps[install + 1:]:
            if "docs-check" not in info:
                if "systemctl stop labq-scheduler" in body and backed_up:
                    # After the backup: one more job id handed out, which the restore takes back.
                    assert run("labq sub --parsable -H -- true").strip() == "2"
                for line in body.splitlines():
                    site.systemctl(line)
                if "systemctl restart labq-scheduler" in body:
                    leading()
                acts = any(w in body for w in ("systemctl stop", "systemctl start", "systemctl restart"))
                STEPS.append((body, "worked (its systemctl lines on the test's processes)" if acts else
                              "not run (packages, users, unit files: the test's site provides them)"))
                continue
            if "accept-loss" in body:
                sched = site.procs["scheduler"]
                assert sched.wait(90) == 3, "the restored (older) Redis is refused"
                logged = (s / "daemons.log").read_text()
                assert "went backwards" in logged and f"{s}/var/lib/labq-scheduler/scheduler-labq-" in logged, logged
            try:
                run(body)
            except AssertionError:
                STEPS.append((body, "FAILED"))
                raise
            STEPS.append((body, "worked"))
            if "--rdb" in body:
                backed_up = True
        for f in (s / "var/backups/labq").iterdir():
            assert f.stat().st_mode & 0o077 == 0, f"{f} is {f.stat().st_mode & 0o777:o}: backups are 0600"
        assert {f.suffix for f in (s / "var/backups/labq").iterdir()} == {".rdb", ".db"}
        owners = {(f, f.stat().st_uid) for f in (s / "var/lib/redis").rglob("*")}
        assert owners and all(uid == redis_pw.pw_uid for _, uid in owners), \
            f"root-owned files in /var/lib/redis break Debian's redis-server: {owners}"
        assert list((s / "var/lib/redis").glob("appendonlydir/*")), "the restore wrote an append-only file"
        state = list((s / "var/lib/labq-scheduler").glob("scheduler-labq-*.json"))
        assert state and all(f.stat().st_uid == user.pw_uid for f in state), "accept-loss as root: the scheduler's file"
        assert (s / "var/lib/labq-scheduler/history.db").exists(), "the archive is in $STATE_DIRECTORY"
    finally:
        site.close()
        _write_steps(s)
        subprocess.run(["userdel", user.pw_name], check=False)
        subprocess.run(["groupdel", user.pw_name], check=False, stderr=subprocess.DEVNULL)


STEPS: list[tuple[str, str]] = []


def _write_steps(s) -> None:
    """Each block and its outcome, where the note's table comes from ($LABQ_GUIDE_STEPS, if set)."""
    out = os.environ.get("LABQ_GUIDE_STEPS")
    if out:
        with open(out, "w") as f:
            for body, outcome in STEPS:
                f.write(f"{outcome}\t{body.strip().splitlines()[0] if body.strip() else ''}"
                        f"{' (+%d lines)' % (len(body.strip().splitlines()) - 1) if len(body.strip().splitlines()) > 1 else ''}\n")
