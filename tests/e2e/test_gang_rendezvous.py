"""A gang's part waiting for node rank 0's MASTER_ADDR/MASTER_PORT (worker/gang.py), one real runner
against a real redis-server: how long it may wait, what it tells meanwhile, how it ends if it stops."""
import threading

from labq.scheduler.jobs import states
from labq.scheduler.jobs.model import Attempt, Job
from labq.scheduler.store import codec
from tests.harness import ME, NODE, PY, K, finished, runner_env, start_runner, wait_for

LEASE_MS = 2000


def _rank_1_part(r, tmp_path, argv):
    """Job 1's attempt 1: rank 0 on node n0 (played by the test), rank 1 here."""
    parts = (("n0", ("GPU-n0-0",)), (NODE, ("GPU-fake-tnode-0",)))
    a = Attempt(1, "n0", ("GPU-n0-0", "GPU-fake-tnode-0"), parts=parts)
    job = Job(id=1, account="eta", user=ME, argv=argv, workdir=str(tmp_path), state=states.RUNNING, node="n0",
              gpu_uuids=a.gpus, attempts=(a,), nodes=2)
    r.set(K.job(1), codec.dumps(job))


class Lease:
    """The node's lease as its agent keeps it: LEASE_MS long, renewed every third of it."""

    def __init__(self, r):
        self.r, self.done = r, threading.Event()
        r.set(K.node_lease(NODE), "up", px=LEASE_MS)
        self.t = threading.Thread(target=self._renew, daemon=True)
        self.t.start()

    def _renew(self):
        while not self.done.wait(LEASE_MS / 3000):
            self.r.pexpire(K.node_lease(NODE), LEASE_MS)

    def stop(self):
        self.done.set()
        self.t.join()


def test_a_part_waiting_for_rank_0_beats_and_outwaits_the_lease_it_saw_with_its_claim(real_redis, redis_server,
                                                                                       tmp_path):
    """Rank 0's node slow to take its part (its runner restarting after a crash waits up to 30 s)
    while rank 1 has claimed its own: rank 1 waits for rank 0 heart-beating, as a running part
    does, and starts once rank 0 publishes. It read the lease once, with its claim, gave up when
    that ran out (node_lease at most) and ended the gang `error`: FAILED, not requeued, though
    nothing had run; and, silent since its claim, it was the agent's to kill as a hung runner."""
    out = tmp_path / "master"
    _rank_1_part(real_redis, tmp_path, ("/bin/sh", "-c", f"echo $MASTER_ADDR:$MASTER_PORT > {out}"))
    lease = Lease(real_redis)
    try:
        p = start_runner(runner_env(redis_server, tmp_path, LABQ_LEASE=str(LEASE_MS / 1000)))
        part = K.part(1, 1, 1)

        def waited_past_its_claims_lease():
            claimed, hb = real_redis.hmget(part, ["claimed_at", "hb"])
            return p.poll() is not None or (claimed and hb and float(hb) - float(claimed) > 2 * LEASE_MS / 1000)

        wait_for(waited_past_its_claims_lease, 60, what="rank 1 to wait two leases past its claim")
        assert p.poll() is None, ("rank 1 gave up waiting", p.communicate(), finished(real_redis))
        assert not out.exists()
        real_redis.hset(K.part(1, 1, 0), mapping={"addr": "127.0.0.1", "port": 29500})   # rank 0 publishes
        stdout, stderr = p.communicate(timeout=60)
    finally:
        lease.stop()
    assert p.returncode == 0, stderr
    assert out.read_text().strip() == "127.0.0.1:29500"
    assert finished(real_redis)["outcome"] == "completed"


def test_a_part_whose_lease_lapses_while_it_waits_is_a_node_failure_not_an_error(real_redis, redis_server,
                                                                                  tmp_path):
    """The node's lease gone while rank 1 waits for rank 0 (its agent stopped or cut off): nothing
    ran, so the attempt is a node failure (requeued), not `error` (the job F)."""
    marker = tmp_path / "ran"
    _rank_1_part(real_redis, tmp_path, (PY, "-c", f"open({str(marker)!r}, 'w')"))
    real_redis.set(K.node_lease(NODE), "up", px=LEASE_MS)     # no one renews it
    p = start_runner(runner_env(redis_server, tmp_path, LABQ_LEASE=str(LEASE_MS / 1000)))
    _, stderr = p.communicate(timeout=60)
    assert p.returncode == 0, stderr
    body = finished(real_redis)
    assert body["outcome"] == "node_failure" and "lease" in body["message"] and body["start_time"] is None, body
    assert not marker.exists()
