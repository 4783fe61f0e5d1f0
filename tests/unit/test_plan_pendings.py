"""plan.Pendings: Plan.pending as runs (ids, verdict) reads as the sequence of Pending it stands for."""
from labq.scheduler.jobs import states
from labq.scheduler.jobs.plan import Pending, Pendings, pending_runs


def test_runs_read_as_their_pendings_and_compare_with_a_tuple():
    one = Pending(7, states.HELD, "held")
    p = Pendings([one], [([1, 2], (states.PRIORITY, "took", "", ())), ((5,), (states.RESOURCES, "none", "n1", ("g",)))])
    want = (one, Pending(1, states.PRIORITY, "took"), Pending(2, states.PRIORITY, "took"),
            Pending(5, states.RESOURCES, "none", "n1", ("g",)))
    assert len(p) == 4 and tuple(p) == want and p == want and p[1] == want[1] and list(p[2:]) == list(want[2:])
    assert [(tuple(ids), v[0]) for ids, v in pending_runs(p)] == [((7,), states.HELD), ((1, 2), states.PRIORITY),
                                                                  ((5,), states.RESOURCES)]
    # a plain tuple of Pending (tests, the daemon's filtered plan) runs one job at a time
    assert [tuple(ids) for ids, _ in pending_runs(want)] == [(7,), (1,), (2,), (5,)]
    assert Pendings() == () and len(Pendings()) == 0
