"""`labq prio` ranks from the client settings cache (clientconf.books_of: the [priority] table, each QoS's
priority, each account's share) and job views (store/jobview.py), not from config.Config and model.Job
(issue 39 item 4): the factors and the order are the very ones the planner's multifactor.py gives."""
import json

from hypothesis import given, settings, strategies as st

from labq.cli.prio import Books, pending_of
from labq.scheduler import multifactor
from labq.scheduler.jobs.model import Job
from labq.scheduler.settings.clientconf import books_of
from labq.scheduler.store import codec, jobview, statrows
from tests.harness import cfg, prio_config

CONFIG = prio_config(1.5, 10, 50, 20, '"2h"', 2, '"10m"', 'short_job_weight = 7\nshort_job_scale = "30m"\n')

NOW = 1_000_000.0
jobs = st.lists(st.tuples(st.sampled_from(["alice", "bob", "carol"]), st.sampled_from(["eta", "phi", "zed"]),
                          st.sampled_from(["normal", "low", "high", "gone"]), st.floats(0, 20_000),
                          st.sampled_from([None, 60, 5000]), st.sampled_from([0, 600, 86400])), max_size=25)


def test_the_cached_books_give_what_the_config_gives():
    c = cfg(CONFIG)
    books = Books(json.loads(json.dumps(books_of(c))))        # as the cache file keeps them
    for name in ("qos_weight", "age_weight", "age_max", "fairshare_weight", "fairshare_half_life", "burst_jobs",
                 "burst_window", "burst_penalty", "short_job_weight", "short_job_scale"):
        got, want = books.priority[name], c.priority[name]
        assert (got, type(got)) == (want, type(want)) == (getattr(books.priority, name), type(want)), name
    assert [(q.name, q.priority) for q in books.qos] == [(q.name, q.priority) for q in c.qos]
    assert [(a.name, a.share) for a in books.accounts] == [(a.name, a.share) for a in c.accounts]
    assert books.qos_named("low").priority == c.qos_named("low").priority == 3
    assert books.qos_named("gone") is c.qos_named("gone") is None


@settings(max_examples=60, deadline=None)
@given(jobs, st.dictionaries(st.sampled_from(["eta", "phi", "zed"]), st.floats(0, 1e6), max_size=3))
def test_prio_ranks_as_the_planner_does(specs, usage):
    c = cfg(CONFIG)
    books = Books(json.loads(json.dumps(books_of(c))))
    records = [Job(i + 1, user, account, qos=qos, submit_time=NOW - wait, est=est, time_limit=limit)
               for i, (user, account, qos, wait, est, limit) in enumerate(specs)]
    views = [jobview.loads(codec.dumps(j)) for j in records]
    assert multifactor.factors(views, NOW, usage, books) == multifactor.factors(records, NOW, usage, c)
    assert [j.id for j in multifactor.ordered(views, NOW, usage, books)] == \
        [j.id for j in multifactor.ordered(records, NOW, usage, c)]


@settings(max_examples=60, deadline=None)
@given(jobs, st.dictionaries(st.sampled_from(["eta", "phi", "zed"]), st.floats(0, 1e6), max_size=3),
       st.sampled_from([None, 120]))
def test_prio_ranks_from_the_stat_rows_as_the_planner_does(specs, usage, learned):
    """`labq prio` reads pending jobs from their `stat` rows (statrows.py's `prio` field: submit time,
    expected run time), not their records: the same factors, order and ids as the records give."""
    c = cfg(CONFIG)
    books = Books(json.loads(json.dumps(books_of(c))))
    records = [Job(i + 1, user, account, qos=qos, submit_time=NOW - wait, est=est, time_limit=limit,
                   learned_est=learned, **({"array_id": 1, "array_index": 5 + i} if i % 3 == 1 else {}))
               for i, (user, account, qos, wait, est, limit) in enumerate(specs)]
    rows = statrows.parse([statrows.dumps(j) for j in reversed(records)])
    pending = pending_of(rows)
    assert [(j.id, j.display_id) for j in pending] == [(j.id, j.display_id) for j in records]
    assert multifactor.factors(pending, NOW, usage, books) == multifactor.factors(records, NOW, usage, c)
    assert [j.id for j in multifactor.ordered(pending, NOW, usage, books)] == \
        [j.id for j in multifactor.ordered(records, NOW, usage, c)]
