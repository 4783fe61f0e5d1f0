"""A big change's records are written ahead of its fenced transaction (writes.put_new_jobs). When the
lease lapses meanwhile (a prewrite that outlasts it: a 10,000-task array on a slow Redis), the
transaction is refused and the request is done again under new ids; the records written ahead must
not stay behind, where `labq show` would find a pending job that is in no queue. Fakeredis and a
real redis-server. (As records, REST_MIN patched: a big array is one record, jobs/rest.py, and writes
nothing ahead.)"""
import json
import time

from labq.scheduler.jobs import rest
from labq.scheduler.store import reads, writes
from tests.harness import BODY, K, push, reply, setup, woke

N = 1_500      # above writes.PREWRITE_MIN


def test_records_written_ahead_of_a_refused_transaction_do_not_stay(conns, monkeypatch):
    monkeypatch.setattr(rest, "REST_MIN", 10**9)     # the records' path (a big array is one rest)
    r, raw = conns
    s = setup(r, raw, time.time())
    prewrite, lapsed = writes.put_new_jobs, []

    def then_the_lease_lapses(rr, k, jobs, tasks=None):
        done = prewrite(rr, k, jobs, tasks)
        if not lapsed:
            lapsed.append(sorted(done))
            rr.delete(k.leader)
        return done
    monkeypatch.setattr(writes, "put_new_jobs", then_the_lease_lapses)
    push(r, "alice", {"rid": "big", "op": "submit", "body": json.dumps({**BODY, "array": [1, N, 1]})})
    got = None
    for _ in range(10):
        s.tick(time.time(), woke(r))
        got = reply(r, "big")
        if got is not None:
            break
    assert got and got["ok"] and got["count"] == N, got
    assert lapsed and len(lapsed[0]) == N and got["job_id"] != lapsed[0][0], "the first transaction was refused"
    indexed = {int(i) for i in r.zrange(K.active, 0, -1)}
    records = {int(key.rsplit(":", 1)[1]) for key in r.scan_iter(K.job("*"), count=5000)
               if key.rsplit(":", 1)[1].isdigit()}
    assert records == indexed, f"{len(records - indexed)} records of no queue, e.g. {sorted(records - indexed)[:3]}"
    assert reads.Reader(r, K).job(lapsed[0][0]) is None
    assert r.hlen(K.stat_rows) == len(indexed)
