"""multifactor.ranked (`labq prio`'s factors and order, column by column in C loops) gives the very floats
and the very order that multifactor.factors and multifactor.ordered give (the planner's): bit for bit
(compared by repr, so 0.0 and -0.0, 1 and 1.0 differ), for integer and float weights, zero weights,
bursts of equal submit times, jobs submitted after `now`, aged-out jobs, QoS names and accounts the
config lacks. burst_columns is burst_tail's set."""
from hypothesis import given, settings, strategies as st

from labq.scheduler import multifactor
from labq.scheduler.jobs.model import Job
from tests.harness import cfg, prio_config

NOW = 1_000_000.0
weight = st.one_of(st.integers(0, 60), st.floats(0, 60), st.sampled_from([0, 0.0, 1, 1.5, 10, 50.0]))
jobs = st.lists(st.tuples(st.sampled_from(["alice", "bob", "carol"]), st.sampled_from(["eta", "phi", "zed"]),
                          st.sampled_from(["normal", "low", "high", "gone"]),
                          st.one_of(st.floats(-300, 20_000), st.sampled_from([0.0, 5.0, 7200.0, 7200.5, 1e6]))),
                max_size=40)




@settings(max_examples=200, deadline=None)
@given(jobs, st.dictionaries(st.sampled_from(["eta", "phi", "zed"]), st.floats(0, 1e6), max_size=3),
       weight, weight, weight, weight, st.sampled_from([1, 60, 7200]), st.integers(1, 4), st.sampled_from([0, 1, 600]))
def test_ranked_is_factors_and_ordered_bit_for_bit(specs, usage, qw, aw, fw, bp, age_max, burst_jobs, window):
    if aw > 60 or qw > 60 or fw > 60 or bp > 60:    # TOML's float text of st.floats' largest
        return
    c = cfg(prio_config(qw, aw, fw, bp, age_max, burst_jobs, window))
    records = [Job(i + 1, user, account, qos=qos, submit_time=NOW - wait)
               for i, (user, account, qos, wait) in enumerate(specs)]
    records.reverse()       # not in id order: the order and the tail must not depend on it
    got = multifactor.ranked([j.id for j in records], [j.user for j in records], [j.account for j in records],
                             [j.qos for j in records], [j.submit_time for j in records], NOW, dict(usage), c)
    assert got is not None
    order, factors = got
    assert [records[i].id for i in order] == [j.id for j in multifactor.ordered(records, NOW, dict(usage), c)]
    want = multifactor.factors(records, NOW, dict(usage), c)
    assert list(factors) == list(want)
    assert {k: repr(v) for k, v in factors.items()} == {k: repr(v) for k, v in want.items()}
    assert all(type(v) is multifactor.Factors for v in factors.values())
    for allowance in (0, burst_jobs):      # the config's is at least 1; burst_tail takes 0 too
        assert multifactor.burst_columns([j.id for j in records], [j.user for j in records],
                                         [j.submit_time for j in records], allowance, window) == \
            multifactor.burst_tail(records, allowance, window)


def test_ranked_leaves_the_short_job_term_to_factors_and_ordered():
    c = cfg("[priority]\nshort_job_weight = 5\nage_weight = 10\n")
    assert multifactor.ranked([1], ["alice"], ["eta"], ["normal"], [NOW - 5], NOW, {}, c) is None
