"""labq.worker.runner.run_job against a real redis-server, each call in its own process (it becomes a
child subreaper and reaps every child it has, which the test process must not do)."""
import json
import os
import pathlib
import pwd
import shutil
import signal
import subprocess
import tempfile
import threading
import types

import pytest

from labq.scheduler.jobs import states
from labq.scheduler.jobs.model import Job
from labq.worker import launch
from tests.harness import (
    ME,
    NODE,
    PY,
    ROOT,
    K,
    events,
    finished,
    hold_until,
    put_job,
    run,
    runner_env,
    start_hooked,
    start_runner,
    wait_for,
)

ENV_DUMP = ("import json, os; print('ENV=' + json.dumps(dict(os.environ))); print('CWD=' + os.getcwd())")


def parse_dump(text):
    env = json.loads(next(line[4:] for line in text.splitlines() if line.startswith("ENV=")))
    cwd = next(line[4:] for line in text.splitlines() if line.startswith("CWD="))
    return env, cwd


def test_runs_command_with_clean_env_cwd_and_log(real_redis, redis_server, tmp_path):
    wd = tmp_path / "wd"
    wd.mkdir()
    put_job(real_redis, jid=5, argv=(PY, "-c", ENV_DUMP), workdir=str(wd), name="sweep", cpus=3,
            mem=1 << 30, time_limit=3600, qos="normal", restart_count=2)
    res = run(runner_env(redis_server, tmp_path), jid=5)
    assert res == {"ran": True, "outcome": "completed", "exit_code": 0}
    env, cwd = parse_dump((wd / "labq-5.out").read_text())
    assert cwd == str(wd)
    assert "AGENT_SECRET" not in env and "RQ_JOB_ID" not in env, "built from scratch"
    assert env["LABQ_JOB_ID"] == "5" and env["LABQ_JOB_NAME"] == "sweep" and env["LABQ_NODE"] == NODE
    assert env["LABQ_CPUS"] == env["OMP_NUM_THREADS"] == "3" and env["LABQ_MEM_BYTES"] == str(1 << 30)
    assert env["CUDA_VISIBLE_DEVICES"] == env["LABQ_JOB_GPUS"] == "GPU-fake-tnode-0" and env["LABQ_GPUS"] == "1"
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID" and env["LABQ_RESTART_COUNT"] == "2"
    assert env["LABQ_ACCOUNT"] == "eta" and env["LABQ_QOS"] == "normal" and env["LABQ_SUBMIT_DIR"] == str(wd)
    assert int(env["LABQ_JOB_END_TIME"]) - int(env["LABQ_JOB_START_TIME"]) == 3600
    assert env["LABQ_CHECKPOINT_DIR"] == str(tmp_path / "spool" / "checkpoints" / "5")
    assert os.path.isdir(env["LABQ_CHECKPOINT_DIR"])
    assert env["USER"] == ME and env["HOME"] == pwd.getpwnam(ME).pw_dir and env["LABQ_REDIS_URL"] == redis_server.url
    assert "LABQ_ARRAY_TASK_ID" not in env, "array variables only for array tasks"

    started = events(real_redis, "started")
    assert len(started) == 1 and started[0]["job"] == "5" and started[0]["attempt"] == "1"
    assert started[0]["node"] == NODE and started[0]["body"]["pid"] > 0
    body = finished(real_redis)
    assert body["outcome"] == "completed" and body["exit_code"] == 0 and body["signal"] is None
    assert body["start_time"] == started[0]["body"]["start_time"] <= body["end_time"]
    assert {"cpu_s", "max_rss_bytes", "wall_s"} <= set(body["usage"]) and body["usage"]["cpu_s"] > 0
    assert body["usage"]["mem_limit_bytes"] == 1 << 30, "no --mem-limit: the request is the limit"
    assert not {k for k in body["usage"] if k.startswith("gpu_")}, "no GPU samples, no GPU figures"
    st = real_redis.hgetall(K.attempt(5, 1))
    assert st["claimed"].startswith(f"{NODE}:") and float(st["hb"]) > 0 and st["pid"] == str(started[0]["body"]["pid"])


def test_gpu_less_job_gets_empty_cuda_visible_devices(real_redis, redis_server, tmp_path):
    put_job(real_redis, gpus=(), argv=(PY, "-c", ENV_DUMP), workdir=str(tmp_path))
    run(runner_env(redis_server, tmp_path))
    env, _ = parse_dump((tmp_path / "labq-1.out").read_text())
    assert env["CUDA_VISIBLE_DEVICES"] == "" and env["LABQ_GPUS"] == "0"


def test_array_task_env_and_log_patterns_append_on_restart(real_redis, redis_server, tmp_path):
    cmd = (PY, "-c", "import os, sys; print('out', os.environ['LABQ_ARRAY_TASK_ID'], "
                     "os.environ['LABQ_ARRAY_JOB_ID'], os.environ['LABQ_ARRAY_TASK_COUNT']); print('err', file=sys.stderr)")
    kw = dict(argv=cmd, workdir=str(tmp_path), name="sw", array_id=40, array_index=3, array_count=8,
              out="logs-%x-%A-%a.o", err=str(tmp_path / "%u-%j-%r.e"))
    (tmp_path / "logs-sw-40-3.o").write_text("earlier attempt\n")
    put_job(real_redis, jid=43, **kw)
    run(runner_env(redis_server, tmp_path), jid=43)
    assert (tmp_path / "logs-sw-40-3.o").read_text() == "earlier attempt\nout 3 40 8\n"
    errs = list(tmp_path.glob(f"{ME}-*-0.e"))
    assert len(errs) == 1 and errs[0].read_text() == "err\n"


@pytest.mark.parametrize("cmd, outcome, code, sig", [
    (("/bin/sh", "-c", "exit 3"), "exit", 3, None),
    (("/bin/sh", "-c", "kill -KILL $$"), "exit", -9, 9),
])
def test_exit_status_maps_to_outcome(real_redis, redis_server, tmp_path, cmd, outcome, code, sig):
    put_job(real_redis, argv=cmd, workdir=str(tmp_path))
    res = run(runner_env(redis_server, tmp_path))
    assert res["outcome"] == outcome and res["exit_code"] == code
    body = finished(real_redis)
    assert (body["outcome"], body["exit_code"], body["signal"]) == (outcome, code, sig)


def test_script_text_runs_with_its_arguments(real_redis, redis_server, tmp_path):
    script = '#!/bin/bash\necho "script $1 $2 job=$LABQ_JOB_ID pwd=$PWD"\n'
    put_job(real_redis, jid=9, script=script, argv=("a1", "a 2"), workdir=str(tmp_path))
    assert run(runner_env(redis_server, tmp_path), jid=9)["outcome"] == "completed"
    assert (tmp_path / "labq-9.out").read_text() == f"script a1 a 2 job=9 pwd={tmp_path}\n"
    assert (tmp_path / "spool" / "scripts" / "9.sh").read_text() == script


TERM_IGNORER = ("import signal, time\n"
                "signal.signal(signal.SIGTERM, lambda *a: print('got TERM', flush=True))\n"
                "print('up', flush=True)\n"
                "while True: time.sleep(0.05)\n")


def test_time_limit_sends_term_then_kill(real_redis, redis_server, tmp_path):
    put_job(real_redis, argv=(PY, "-c", TERM_IGNORER), workdir=str(tmp_path), time_limit=1)
    res = run(runner_env(redis_server, tmp_path, LABQ_KILL_WAIT="1"))
    assert res["outcome"] == "timeout"
    body = finished(real_redis)
    assert body["signal"] == signal.SIGKILL and body["exit_code"] == -9
    assert body["usage"]["wall_s"] >= 2.0 - 0.05, "SIGKILL only kill_wait after the SIGTERM at the limit"
    assert "got TERM" in (tmp_path / "labq-1.out").read_text()


def test_cancel_via_control_key(real_redis, redis_server, tmp_path):
    put_job(real_redis, argv=("sleep", "60"), workdir=str(tmp_path), time_limit=3600)
    p = start_runner(runner_env(redis_server, tmp_path, LABQ_KILL_WAIT="5"))
    try:
        wait_for(lambda: events(real_redis, "started"), timeout=30, what="started event")
        real_redis.set(K.control(1), "cancel")
        out, err = p.communicate(timeout=30)
    finally:
        p.kill()
    assert json.loads(out.splitlines()[-1])["outcome"] == "cancelled", err
    body = finished(real_redis)
    assert body["outcome"] == "cancelled" and body["signal"] == signal.SIGTERM   # sleep dies of the TERM


def test_leftover_processes_die_with_the_attempt(real_redis, redis_server, tmp_path):
    pids = tmp_path / "pids"
    cmd = ("/bin/bash", "-c", f'setsid sleep 300 & echo $! > {pids}; (sleep 301 & echo $! >> {pids}); echo done')
    put_job(real_redis, argv=cmd, workdir=str(tmp_path))
    assert run(runner_env(redis_server, tmp_path))["outcome"] == "completed"
    for pid in map(int, pids.read_text().split()):
        assert not os.path.exists(f"/proc/{pid}"), f"pid {pid} outlived its job"


def test_runner_killed_parent_kills_the_tree(real_redis, redis_server, tmp_path):
    """The slot runner dying orphans the attempt's runner: it must kill the job (fencing)."""
    pids = tmp_path / "pids"
    put_job(real_redis, argv=("/bin/bash", "-c", f"echo $$ > {pids}; exec sleep 300"), workdir=str(tmp_path))
    inner = f"import sys; sys.path.insert(0, {ROOT!r}); from labq.worker.runner import run_job; run_job(1, 1)"
    code = (f"import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', {inner!r}]); "
            f"print(p.pid, flush=True); time.sleep(300)")
    middle = subprocess.Popen([PY, "-c", code], env=runner_env(redis_server, tmp_path), stdout=subprocess.PIPE, text=True)
    runner_pid = int(middle.stdout.readline())
    wait_for(lambda: pids.exists() and pids.read_text().strip(), timeout=30, what="job start")
    job_pid = int(pids.read_text())
    middle.kill()
    middle.wait()
    wait_for(lambda: events(real_redis, "finished"), timeout=30, what="finished event")
    assert finished(real_redis)["outcome"] == "node_failure", finished(real_redis)["message"]
    wait_for(lambda: not os.path.exists(f"/proc/{job_pid}") and not os.path.exists(f"/proc/{runner_pid}")
             or _zombie(job_pid), timeout=30, what="job and runner gone")


def _zombie(pid):
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.parametrize("case", ["wrong node", "not current attempt", "not running", "claimed", "missing"])
def test_fencing_runs_nothing(real_redis, redis_server, tmp_path, case):
    marker = tmp_path / "ran"
    argv = ("/bin/sh", "-c", f"touch {marker}")
    if case == "wrong node":
        put_job(real_redis, argv=argv, workdir=str(tmp_path), node="other")
    elif case == "not current attempt":
        put_job(real_redis, argv=argv, workdir=str(tmp_path), attempt=2)
    elif case == "not running":
        put_job(real_redis, argv=argv, workdir=str(tmp_path), state=states.PENDING)
    elif case == "claimed":
        put_job(real_redis, argv=argv, workdir=str(tmp_path))
        real_redis.hset(K.attempt(1, 1), "claimed", "tnode:1")
    res = run(runner_env(redis_server, tmp_path))
    assert res["ran"] is False and res["reason"]
    assert not marker.exists() and events(real_redis) == [] and not (tmp_path / "labq-1.out").exists()


def test_redelivery_after_a_run_does_not_run_again(real_redis, redis_server, tmp_path):
    put_job(real_redis, argv=("/bin/sh", "-c", "echo once"), workdir=str(tmp_path))
    env = runner_env(redis_server, tmp_path)
    assert run(env)["ran"] is True
    assert run(env) == {"ran": False, "reason": "already claimed"}
    assert (tmp_path / "labq-1.out").read_text() == "once\n" and len(events(real_redis)) == 2


@pytest.mark.parametrize("case", ["workdir", "command"])
def test_start_errors_are_reported_as_error(real_redis, redis_server, tmp_path, case):
    if case == "workdir":
        put_job(real_redis, workdir=str(tmp_path / "missing"))
    else:
        put_job(real_redis, argv=("/no/such/program",), workdir=str(tmp_path))
    res = run(runner_env(redis_server, tmp_path))
    assert res["outcome"] == "error"
    body = finished(real_redis)
    assert body["outcome"] == "error" and body["start_time"] is None and body["end_time"]
    assert ("missing" if case == "workdir" else "/no/such/program") in body["message"]
    assert events(real_redis, "started") == []


def test_cancel_before_start_runs_nothing(real_redis, redis_server, tmp_path):
    marker = tmp_path / "ran"
    put_job(real_redis, argv=("/bin/sh", "-c", f"touch {marker}"), workdir=str(tmp_path))
    real_redis.set(K.control(1), "cancel")
    assert run(runner_env(redis_server, tmp_path))["outcome"] == "cancelled"
    assert not marker.exists() and finished(real_redis)["outcome"] == "cancelled"


# -- identity ----------------------------------------------------------------------------------
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="dropping privileges needs root")


@pytest.fixture
def open_tmp():
    """A directory other users can traverse (pytest's tmp_path is root-only 0700)."""
    d = tempfile.mkdtemp(prefix="labq-runner-", dir="/tmp")
    os.chmod(d, 0o755)
    yield pathlib.Path(d)
    shutil.rmtree(d, ignore_errors=True)


def _nobody():
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user 'nobody'")


@root_only
def test_runs_as_the_submitter_with_their_groups(real_redis, redis_server, open_tmp):
    nb, tmp_path = _nobody(), open_tmp
    wd = tmp_path / "wd"
    wd.mkdir()
    os.chown(wd, nb.pw_uid, nb.pw_gid)
    cmd = ("/bin/sh", "-c", "id -u; id -G; pwd; echo $USER $LABQ_CHECKPOINT_DIR")
    put_job(real_redis, user="nobody", argv=cmd, workdir=str(wd))
    assert run(runner_env(redis_server, tmp_path, LABQ_RUN_AS="submitter"))["outcome"] == "completed"
    log = wd / "labq-1.out"
    uid, groups, cwd, rest = log.read_text().splitlines()
    assert int(uid) == nb.pw_uid and "0" not in groups.split(), "never root's supplementary groups"
    assert cwd == str(wd) and rest.split()[0] == "nobody"
    assert os.stat(log).st_uid == nb.pw_uid, "the log belongs to the user"
    assert os.stat(rest.split()[1]).st_uid == nb.pw_uid, "so does the checkpoint dir"


@root_only
def test_submitter_cannot_write_logs_where_they_may_not(real_redis, redis_server, open_tmp):
    _nobody()
    tmp_path = open_tmp
    wd = tmp_path / "rootonly"
    wd.mkdir(mode=0o755)      # nobody may enter but not create files
    put_job(real_redis, user="nobody", workdir=str(wd))
    assert run(runner_env(redis_server, tmp_path, LABQ_RUN_AS="submitter"))["outcome"] == "error"
    assert "cannot open log" in finished(real_redis)["message"] and not (wd / "labq-1.out").exists()


@root_only
def test_root_jobs_refused_unless_allowed(real_redis, redis_server, tmp_path):
    put_job(real_redis, user="root", workdir=str(tmp_path))
    env = runner_env(redis_server, tmp_path, LABQ_RUN_AS="submitter")
    assert run(env)["outcome"] == "error"
    assert "root" in finished(real_redis)["message"]
    real_redis.flushall()
    put_job(real_redis, user="root", workdir=str(tmp_path))
    assert run({**env, "LABQ_ALLOW_ROOT": "1"})["outcome"] == "completed"


def test_other_user_without_root_is_an_error(monkeypatch):
    """An unprivileged agent can run only its own user's jobs, unless run_as = "self"."""
    nb = _nobody()
    monkeypatch.setattr(launch.os, "geteuid", lambda: nb.pw_uid)
    job = Job(id=1, user="root", account="a")
    with pytest.raises(launch.StartError, match="not root"):
        launch.identity(job, launch.Settings("", run_as="submitter", allow_root=True))
    mine = launch.identity(Job(id=1, user="nobody", account="a"), launch.Settings("", run_as="submitter"))
    assert mine.pw.pw_name == "nobody" and not mine.drop
    assert launch.identity(job, launch.Settings("", run_as="self")).pw.pw_name == "nobody"


def test_finished_is_posted_once_even_when_the_tree_is_killed_from_outside(real_redis, redis_server, tmp_path):
    put_job(real_redis, argv=("sleep", "60"), workdir=str(tmp_path))
    p = start_runner(runner_env(redis_server, tmp_path))
    try:
        pid = wait_for(lambda: (events(real_redis, "started") or [None])[0], timeout=30)["body"]["pid"]
        threading.Timer(0.2, os.kill, (pid, signal.SIGKILL)).start()
        p.communicate(timeout=30)
    finally:
        p.kill()
    body = finished(real_redis)
    assert (body["outcome"], body["exit_code"], body["signal"]) == ("exit", -9, 9)


# -- Redis and the lease failing between the claim and the job's start (issue 12) ----------------
def test_redis_gone_as_the_job_starts_does_not_fail_it(tmp_path):
    """Redis restarted mid-dispatch (tests/e2e/test_fencing.py once ended a job `F` this way):
    the runner spawned the job, then its `started` post found Redis gone. That was taken for a
    runner bug: the job was killed and its attempt posted as `error`, so the job failed without
    having run. A Redis blip shorter than the lease must not touch the job: it runs on, and
    `started` is posted once Redis is back."""
    from labq.cli.embedded import Stack
    from labq.scheduler.store import conn
    d = tempfile.mkdtemp(prefix="labq-rr-", dir="/tmp")
    stack = Stack(d, None)
    try:
        url = stack.start_redis()          # appendonly, fsync always: the restart keeps every write
        r = conn.connect(url)
        marker = tmp_path / "ran"
        put_job(r, argv=("/bin/sh", "-c", f"echo ran > {marker}"), workdir=str(tmp_path))
        spawned, go, tried = tmp_path / "spawned", tmp_path / "go", tmp_path / "tried"
        hooks = ("import labq.worker.spawn as S\nfrom labq.scheduler.store.agentside import AgentStore as A\n"
                 "_spawn, _started = S.spawn, A.started\n"
                 f"def spawn(*a, **kw):\n    p = _spawn(*a, **kw)\n    open({str(spawned)!r}, 'w').close()"
                 f"{hold_until(go)}\n    return p\n"
                 f"def started(*a, **kw):\n    try:\n        return _started(*a, **kw)\n"
                 f"    finally:\n        open({str(tried)!r}, 'w').close()\n"
                 "S.spawn, A.started = spawn, started")
        p = start_hooked(runner_env(types.SimpleNamespace(url=url), tmp_path), hooks)
        try:
            wait_for(spawned.exists, 60, what="the job spawned")
            stack.procs["redis"].kill()
            stack.procs["redis"].wait(10)
            go.touch()
            wait_for(tried.exists, 60, what="the runner's `started` post")
            stack.start_redis()            # same socket and AOF
            out, err = p.communicate(timeout=60)
        finally:
            p.kill()
        body = finished(r)
        assert body["outcome"] == "completed" and body["start_time"], (body, err)
        assert p.returncode == 0, err
        assert [e["body"]["pid"] for e in events(r, "started")], "started is posted once Redis is back"
        assert marker.read_text() == "ran\n"
    finally:
        stack.stop_all(10)
        shutil.rmtree(d, ignore_errors=True)


def test_a_lease_lapsing_between_claim_and_start_is_a_node_failure(real_redis, redis_server, tmp_path):
    """The lease the claim saw runs out (in the runner's own reckoning) before the job could start:
    nothing may start, and the attempt is a node failure (requeued), not an `error` that fails
    the job without its having run."""
    marker = tmp_path / "ran"
    put_job(real_redis, argv=("/bin/sh", "-c", f"touch {marker}"), workdir=str(tmp_path))
    hooks = ("from labq.scheduler.store.agentside import AgentStore as A\nfrom labq.worker.runner import Run\n"
             "_claim, _limits = A.claim, Run._limits\n"
             # The claim sees a live lease with 0.3 s left (an agent that has stopped renewing) ...
             "def claim(self, jid, n, node, *a, **kw):\n"
             "    self.r.set(self.k.node_lease(node), 'up', px=300)\n    return _claim(self, jid, n, node, *a, **kw)\n"
             # ... and the runner is held just before the spawn until that lease has run out.
             "def limits(self):\n    while time.monotonic() < self.st.lease_until: time.sleep(0.01)\n"
             "    return _limits(self)\n"
             "A.claim, Run._limits = claim, limits")
    out, err = _ran_hooked(redis_server, tmp_path, hooks)
    body = finished(real_redis)
    assert body["outcome"] == "node_failure" and body["start_time"] is None, body
    assert "lease" in body["message"] and events(real_redis, "started") == [] and not marker.exists()


def test_the_lease_a_claim_sees_counts_from_before_the_request(real_redis, redis_server, tmp_path):
    """The claim's PTTL says the lease lasts until (request sent) + PTTL at least; counted from the
    reply instead, a slow reply stretched it: here the lease ran out while the claim's reply was on
    its way, and the job was started anyway, after its node's lease had lapsed."""
    marker = tmp_path / "ran"
    put_job(real_redis, argv=("/bin/sh", "-c", f"touch {marker}"), workdir=str(tmp_path))
    lease = K.node_lease(NODE)
    hooks = ("from labq.scheduler.store.agentside import AgentStore as A\n_claim = A.claim\n"
             "def claim(self, jid, n, node, *a, **kw):\n"
             "    self.r.set(self.k.node_lease(node), 'up', px=300)\n    got = _claim(self, jid, n, node, *a, **kw)\n"
             # A slow reply: it reaches the runner once the lease is gone.
             f"    while self.r.exists({lease!r}): time.sleep(0.01)\n    return got\n"
             "A.claim = claim")
    out, err = _ran_hooked(redis_server, tmp_path, hooks)
    body = finished(real_redis)
    assert body["outcome"] == "node_failure" and events(real_redis, "started") == [] and not marker.exists(), body


def test_a_claim_won_on_a_lapsed_lease_is_reported_not_left_silent(real_redis, redis_server, tmp_path):
    """A runner that wins the claim but finds the node's lease gone runs nothing, and says so: a
    node failure (requeued at once). Silent, the attempt stayed `R` with no heartbeat, for as long
    as the scheduler did not see the node down (the agent re-registers at once)."""
    marker = tmp_path / "ran"
    put_job(real_redis, argv=("/bin/sh", "-c", f"touch {marker}"), workdir=str(tmp_path))
    real_redis.delete(K.node_lease(NODE))
    res = run(runner_env(redis_server, tmp_path))
    assert res["ran"] is False and not marker.exists()
    body = finished(real_redis)
    assert body["outcome"] == "node_failure" and body["start_time"] is None and "lease" in body["message"], body


def test_a_job_that_exits_as_its_agent_dies_is_its_own_exit(real_redis, redis_server, tmp_path):
    """The watch read the leader running, then (the runner frozen in between: CI, kill -9 of the agent
    as its job exited 0) found its agent gone: the job had exited meanwhile on its own, nothing of the
    runner's fencing killed it, so its outcome is its exit, not a node failure (before: `orphaned`,
    node_failure, the finished work run again). The hook forces the interleaving: the first look at
    the leader waits for its exit and answers "running", and the agent is gone from then on."""
    put_job(real_redis, argv=("/bin/sh", "-c", "exit 0"), workdir=str(tmp_path))
    hooks = ("import labq.worker.waiting as w\n"
             "real_exited, real_ppid, gone = w.LeaderWaiter.exited, os.getppid, []\n"
             "def stale(self):\n"
             "    if not gone:\n"
             "        os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT)\n"
             "        gone.append(1)\n"
             "        return False\n"
             "    return real_exited(self)\n"
             "w.LeaderWaiter.exited = stale\n"
             "os.getppid = lambda: 1 if gone else real_ppid()")
    out, err = _ran_hooked(redis_server, tmp_path, hooks)
    assert json.loads(out.strip().splitlines()[-1])["outcome"] == "completed", err[-2000:]
    assert finished(real_redis)["outcome"] == "completed"


def _ran_hooked(redis_server, tmp_path, hooks):
    """A hooked runner (harness.start_hooked) run to its end, which must be clean: its (stdout, stderr)."""
    p = start_hooked(runner_env(redis_server, tmp_path), hooks)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    return out, err
