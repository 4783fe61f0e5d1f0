"""A single job's record is its submit's template numbered in place, not a copy of its 71 slots
(handlers._numbered, issue 39 item 3: ~5 us of the handler's ~40 per submit); the record is the
one a copy made, and the next submit's is a new object. Fakeredis and a real redis-server."""
import time
from dataclasses import replace

from labq.scheduler.jobs import jobspec
from tests.harness import BODY, setup


def test_a_single_submit_numbers_its_template_and_copies_nothing(conns, monkeypatch):
    """Failed before: jobspec.expand copied the template (jobspec._copies) for every single job."""
    r, raw = conns
    now = time.time()
    s = setup(r, raw, now)
    body = {**BODY, "gpus": 0, "hold": True}
    template = s.estimator.stamp(jobspec.job_from_submit(body, "alice", s.cfg, now, s.handlers.dep_ids))
    copies = []
    real = jobspec._copies
    monkeypatch.setattr(jobspec, "_copies", lambda job: copies.append(job) or real(job))
    # The handler decides from what the tick read (the budgets' spent hash): asked as the tick asks it.
    first = s.inboxes.reads.decided(lambda: s.handlers.submit("alice", body, now))
    s.commit(first)      # a submit's ids are handed out as its change commits (Change.last_id), not as it is decided
    one = first.jobs
    two = s.inboxes.reads.decided(lambda: s.handlers.submit("alice", body, now)).jobs
    assert copies == []
    assert len(one) == len(two) == 1 and one[0] is not two[0] and two[0].id == one[0].id + 1
    assert one[0] == replace(template, id=one[0].id)
