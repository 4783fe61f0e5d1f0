"""The simulator's incremental burst count (scheduler/sim/queue.py `Bursts`) against
multifactor.burst_tail over the same pending jobs, after every submit and start of a random history."""
from hypothesis import given, settings, strategies as st

from labq.scheduler.jobs.model import Job
from labq.scheduler.multifactor import burst_tail
from labq.scheduler.sim.queue import Bursts

ops = st.lists(st.tuples(st.booleans(), st.integers(0, 2), st.integers(0, 40)), min_size=1, max_size=80)


@settings(max_examples=150, deadline=None)
@given(ops, st.integers(1, 4), st.sampled_from([0, 1, 5, 30]))
def test_bursts_match_burst_tail(history, allowance, window):
    b = Bursts(allowance, window)
    pending: dict[int, Job] = {}
    for n, (submit, user, t) in enumerate(history, start=1):
        if submit or not pending:
            job = Job(argv=("x",), workdir="/", account="a", id=n, user=f"u{user}", submit_time=float(t))
            pending[n] = job
            b.add(job)
        else:
            gone = pending.pop(sorted(pending)[t % len(pending)])
            b.remove(gone)
        tails = burst_tail(list(pending.values()), allowance, window)
        assert b.any() == bool(tails)
        assert b.total == len(tails)


def _tail_by_definition(pending, allowance, window) -> set[int]:
    """The rule spelled out, one job at a time: at least `allowance` jobs of the same user come
    before it in (submit time, id) order and were submitted no earlier than `window` before it."""
    return {j.id for j in pending
            if sum(1 for o in pending if o.user == j.user and (o.submit_time, o.id) < (j.submit_time, j.id)
                   and not o.submit_time < j.submit_time - window) >= allowance}


jobs = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 30), st.integers(1, 6)), max_size=40)


@settings(max_examples=400, deadline=None)
@given(jobs, st.integers(0, 5), st.sampled_from([0, 0.5, 1, 5, 30, 1e9]), st.randoms(use_true_random=False))
def test_burst_tail_is_the_rule(spec, allowance, window, rnd):
    """Tasks of an array share a submit time (`n` jobs at one time); input order is shuffled."""
    pending, n_id = [], 1
    for user, t, n in spec:
        for _ in range(n):
            pending.append(Job(argv=("x",), workdir="/", account="a", id=n_id, user=f"u{user}",
                               submit_time=t / 2))
            n_id += 1
    rnd.shuffle(pending)
    assert burst_tail(pending, allowance, window) == _tail_by_definition(pending, allowance, window)
