"""The simulator's incremental burst count (scheduler/sim/queue.py `Bursts`) against
priority.burst_tail over the same pending jobs, after every submit and start of a random history."""
from hypothesis import given, settings, strategies as st

from labq.scheduler.model import Job
from labq.scheduler.policy.priority import burst_tail
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
