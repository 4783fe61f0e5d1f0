"""The RQ worker the agent runs `slots` of: transport for labq's runner and nothing else.

`python -m labq.worker.rqworker --url URL --queue Q --node N --slot I`
"""
import argparse
import contextlib
import logging
import os
import signal
import sys
import uuid

from rq import Queue, Worker
from rq.worker import WorkerStatus
from rq.serializers import JSONSerializer

from labq.scheduler.store import conn

from . import cgroup, probe
from .runner import RUNNER

log = logging.getLogger("labq.rqworker")

MONITOR_INTERVAL = 5    # how often the worker heartbeats RQ while a job runs
WORKER_TTL = 60         # a dead worker's key expires soon, so `rq info` stays truthful


def refusal(job) -> str | None:
    """Why this RQ job is not labq's runner call, or None. Anyone who can write Redis can enqueue
    anything; executing only run_job(job_id=int, attempt=int) keeps Redis access from meaning root."""
    try:
        func, args, kwargs = job.func_name, job.args, job.kwargs
    except Exception as e:        # undecodable payload (not JSON, or not ours)
        return f"undecodable job: {e!r}"
    if func != RUNNER:
        return f"function {func!r} is not {RUNNER}"
    if args or set(kwargs) != {"job_id", "attempt"} or not all(
            isinstance(kwargs[k], int) and not isinstance(kwargs[k], bool) for k in kwargs):
        return f"{RUNNER} takes only job_id=<int>, attempt=<int>"
    return None


def new_name(node: str, slot: int) -> str:
    # Unique per start: a SIGKILLed worker's key lingers, and reusing its name would fail (§1.4).
    return f"{node}-{slot}-{uuid.uuid4().hex[:6]}"


class LabqWorker(Worker):
    agent_pid: int | None = None

    def execute_job(self, job, queue):
        why = refusal(job)
        if why is None:
            return super().execute_job(job, queue)
        log.warning("worker %s refused RQ job %s: %s", self.name, job.id, why)
        job.retries_left = 0          # a refused job must not come back through RQ's Retry
        self.prepare_execution(job)
        # Same bookkeeping as a run (off the intermediate queue, into the registries) minus the fork.
        self.prepare_job_execution(job, remove_from_intermediate_queue=len(self.queues) == 1)
        self.handle_job_failure(job, queue=queue, exc_string=f"refused by labq: {why}")
        self.set_state(WorkerStatus.IDLE)

    def kill_horse(self, sig=signal.SIGKILL):
        """Every hard stop (stop-job, cold shutdown, RQ's timeout+60) comes here. The job runs in
        its own session, so RQ's killpg of the horse's group would miss it: kill the tree too.
        The runner goes first: alive, it would see its job die and report that as the job's own
        exit (`F`), where the truth is a node failure (`NF`, requeued)."""
        tree = probe.descendants(self.horse_pid) if self.horse_pid else []
        super().kill_horse(sig)
        for pid in tree:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        self._kill_job_cgroup()

    def _kill_job_cgroup(self) -> None:
        """The runner dies here without cleaning up: kill and remove its job's cgroup (RQ job id
        "<job>-a<attempt>" names it), so nothing in it outlives the attempt."""
        base = os.environ.get("LABQ_CGROUP_BASE")
        if not base:
            return
        try:
            rq_id = self.get_current_job_id()     # from Redis: it may be down on this path
        except Exception as e:
            log.warning("worker %s: cannot tell the job to clean up after (%r); the agent's sweep will", self.name, e)
            return
        job, sep, attempt = (rq_id or "").rpartition("-a")
        if sep and job.isdigit() and attempt.isdigit():
            cg = cgroup.JobCgroup.for_attempt(base, int(job), int(attempt))
            if os.path.isdir(cg.path):
                cg.kill()
                cg.remove(timeout=5.0)

    def request_stop(self, signum, frame):
        """A SIGTERM while the agent lives is its orderly stop: RQ's warm shutdown. A SIGTERM after
        the agent died (PDEATHSIG) must not let a job outlive the node's lease: cold, at once."""
        if self.agent_pid and os.getppid() != self.agent_pid:
            log.warning("worker %s: the agent is gone, stopping cold", self.name)
            if self.horse_pid:
                self.kill_horse()
                self.wait_for_horse()
            raise SystemExit(1)
        super().request_stop(signum, frame)


def build(url: str, queue: str, node: str, slot: int) -> LabqWorker:
    rq_conn = conn.connect_raw(url)     # RQ's own bytes connection: it changes socket timeouts
    q = Queue(queue, connection=rq_conn, serializer=JSONSerializer)
    return LabqWorker([q], connection=rq_conn, name=new_name(node, slot), serializer=JSONSerializer,
                      job_monitoring_interval=MONITOR_INTERVAL, worker_ttl=WORKER_TTL)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m labq.worker.rqworker")
    p.add_argument("--url", required=True)
    p.add_argument("--queue", required=True)
    p.add_argument("--node", required=True)
    p.add_argument("--slot", type=int, required=True)
    a = p.parse_args(argv)
    probe.die_with_parent(signal.SIGTERM)
    agent = int(os.environ.get("LABQ_AGENT_PID") or 0) or None
    if agent and os.getppid() != agent:
        return 1                      # the agent died before PDEATHSIG was armed
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    w = build(a.url, a.queue, a.node, a.slot)
    w.agent_pid = agent
    w.work(logging_level=os.environ.get("LABQ_RQ_LOG_LEVEL", "WARNING"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
