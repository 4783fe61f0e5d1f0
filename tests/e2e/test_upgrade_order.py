"""A wrong upgrade order never runs a job without the environment its submitter exported.

Since issue 34 a node role may read a job's exported environment only where the scheduler handed
it over at dispatch (keys.handover); a scheduler older than that (schema 1: scripts inline in the
records, environments at labq:env:ID) hands nothing over, and the new role may not read labq:env:ID.
Upgraded workers and roles under such a scheduler (docs/admin.md: the scheduler goes first) used to
run the job with an empty environment and say nothing. The attempt now ends `error` before anything
starts, saying which side to upgrade, and the runner logs it.

A real redis-server with the roles `labq admin acl --apply` generates, the real runner process.
"""
import json

import pytest
import redis

from labq.scheduler.store import acl
from tests.harness import E2E_MARKS, NODE, PY, K, events, put_job, run, runner_env, start_runner

pytestmark = E2E_MARKS
SECRET = "wandb-upgrade-order"
# The job writes what it got of the exported variable: an empty line is the silent failure.
ARGV = (PY, "-c", "import os; print('KEY=' + os.environ.get('WANDB_API_KEY', ''))")


def _old_scheduler_dispatched(r: redis.Redis, schema: int | None, jid: int = 1) -> None:
    """What a schema-1 scheduler leaves for a runner: the record, labq:env:ID, no handover."""
    put_job(r, jid, argv=ARGV)
    r.set(K.job_env(jid), json.dumps([["WANDB_API_KEY", SECRET]]))
    if schema is not None:
        r.set(K.schema, schema)


def _roles(rp, r: redis.Redis) -> tuple[str, redis.Redis]:
    """The node's URL under its role, and a scheduler-role connection (the default user is off)."""
    pw = {role: acl.new_password() for role in acl.roles(K, [NODE])}
    acl.apply(r, acl.roles(K, [NODE]), pw)
    url = f"unix://{acl.node_role(NODE)}:{pw[acl.node_role(NODE)]}@{rp.sock}"
    return url, redis.Redis(unix_socket_path=rp.sock, username=acl.SCHEDULER, password=pw[acl.SCHEDULER],
                            decode_responses=True)


def _finished(s: redis.Redis) -> dict:
    fin = events(s, "finished")
    assert len(fin) == 1, fin
    return fin[0]["body"]


@pytest.mark.parametrize("schema", [None, 1])
def test_new_roles_under_an_old_scheduler_fail_the_attempt_saying_so(private_redis, tmp_path, schema):
    r = private_redis.client()
    _old_scheduler_dispatched(r, schema)
    url, s = _roles(private_redis, r)
    p = start_runner(runner_env(private_redis, tmp_path, LABQ_REDIS_URL=url))
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    body = _finished(s)
    assert body["outcome"] == "error", body
    assert "the scheduler is older than this worker" in body["message"], body
    assert "upgrade the scheduler first" in body["message"], body
    assert "schema 1" in body["message"], body
    said = [line for line in err.splitlines() if "the scheduler is older than this worker" in line]
    assert len(said) == 1 and "job 1 attempt 1 not started" in said[0], err     # the agent's journal
    assert not (tmp_path / "labq-1.out").exists() or "KEY=" not in (tmp_path / "labq-1.out").read_text()
    assert not events(s, "started"), "nothing started"


def test_a_new_scheduler_whose_handover_is_gone_fails_the_attempt_too(private_redis, tmp_path):
    """Schema 2 but nothing handed over (dispatched before the upgrade, or a day-old entry)."""
    r = private_redis.client()
    _old_scheduler_dispatched(r, 2)
    url, s = _roles(private_redis, r)
    run(runner_env(private_redis, tmp_path, LABQ_REDIS_URL=url))
    body = _finished(s)
    assert body["outcome"] == "error", body
    assert K.handover(NODE, 1, "env") in body["message"] and K.job_env(1) in body["message"], body
    assert not events(s, "started")


def test_without_roles_an_old_scheduler_s_jobs_still_run_with_their_environment(private_redis, tmp_path):
    """No ACL (a lab that never applied roles): the runner reads labq:env:ID itself and runs."""
    r = private_redis.client()
    _old_scheduler_dispatched(r, None)
    workdir = tmp_path / "w"
    workdir.mkdir()
    r.set(K.job(1), r.get(K.job(1)).replace('"argv"', f'"workdir":"{workdir}","argv"', 1))
    run(runner_env(private_redis, tmp_path))
    body = _finished(r)
    assert body["outcome"] == "completed", body
    assert (workdir / "labq-1.out").read_text().strip() == f"KEY={SECRET}"
