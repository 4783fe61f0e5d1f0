"""An orphaned idle slot runner gives the node's lease up and exits 0, also when the agent's
death signal lands while it does so (found by bench/soak.py, issue 35 item 1).

The soak's run: kill -9 of the agent; an idle runner saw its new parent first, left its loop, and
was giving the lease up when PR_SET_PDEATHSIG arrived: its handler raised the loop's stop outside
the loop - a traceback, exit 1, the lease give-up cut short (the node looked alive until its lease
lapsed). Here the signal is delivered inside the give-up's call, deterministically, in a process of
its own (the runner kills its whole tree on that signal)."""
import subprocess
import sys

from tests.harness import E2E_MARKS, NODE, ROOT, K

pytestmark = E2E_MARKS

CHILD = """
import os, sys
sys.path.insert(0, {root!r})
from labq.worker import launch, proctree
from labq.worker.slot import SlotRunner
s = launch.Settings(redis_url={url!r}, node={node!r}, spool={spool!r}, epoch="epoch-1", agent_pid=-1)
r = SlotRunner(s, 0, agent_pid=-1)          # not its parent: orphaned from the start
r.orphaned = True
real = r.store.give_up_lease

def racing(node, epoch):
    os.kill(os.getpid(), proctree.PARENT_DIED)      # the agent's death signal lands mid-call
    given = real(node, epoch)
    print("given", given, flush=True)
    return given

r.store.give_up_lease = racing
sys.exit(r.run())
"""


def test_the_agents_death_signal_during_the_lease_give_up_cuts_nothing_short(redis_server, real_redis, tmp_path):
    real_redis.set(K.node_lease(NODE), "epoch-1")
    code = CHILD.format(root=ROOT, url=redis_server.url, node=NODE, spool=str(tmp_path / "spool"))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr[-2000:]
    assert p.stdout.split() == ["given", "True"] and real_redis.get(K.node_lease(NODE)) is None
