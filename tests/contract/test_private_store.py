"""Issue 34 item 4 in the store: a job's script and exported environment live apart from its record
(keys.script, keys.job_env), written once per submission, gone from Redis when the submission is
archived; the scheduler's `show_private` request (scheduler/security/private.py) gives them to their owner
and admins only; data of schema 1 (scripts and environments inside records and specs) is moved
when a newer scheduler starts (store/schema.py); the archive serves no script to clients."""
import json
import time

import pytest

from labq.scheduler.jobs.model import Job
from labq.scheduler.settings import config
from labq.scheduler.store import acl, codec, envs, histpages, schema
from labq.scheduler.store.agentside import AgentStore
from labq.scheduler.store.archive import Archive, Archiver
from labq.scheduler.store.reads import Reader
from tests.harness import BODY, SWEEP_TOML, K, finish, push, reply, setup, submit, woke

SCRIPT = "#!/bin/sh\nexport DB_PASSWORD=hunter2\npython train.py\n"
ENV = {"WANDB_API_KEY": "wandb-s3cret"}
CFG = config.loads(SWEEP_TOML + '[security]\nadmins = ["root"]\n')


def _lab(conns):
    r, raw = conns
    return r, setup(r, raw, time.time(), cfg=CFG)


def _ask(r, s, user, job, rid):
    push(r, user, {"rid": rid, "op": "show_private", "body": json.dumps({"job": job})})
    s.tick(time.time(), woke(r))
    return reply(r, rid)


def test_the_script_and_environment_are_kept_apart_and_shown_to_owner_and_admins(conns):
    r, s = _lab(conns)
    body = {**BODY, "gpus": 0, "argv": ["--lr", "3e-4"], "script": SCRIPT, "export": "NONE", "env": ENV}
    submit(r, "alice", body, "one")
    submit(r, "alice", {**body, "array": [1, 3, 1]}, "arr")
    s.tick(time.time(), woke(r))
    jid, arr = reply(r, "one")["job_id"], reply(r, "arr")["job_id"]
    for ref, jobs in ((jid, [jid]), (arr, [arr, arr + 1, arr + 2])):
        assert r.get(K.script(ref)) == SCRIPT and dict(json.loads(envs.text(r, K, ref))) == ENV
        for i in jobs:
            rec = r.get(K.job(i))
            assert "hunter2" not in rec and "wandb" not in rec and json.loads(rec)["scripted"] is True
    assert not r.exists(K.script(arr + 1)) and not r.exists(K.job_env(arr + 1)), "once per submission"
    seen = Reader(r, K).job(arr + 2)
    assert seen.script is None and seen.has_script and seen.argv == ("--lr", "3e-4")
    # Handed over to n1, where it was dispatched: the runner's first read finds it there.
    assert r.get(K.handover("n1", arr + 2, "script")) == SCRIPT
    assert dict(json.loads(r.get(K.handover("n1", arr + 2, "env")))) == ENV
    assert AgentStore(r, K).first_read(arr + 2, None, "n1")[0].script == SCRIPT
    assert not r.exists(K.handover("n2", arr + 2, "script"))
    mine = _ask(r, s, "alice", arr + 2, "q1")
    assert mine == {"ok": True, "job_id": arr + 2, "id": f"{arr}_3", "script": SCRIPT, "export": "NONE", "env": ENV}
    assert _ask(r, s, "root", jid, "q2")["script"] == SCRIPT, "an admin"
    theirs = _ask(r, s, "bob", jid, "q3")
    assert theirs["ok"] is False and theirs["code"] == 3 and "alice's" in theirs["error"]
    assert "hunter2" not in json.dumps(theirs)
    assert _ask(r, s, "alice", 999, "q4")["code"] == 2 and _ask(r, s, "alice", "1; DROP", "q5")["code"] == 2
    assert not r.exists(K.done("q1")), "a script handed over is not kept for a day in a done key"


def test_archived_submissions_leave_redis_and_the_archive_serves_no_script(conns, tmp_path):
    r, s = _lab(conns)
    now = time.time()
    submit(r, "alice", {**BODY, "gpus": 0, "argv": [], "script": SCRIPT, "export": "NONE", "env": ENV}, "one")
    s.tick(now, woke(r))
    jid = reply(r, "one")["job_id"]
    finish(r, jid, 1, "completed", 0, now + 5)
    s.tick(now + 6)
    s.archiver = Archiver(r, K, Archive(str(tmp_path / "h.db")), keep=0)
    s.archiver.step(now + 10 ** 6)
    assert not r.exists(K.job(jid)) and not r.exists(K.script(jid)) and not r.exists(K.job_env(jid))
    assert not list(r.scan_iter(K.env_text("*"))) and not list(r.scan_iter(K.env_refs("*"))), "its last submission"
    archive = s.archiver.archive
    assert archive.jobs([jid])[jid].script == SCRIPT, "the archive keeps the script (its owner may ask)"
    served = histpages.answer(archive, {"what": "jobs", "ids": [jid]})["rows"] + \
        histpages.answer(archive, {"what": "ended", "since": 0})["rows"]
    assert len(served) == 2 and all("hunter2" not in rec and json.loads(rec)["scripted"] for rec in served)
    got = _ask(r, s, "alice", jid, "q1")
    assert got["script"] == SCRIPT and got["env"] == {}, "the environment is not archived"
    assert _ask(r, s, "bob", jid, "q2")["code"] == 3


def test_asking_for_an_unknown_job_creates_no_archive(conns, tmp_path):
    """A scheduler that never archived leaves no history file behind (store/archive.Archiver): asking
    for the script of a job it does not know once opened (created) the archive and claimed it for this
    cluster, so the next scheduler on the same state directory, with another Redis, refused to start."""
    r, s = _lab(conns)
    path = tmp_path / "h.db"
    s.archiver = Archiver(r, K, str(path), keep=0, cluster="this-one")
    got = _ask(r, s, "alice", 999, "q1")
    assert got["code"] == 2 and "no such job: 999" in got["error"]
    assert not path.exists()


def test_schema_1_records_and_specs_are_moved_apart_at_start(conns):
    """What a scheduler before issue 34 wrote: the script in each record (a spec's, for a big
    array), an exported environment inline in an older record."""
    r, _ = conns
    single = Job(id=1, user="alice", account="eta", script=SCRIPT, argv=("a",), env=tuple(ENV.items()))
    d = json.loads(codec.dumps(single, share=False))
    d.update(env=[list(p) for p in ENV.items()])
    d.pop("scripted")
    r.set(K.job(1), json.dumps(d))
    for i in (2, 3):
        r.set(K.job(i), json.dumps({"id": i, "user": "bob", "account": "eta", "array_id": 2, "array_index": i - 2,
                                    "array_count": 2, "script": None, "argv": [], "spec": 2, "attempts": []}))
    r.set(K.spec(2), json.dumps({"script": SCRIPT + "#arr\n", "argv": ["x" * 300]}))
    r.zadd(K.active, {"1": 1, "2": 2})
    r.zadd(K.history, {"3": 3})
    assert schema.check(r, K) == 1 and int(r.get(K.schema)) == schema.CURRENT == 3
    for i in (1, 2, 3):
        assert "hunter2" not in r.get(K.job(i)) and "wandb" not in r.get(K.job(i)), i
        assert json.loads(r.get(K.job(i)))["scripted"] is True
    assert json.loads(r.get(K.spec(2))) == {"argv": ["x" * 300]}
    assert r.get(K.script(1)) == SCRIPT and r.get(K.script(2)) == SCRIPT + "#arr\n"
    assert dict(json.loads(envs.text(r, K, 1))) == ENV and r.get(K.job_env(1)).startswith(codec.ENV_BY_DIGEST)
    agent = AgentStore(r, K)
    got = [agent.first_read(i)[0] for i in (1, 3)]     # nothing handed over: the submission's own keys
    assert got[0].script == SCRIPT and got[1].script == SCRIPT + "#arr\n" and got[1].argv == ("x" * 300,)
    before = {k: r.get(k) for k in r.scan_iter("labq:*") if r.type(k) == "string"}
    schema.private_apart(r, K)
    assert {k: r.get(k) for k in before} == before, "a second pass changes nothing"


@pytest.mark.parametrize("key", ["script", "job_env", "env_text", "env_refs"])
def test_the_client_role_may_not_read_them_and_a_node_only_its_handovers(key):
    rules = acl.roles(K, ["n1", "n2"])
    pattern = getattr(K, key)("*")
    for role in (acl.CLIENT, acl.node_role("n1")):
        assert pattern not in " ".join(rules[role])
    assert f"(~{K.handover('n1', '*', '*')} +get +del)" in rules[acl.node_role("n1")]
    assert K.handover("n2", "*", "*") not in " ".join(rules[acl.node_role("n1")])
    assert not any(p.startswith((K.p + ":script", K.p + ":handover", K.p + ":env")) for p in acl.patterns(K, acl.NOT_READ))


def test_show_json_of_ones_own_scripted_job_answers_without_a_scheduler(redis_server, tmp_path):
    """The record comes from Redis; only the script needs the scheduler. With none running, `show
    --json` answers within its short wait, `script` null, and says why on stderr - not exit 4 after
    the whole request timeout."""
    import os
    import subprocess
    import sys

    import redis as redis_py

    from tests.harness import ME, ROOT, put_job
    r = redis_py.Redis.from_url(redis_server.url, decode_responses=True)
    put_job(r, 1, script=SCRIPT, scripted=True, state="PD", node=None, attempt=0, gpus=())
    env = {"PATH": os.environ["PATH"], "LABQ_REDIS_URL": redis_server.url, "LABQ_NO_SYSTEM_CONFIG": "1",
           "XDG_CACHE_HOME": str(tmp_path), "LABQ_TIMEOUT": "60", "USER": ME}
    started = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "labq.cli.main", "show", "--json", "1"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    took = time.monotonic() - started
    assert p.returncode == 0, p.stderr
    shown = json.loads(p.stdout)
    assert str(shown["id"]) == "1" and shown["script"] is None and "hunter2" not in p.stdout
    assert "script is not shown" in p.stderr and "labq show --script 1" in p.stderr and "Traceback" not in p.stderr
    assert took < 50, f"waited {took:.0f}s: the request's whole timeout (60 s), not the script's short wait"
