"""RQ as transport only: one RQ job per admitted attempt, on the node's queue.

The RQ job carries nothing but (job id, attempt): the spec stays in labq's record, so a stale or
forged RQ job can at most ask a runner to check a record that says no. Enqueueing goes into the
scheduler's own transaction pipeline, so an attempt is admitted and dispatched together or not at all.
"""
from rq import Queue
from rq.job import Job as RQJob
from rq.serializers import JSONSerializer

from .model import Job
from .store.keys import Keys

RUNNER = "labq.worker.runner.run_job"
BACKSTOP_S = 300    # RQ's own timeout only catches a runner that failed to enforce the deadline itself


def rq_job_id(job_id: int, attempt: int) -> str:
    return f"{job_id}-a{attempt}"


class Dispatcher:
    def __init__(self, rq_conn, kill_wait: int):
        self.rq, self.kill_wait = rq_conn, kill_wait
        self._queues: dict[str, Queue] = {}

    def queue(self, node: str) -> Queue:
        q = self._queues.get(node)
        if q is None:
            q = self._queues[node] = Queue(Keys.rq_queue(node), connection=self.rq, serializer=JSONSerializer)
        return q

    def enqueue(self, pipe, job: Job) -> None:
        """Add the RQ job of `job`'s current attempt to `pipe` (a MULTI pipeline)."""
        a = job.current
        self.queue(a.node).enqueue_call(
            RUNNER, kwargs={"job_id": job.id, "attempt": a.attempt}, job_id=rq_job_id(job.id, a.attempt),
            timeout=job.time_limit + self.kill_wait + BACKSTOP_S, result_ttl=86400, failure_ttl=7 * 86400,
            description=f"labq job {job.id} attempt {a.attempt}", pipeline=pipe)

    def exists(self, job: Job) -> bool:
        return RQJob.exists(rq_job_id(job.id, job.current.attempt), connection=self.rq)
