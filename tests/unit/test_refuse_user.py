"""A job whose user no node's agent would run is refused at submit (policy.refusal, pure)."""
import pytest

from labq.scheduler.jobs.model import Job, Node
from labq.scheduler.policy.refusal import refusal
from tests.harness import cfg


def node(runs):
    return Node("n1", cpus=8, mem=1 << 34, slots=4, runs=runs)


@pytest.mark.parametrize("runs, user, refused", [
    ("", "root", False), ("*", "root", False), ("!root", "alice", False), ("!root", "root", True),
    ("alice", "alice", False), ("alice", "bob", True)])
def test_refusal_by_who_the_agent_runs(runs, user, refused):
    why = refusal(Job(id=1, user=user, account="default", argv=("true",)), (node(runs),), cfg())
    assert bool(why) == refused
    if refused:
        assert f"no node runs jobs as {user}" in why
