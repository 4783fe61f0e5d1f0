"""The daemons' logs: `labq up` writes one file per process and says where; under systemd
(JOURNAL_STREAM naming our stderr) each line carries its `<N>` priority and no timestamp of ours."""
import logging
import os
import re
import signal
import subprocess
import sys

from labq.cli import daemonlog
from tests.harness import ROOT, LabqUp, wait_for

STAMP = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")


def _record(level, msg):
    return logging.LogRecord("labq.scheduler", level, __file__, 1, msg, (), None)


def test_journal_lines_carry_the_priority_on_every_line_and_no_timestamp():
    f = daemonlog.JournalFormatter()
    assert f.format(_record(logging.ERROR, "Redis: gone")) == "<3>labq.scheduler: Redis: gone"
    assert f.format(_record(logging.WARNING, "a\nb")) == "<4>labq.scheduler: a\n<4>b"
    assert f.format(_record(logging.INFO, "x")).startswith("<6>")
    assert f.format(_record(logging.DEBUG, "x")).startswith("<7>")


def test_journal_stream_is_trusted_only_for_the_stream_it_names(monkeypatch, tmp_path):
    mine, other = open(tmp_path / "a", "w"), open(tmp_path / "b", "w")
    st = os.fstat(mine.fileno())
    monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino}")
    assert daemonlog.under_journal(mine)
    assert not daemonlog.under_journal(other), "inherited variable, different stderr: plain lines"
    monkeypatch.delenv("JOURNAL_STREAM")
    assert not daemonlog.under_journal(mine)


def test_the_scheduler_under_systemd_logs_priorities(redis_server, tmp_path):
    cfg = tmp_path / "labq.toml"
    cfg.write_text(f'[redis]\nurl = "{redis_server.url}"\nprefix = "jlog"\n[scheduler]\ntick = 0.2\n')
    err = open(tmp_path / "stderr", "w")
    st = os.fstat(err.fileno())
    env = dict(os.environ, JOURNAL_STREAM=f"{st.st_dev}:{st.st_ino}", PYTHONPATH=ROOT)
    p = subprocess.Popen([sys.executable, "-m", "labq", "--config", str(cfg), "scheduler"], stderr=err,
                         stdout=subprocess.DEVNULL, env=env)
    try:
        wait_for(lambda: "starting" in (tmp_path / "stderr").read_text(), 60, what="the scheduler to log")
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(60)
        err.close()
    lines = (tmp_path / "stderr").read_text().splitlines()
    assert lines and all(re.match(r"<[0-7]>", ln) for ln in lines), lines
    assert any(ln.startswith("<6>labq.scheduler: scheduler ") for ln in lines), lines
    assert not any(STAMP.search(ln) for ln in lines), "journald adds the timestamp"


UPLOG = '[worker]\nname = "uplog"\nslots = 1\nspool = "{spool}"\nrun_as = "self"\nallow_root = true\n'


def test_labq_up_writes_each_daemons_log_and_logs_admission_and_end_by_job_id():
    with LabqUp(UPLOG, prefix="labq-uplog-", up=("up", "-v")) as up:
        logdir = os.path.join(up.dir, "log")
        assert f"logs: {logdir}/" in open(up.log.name).read()
        p = up.run("sub", "--parsable", "-W", "--", "true")
        assert p.returncode == 0, p.stderr
        jid = p.stdout.strip()
        sched = os.path.join(logdir, "scheduler.log")
        wait_for(lambda: f"job {jid} attempt 1" in open(sched).read(), 60, what="the end to be logged")
        text = open(sched).read()
        assert re.search(rf"INFO job {jid} -> uplog", text), text
        assert STAMP.search(text), "outside systemd, lines carry their own time"
        assert os.path.getsize(os.path.join(logdir, "worker.log")) > 0
    assert up.proc.returncode == 0


def test_an_attempts_end_is_as_loud_as_it_needs_to_be():
    """Issue 36: an OOM was at <6>, invisible to `journalctl -p warning`; failures at <6> too."""
    from labq.scheduler.daemon.journal import end_level
    f = daemonlog.JournalFormatter()

    def line(outcome):
        return f.format(logging.LogRecord("labq.scheduler", end_level(outcome), "", 0, "job 1 %s", (outcome,), None))
    assert line("oom").startswith("<4>") and line("node_failure").startswith("<4>")
    assert line("failed").startswith("<5>") and line("timeout").startswith("<5>")
    assert line("completed").startswith("<6>") and line("cancelled").startswith("<6>")


def test_a_runner_slot_under_the_journal_prefixes_its_lines(tmp_path):
    """The slots inherit the agent's stderr, journald's stream under systemd: their lines carry <N>."""
    err = tmp_path / "err"
    code = ("import logging, os, sys\n"
            "st = os.fstat(2); os.environ['JOURNAL_STREAM'] = f'{st.st_dev}:{st.st_ino}'\n"
            "from labq.worker import slot\n"
            "sys.stdin = __import__('io').StringIO('{\"agent_pid\": %d, \"slot\": 3}\\n' % os.getppid())\n"
            "slot.SlotRunner = lambda *a: logging.getLogger('labq.runner').warning('job 7: oom') or sys.exit(0)\n"
            "slot.launch.Settings.from_dict = staticmethod(lambda d: d)\n"
            "slot.main()\n")
    with open(err, "w") as f:
        p = subprocess.run([sys.executable, "-c", code], stderr=f, env=dict(os.environ, PYTHONPATH=ROOT), timeout=60)
    text = err.read_text()
    assert p.returncode == 0 and "<4>labq.slot[3]: job 7: oom" in text, text
