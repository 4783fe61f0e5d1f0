"""Issue 35: a job whose last attempt was lost with its node (node_failure) or never taken up
there (withdrawn) goes to another node when one can hold it, and back to the same one only when no
other can. Pure plan(), per job and by class (many alike jobs take the class walk)."""
import pytest

from labq.scheduler import policy
from labq.scheduler.jobs import states
from labq.scheduler.jobs.model import Attempt
from tests.harness import ClusterBuilder, cfg, summarize


def requeued(b: ClusterBuilder, outcome: str, node: str = "small", n: int = 1) -> ClusterBuilder:
    for _ in range(n):
        b.job(gpus=1, attempts=(Attempt(1, node, (f"GPU-{node}-0",), start_time=b.now - 50, end_time=b.now - 1,
                                        outcome=outcome),))
    return b


@pytest.mark.parametrize("outcome", ["node_failure", "withdrawn"])
def test_the_next_attempt_avoids_the_node_it_was_lost_on(outcome):
    # Best fit alone would pick "small" (the tightest).
    b = requeued(ClusterBuilder().node("big", gpus=8).node("small", gpus=2), outcome)
    assert summarize(policy.plan(b.build(), cfg()))["places"][1][0] == "big"


@pytest.mark.parametrize("n", [1, 40])
def test_back_to_the_same_node_only_when_no_other_can_hold_it(n):
    b = requeued(ClusterBuilder().node("big", gpus=8).node("small", gpus=2).running("big", gpus=8), "node_failure",
                 n=n)
    places = summarize(policy.plan(b.build(), cfg()))["places"]
    assert {node for node, _ in places.values()} == {"small"} and len(places) == min(n, 2)


def test_other_outcomes_take_the_best_fit_as_before():
    b = requeued(ClusterBuilder().node("big", gpus=8).node("small", gpus=2), "preempted")
    assert summarize(policy.plan(b.build(), cfg()))["places"][1][0] == "small"


def test_many_alike_jobs_lost_on_a_node_go_elsewhere_by_class():
    b = requeued(ClusterBuilder().node("big", gpus=16).node("small", gpus=2), "node_failure", n=40)
    s = summarize(policy.plan(b.build(), cfg()))
    on = [node for node, _ in s["places"].values()]
    # The other node first; the one they were lost on only for what the other cannot hold.
    assert (on.count("big"), on.count("small")) == (16, 2), on
    assert set(s["pending"].values()) <= {states.RESOURCES, states.PRIORITY}


def test_a_gang_lost_with_a_node_takes_others_first():
    # a and b are the tightest (best fit alone would take them again); c and d have room too
    b = ClusterBuilder().node("a", gpus=2).node("b", gpus=2).node("c", gpus=4).node("d", gpus=4)
    parts = (("a", ("GPU-a-0",)), ("b", ("GPU-b-0",)))
    b.job(gpus=1, nodes=2, attempts=(Attempt(1, "a", ("GPU-a-0", "GPU-b-0"), start_time=b.now - 50,
                                             end_time=b.now - 1, outcome="node_failure", parts=parts),))
    place = policy.plan(b.build(), cfg()).places[0]
    assert sorted(n for n, _ in place.parts) == ["c", "d"], place
    b.running("c", gpus=4).running("d", gpus=4)
    place = policy.plan(b.build(), cfg()).places[0]
    assert sorted(n for n, _ in place.parts) == ["a", "b"], "the same nodes when no others can hold it"
