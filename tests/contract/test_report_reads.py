"""`labq report` reads, of the active jobs, only those that have run (ThinReader.ran): a held queue of
10,000 jobs that never ran cost it ~1 s of decoding for nothing to count (issue 39 item 4). What it
prints is what the pure aggregation (scheduler/money/report.py) gives over every record, on a queue
of never-run pending and held jobs (some with record text that looks like the markers ran() reads),
requeued ones, running ones and ended ones."""
import json
import os
import random
import subprocess
import sys
import time
from dataclasses import replace

import pytest

from labq.scheduler.client import current_user
from labq.scheduler.jobs import states
from labq.scheduler.jobs.model import Attempt, Gpu, Job
from labq.scheduler.money import report as rep
from labq.scheduler.store import jobview, resp, writes
from labq.scheduler.store.agentside import AgentStore
from labq.scheduler.store.thinreads import ThinReader
from tests.harness import ROOT, K, ended_job

CONFIG = '[rates]\ngpu_hour = 2.5\ncpu_hour = 0.013\n[security]\nadmins = ["{user}"]\n'


def _queue(rng) -> list[Job]:
    """Ended jobs, then the active ones: never run (plain, held, tasks, names holding the markers),
    requeued after ended attempts (one whose usage holds an `attempts` key), and running."""
    jobs = [replace(ended_job(rng, i), est=rng.choice((None, 600, 7200))) for i in range(1, 41)]
    now, ran = time.time(), [a for j in jobs for a in j.attempts]
    base = dict(user=current_user(), account="eta", gpus=1, submit_time=now - 100, end_time=None, exit_code=None,
                start_time=None)
    for i in range(41, 81):
        name = ('x"attempts":[]', 'y"state":"R"', 'z"attempts":[{', "plain")[i % 4]
        jobs.append(Job(id=i, name=name, held=i % 3 == 0, array_id=41 if i < 50 else None,
                        array_index=i - 41 if i < 50 else None, **base))
    for i in range(81, 86):
        atts = tuple(replace(a, attempt=n + 1) for n, a in enumerate(rng.sample(ran, 2)))
        if i == 81:
            atts = (replace(atts[0], usage={"attempts": [], "gpu_idle_s": 7.0}),) + atts[1:]
        jobs.append(Job(id=i, reason=states.NONE, restart_count=2, attempts=atts, **base))
    for i in range(86, 89):
        open_ = Attempt(2, "n1", ("GPU-1",), dispatch_time=now - 50, start_time=now - 49, cost=0)
        jobs.append(Job(id=i, state=states.RUNNING, node="n1", gpu_uuids=("GPU-1",),
                        attempts=(replace(rng.choice(ran), attempt=1), open_), **{**base, "start_time": now - 49}))
    return jobs


@pytest.mark.redis
def test_report_counts_what_every_record_gives(redis_server, tmp_path, monkeypatch):
    r = redis_server.client()
    r.flushall()
    jobs = _queue(random.Random(39))
    p = r.pipeline(transaction=False)
    writes.put_jobs(p, K, jobs)
    writes.put_ran(p, K, [j for j in jobs if j.state in states.ACTIVE], "sched:1:a")   # as a leader's rebuild keeps it
    p.set(K.leader, "sched:1:a")
    p.execute()
    AgentStore(r, K).register("n1", 16, 64 << 30, 8, [Gpu(f"GPU-{i}", i, "a100") for i in range(4)], "h", 1, 10 ** 9)
    conn = resp.Connection(redis_server.url)
    read = ThinReader(conn, K, lambda e: AssertionError(e))
    active = read.active()
    assert len(active) == 48
    # Those read: all but the never-run pending ones.
    want = [j for j in active if j.state != states.PENDING or j.attempts]
    decoded = []
    view = jobview._view
    monkeypatch.setattr(jobview, "_view", lambda d, *a: decoded.append(d) or view(d, *a))
    got = read.ran()
    monkeypatch.undo()
    # (JSON escapes the quotes of a name, so the marker-named jobs' text does not look like the keys.)
    assert len(decoded) == len(want), "only the records of jobs that ran are decoded"
    assert [j.id for j in got] == [j.id for j in want] == [81, 82, 83, 84, 85, 86, 87, 88]
    # As views (no model): what report reads of them is the records'.
    assert [(j.state, j.cost, [(a.node, a.gpus, a.end_time, a.usage) for a in j.attempts]) for j in got] == \
        [(j.state, j.cost, [(a.node, a.gpus, a.end_time, a.usage) for a in j.attempts]) for j in want]
    everything = read.acct_rows(0) + active
    models = {f"GPU-{i}": "a100" for i in range(4)}      # as n1 registered them
    cfg = tmp_path / "labq.toml"
    cfg.write_text(CONFIG.format(user=current_user()))
    env = {**os.environ, "LABQ_REDIS_URL": redis_server.url, "PYTHONPATH": ROOT,
           "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop("LABQ_CONFIG", None)
    for args, expect in ((("--by", "account,user,node,status"),
                          rep.by(everything, ("account", "user", "node", "status"), models)),
                         (("--by", "gpu_type"), rep.by(everything, ("gpu_type",), models)),
                         (("--forecast-accuracy",), rep.forecast_accuracy(everything)),
                         (("--since", "2020-01-01", "--by", "node"), rep.by(everything, ("node",), models,
                                                                          time.mktime((2020, 1, 1, 0, 0, 0, 0, 0, -1))))):
        out = subprocess.run([sys.executable, "-m", "labq", "--config", str(cfg), "report", "--json", *args], env=env,
                             cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr[-800:]
        assert expect and json.loads(out.stdout) == json.loads(json.dumps(expect)), args
    # The kept ids (Keys.ran) say which ran: only their records are read; without them, the `stat`
    # rows (statrows.py's `prio` field: a pending job's attempt count) say. Where the index lacks rows,
    # every active record is read, with the same answer.
    asked, pipe = [], read._pipe
    monkeypatch.setattr(read, "_pipe", lambda cmds: asked.extend(len(c) - 1 for c in cmds if c[0] == "MGET")
                        or pipe(cmds))
    assert [j.id for j in read.ran()] == [81, 82, 83, 84, 85, 86, 87, 88] and sum(asked) == 8
    # A labq older than Keys.ran leads (a downgrade) and starts job 41 without adding it to the set:
    # the set names another leader, so the rows say, and job 41 is counted.
    r.set(K.leader, "older:2:b")
    started = replace(next(j for j in jobs if j.id == 41), state=states.RUNNING, node="n1", start_time=time.time(),
                      attempts=(Attempt(1, "n1", ("GPU-1",), dispatch_time=time.time(), start_time=time.time()),))
    p = r.pipeline(transaction=False)
    writes.put_jobs(p, K, [started])
    p.execute()
    r.srem(K.ran, 41)           # as that older labq leaves it: it knows nothing of the set
    asked.clear()
    assert [j.id for j in read.ran()] == [41, 81, 82, 83, 84, 85, 86, 87, 88] and sum(asked) == 9
    assert r.sismember(K.ran, "-"), "the mark alone does not make the set trusted"
    r.delete(K.leader)          # no leader this instant: the rows say too
    asked.clear()
    assert [j.id for j in read.ran()] == [41, 81, 82, 83, 84, 85, 86, 87, 88] and sum(asked) == 9
    p = r.pipeline(transaction=False)
    writes.put_jobs(p, K, [next(j for j in jobs if j.id == 41)])      # back as it was, for what follows
    p.execute()
    r.set(K.leader, "sched:1:a")
    r.delete(K.ran)
    asked.clear()
    assert [j.id for j in read.ran()] == [81, 82, 83, 84, 85, 86, 87, 88] and sum(asked) == 8
    r.delete(K.stat_rows)
    asked.clear()
    assert [j.id for j in read.ran()] == [81, 82, 83, 84, 85, 86, 87, 88] and sum(asked) == 48
    conn.close()
