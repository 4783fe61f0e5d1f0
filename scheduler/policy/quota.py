"""Array throttles (`-a 1-12%4`) and account caps (`max_running`, `max_gpus`): a job that would
exceed one pends with its reason."""
from collections import Counter

from .. import states
from ..config import Config
from ..model import Job


class Usage:
    """Running jobs and GPUs per account, counting what this pass has already admitted."""

    def __init__(self, running):
        self.jobs: Counter = Counter()
        self.gpus: Counter = Counter()
        self.tasks: Counter = Counter()   # running tasks per array
        for j in running:
            self.add(j)

    def add(self, job: Job) -> None:
        self.jobs[job.account] += 1
        self.gpus[job.account] += job.gpus
        if job.array_id is not None:
            self.tasks[job.array_id] += 1

    def blocked(self, job: Job, cfg: Config):
        """(reason, detail) when an array throttle or an account cap stops the job now, else None."""
        if job.array_throttle and self.tasks[job.array_id] >= job.array_throttle:
            return (states.ARRAY_TASK_LIMIT,
                    f"array {job.array_id} runs {self.tasks[job.array_id]} tasks, throttle %{job.array_throttle}")
        acct = cfg.account_named(job.account)
        if acct is None:
            return None
        if acct.max_running is not None and self.jobs[job.account] + 1 > acct.max_running:
            return (states.ACCOUNT_JOB_LIMIT,
                    f"account {job.account} runs {self.jobs[job.account]} of max_running={acct.max_running} jobs")
        if acct.max_gpus is not None and self.gpus[job.account] + job.gpus > acct.max_gpus:
            return (states.ACCOUNT_GPU_LIMIT,
                    f"account {job.account} uses {self.gpus[job.account]} GPUs, needs {job.gpus} more, "
                    f"max_gpus={acct.max_gpus}")
        return None
