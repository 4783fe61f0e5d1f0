"""The order in which pending jobs are considered: QoS priority, then age, then id.

Deterministic by construction: the key is total over (priority, submit time, id), so shuffling the
input never changes the plan.
"""
from ..config import Config
from ..model import Job


def priority_key(job: Job, cfg: Config):
    qos = cfg.qos_named(job.qos)
    return (-(qos.priority if qos else 0), job.submit_time, job.id)


def ordered(pending, cfg: Config) -> list[Job]:
    return sorted(pending, key=lambda j: priority_key(j, cfg))
