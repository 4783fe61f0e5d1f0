"""No phantom submits, on real processes: a `labq sub` that gives up names its request id and says
it was not submitted; the scheduler that comes up later answers it "expired" and creates nothing.
A request read in time is done once however often the client sent it."""
import json
import re
import time

import pytest

from labq.scheduler.model import Gpu
from labq.scheduler.store.agentside import AgentStore
from tests.conftest import wait_for
from tests.test_durable import K, Site, pytestmark  # noqa: F401 (markers)


@pytest.fixture
def site():
    s = Site(True)
    AgentStore(s.r, K).register("n1", 16, 64 << 30, 16, [Gpu("GPU-0", 0, "fake")], "h", 1, 3600)
    yield s
    s.close()


def test_a_submit_that_gave_up_is_never_done(site):
    t0 = time.monotonic()
    out = site.labq("sub", "--", "true", env={**site.env, "LABQ_TIMEOUT": "2"})
    assert out.returncode == 4 and time.monotonic() - t0 < 30, out
    m = re.search(r"request ([0-9a-f]{32}) was not submitted", out.stderr)
    assert m and out.stderr.count("\n") == 1, out.stderr
    rid = m.group(1)
    assert len(site.r.xrange(K.inbox(site.labq_user()))) == 3       # three tries, one request id
    site.scheduler()
    got = wait_for(lambda: site.r.get(K.done(rid)), 60, what="the expired request's answer")
    reply = json.loads(got)
    assert not reply["ok"] and reply["error"].startswith("expired") and reply["code"] == 4
    assert site.r.get(K.seq) is None and site.r.zcard(K.active) == 0      # no job, no id spent
    out = site.labq("sub", "--parsable", "--", "true")                    # the queue works
    assert out.returncode == 0 and out.stdout.strip() == "1", out


def test_retries_of_one_request_id_make_one_job(site):
    user = site.labq_user()
    for _ in range(3):   # what a client's three tries look like when the scheduler was slow
        site.r.xadd(K.inbox(user), {"rid": "same", "op": "submit", "expires": f"{time.time() + 60:.3f}",
                                    "body": json.dumps({"argv": ["true"], "workdir": "/tmp"})})
    site.r.lpush(K.wake, f"user:{user}")
    site.scheduler()
    wait_for(lambda: site.r.llen(K.reply("same")) == 3, 60, what="three answers")
    answers = [json.loads(x) for x in site.r.lrange(K.reply("same"), 0, -1)]
    assert [a["job_id"] for a in answers] == [1, 1, 1] and site.r.get(K.seq) == "1"
