"""Caps that pend a job whatever the free capacity: array throttles (`-a 1-12%4`), account and user
caps (running jobs, GPUs, CPUs), an account's borrow limit, and GPUs protected for a higher QoS.

Guarantee and borrow: an account is owed `guarantee` GPUs. GPUs it holds beyond that are borrowed
(marked on the attempt, preemptible, reclaimed when a lender wants its guarantee back); it may hold
at most `guarantee + borrow_limit`.
"""
from collections import Counter
from collections.abc import Callable, Iterable
from copy import copy

from ..jobs import states
from ..jobs.model import Job
from ..settings.config import Account, Config, User


class Usage:
    """What running jobs hold, per account, user, array and QoS, counting this pass's admissions."""

    def __init__(self, running: Iterable[Job], cfg: Config, total_gpus: int) -> None:
        self.cfg = cfg
        self.jobs: Counter[str] = Counter()
        self.gpus: Counter[str] = Counter()
        self.cpus: Counter[str] = Counter()
        self.user_jobs: Counter[str] = Counter()
        self.user_gpus: Counter[str] = Counter()
        self.user_cpus: Counter[str] = Counter()
        self.tasks: Counter[int | None] = Counter()   # running tasks per array
        self.qos_gpus: Counter[int] = Counter()   # GPUs held per QoS priority level
        self.free_gpus = total_gpus
        self.guarantees = any(a.guarantee for a in cfg.accounts)
        # Most pending jobs meet no cap at all: knowing which accounts have one skips the checks.
        self.capped = {a.name for a in cfg.accounts
                       if a.borrow_limit is not None or any(getattr(a, c) is not None for c in
                                                            ("max_running", "max_gpus", "max_cpus"))}
        self.user_caps = bool(cfg.users)
        self.caps = self.user_caps or bool(self.capped)    # whether a cap may stop a job without a throttle
        # (priority, reserved GPUs) of each class that protects capacity, highest first
        self.protected = sorted(((q.priority, q.reserved) for q in cfg.qos if q.reserved), reverse=True)
        for j in running:
            self.add(j, freed=False)

    def add(self, job: Job, freed: bool = True, sign: int = 1) -> None:
        """Count the job as running (`sign` -1: no longer; standing.py), taking its GPUs off the
        free ones unless they were never counted free (`freed` False: a running job at the start)."""
        gpus, cpus = sign * job.total_gpus, sign * job.cpus * job.nodes    # a gang holds its shape on every node
        self.jobs[job.account] += sign
        self.gpus[job.account] += gpus
        self.cpus[job.account] += cpus
        self.user_jobs[job.user] += sign
        self.user_gpus[job.user] += gpus
        self.user_cpus[job.user] += cpus
        self.qos_gpus[self._prio(job)] += gpus
        if freed:
            self.free_gpus -= gpus
        if job.array_id is not None:
            self.tasks[job.array_id] += sign

    def copy(self) -> "Usage":
        """A Usage that counts alike and changes apart from this one."""
        other = copy(self)
        for name, value in vars(self).items():
            if isinstance(value, Counter):
                setattr(other, name, Counter(value))
        return other

    def _prio(self, job: Job) -> int:
        q = self.cfg.qos_named(job.qos)
        return q.priority if q else 0

    def borrows(self, job: Job) -> bool:
        """Whether admitting the job takes its account beyond its guarantee (the GPUs are lent)."""
        if not self.guarantees or not job.gpus:
            return False
        acct = self.cfg.account_named(job.account)
        return self.gpus[job.account] + job.total_gpus > (acct.guarantee if acct else 0)

    def within_guarantee(self, job: Job) -> bool:
        acct = self.cfg.account_named(job.account)
        return bool(acct and acct.guarantee and job.gpus
                    and self.gpus[job.account] + job.total_gpus <= acct.guarantee)

    def blocked(self, job: Job) -> tuple[str, str] | None:
        """(reason, detail) when a throttle or cap stops the job now, else None."""
        if not (job.array_throttle or self.user_caps or job.account in self.capped):
            return None
        if job.array_throttle and self.tasks[job.array_id] >= job.array_throttle:
            return (states.ARRAY_TASK_LIMIT,
                    f"array {job.array_id} runs {self.tasks[job.array_id]} tasks, throttle %{job.array_throttle}")
        acct = self.cfg.account_named(job.account)
        if acct is not None:
            hit = _over(acct, ("account", job.account), self.jobs[job.account], self.gpus[job.account],
                        self.cpus[job.account], job, states.ACCOUNT_JOB_LIMIT, states.ACCOUNT_GPU_LIMIT,
                        states.ACCOUNT_CPU_LIMIT)
            if hit:
                return hit
            if acct.borrow_limit is not None and job.gpus:
                most = acct.guarantee + acct.borrow_limit
                if self.gpus[job.account] + job.total_gpus > most:
                    return (states.ACCOUNT_GPU_LIMIT,
                            f"account {job.account} holds {self.gpus[job.account]} GPUs, needs {job.total_gpus} more; "
                            f"guarantee {acct.guarantee} + borrow_limit {acct.borrow_limit} = {most}")
        user = self.cfg.user_named(job.user)
        if user is not None:
            hit = _over(user, ("user", job.user), self.user_jobs[job.user], self.user_gpus[job.user],
                        self.user_cpus[job.user], job, states.USER_JOB_LIMIT, states.USER_GPU_LIMIT,
                        states.USER_CPU_LIMIT)
            if hit:
                return hit
        return None

    def tight(self, account: str, user: str, gpus: int, cpus: int) -> bool:
        """Whether an account or user cap of `account` or `user` could stop a job that needs at most
        `gpus` GPUs and `cpus` CPUs now (throttles aside). False is a promise that `blocked` passes
        every such job of theirs that passed it before: classes.py asks this after an admission
        instead of asking `blocked` again for each class of the account and the user."""
        acct = self.cfg.account_named(account) if account in self.capped else None
        if acct is not None and (_near(acct, self.jobs[account], self.gpus[account], self.cpus[account], gpus, cpus)
                                 or acct.borrow_limit is not None
                                 and self.gpus[account] + gpus > acct.guarantee + acct.borrow_limit):
            return True
        cap = self.cfg.user_named(user) if self.user_caps else None
        return cap is not None and _near(cap, self.user_jobs[user], self.user_gpus[user], self.user_cpus[user],
                                         gpus, cpus)

    def protected_for(self, job: Job) -> tuple[str, str] | None:
        """(reason, detail) when the job's GPUs would eat into capacity protected for a higher QoS."""
        if not self.protected or not job.gpus:
            return None
        mine = self._prio(job)
        owed = 0
        for prio, reserved in self.protected:
            if prio <= mine:
                break
            held = sum(n for p, n in self.qos_gpus.items() if p >= prio)
            owed = max(owed, reserved - held)
        if owed > 0 and self.free_gpus - job.total_gpus < owed:
            return (states.RESERVED_CAPACITY,
                    f"{owed} of the {self.free_gpus} free GPUs are protected for higher QoS classes")
        return None


def _over(cap: Account | User, who: str | tuple[str, str], jobs: int, gpus: int, cpus: int, job: Job, r_jobs: str,
          r_gpus: str, r_cpus: str) -> tuple[str, str] | None:
    """`who`: the capped one's name, or (kind, name) to be joined only when a cap is hit (plan()
    asks this for every pending job of a capped account)."""
    if cap.max_running is not None and jobs + 1 > cap.max_running:
        return r_jobs, f"{_who(who)} runs {jobs} of max_running={cap.max_running} jobs"
    need_g, need_c = job.total_gpus, job.cpus * job.nodes
    if cap.max_gpus is not None and gpus + need_g > cap.max_gpus:
        return r_gpus, f"{_who(who)} holds {gpus} GPUs, needs {need_g} more, max_gpus={cap.max_gpus}"
    if cap.max_cpus is not None and cpus + need_c > cap.max_cpus:
        return r_cpus, f"{_who(who)} holds {cpus} CPUs, needs {need_c} more, max_cpus={cap.max_cpus}"
    return None


def _near(cap: Account | User, jobs: int, gpus: int, cpus: int, need_g: int, need_c: int) -> bool:
    """_over's test with the largest needs."""
    return (cap.max_running is not None and jobs + 1 > cap.max_running
            or cap.max_gpus is not None and gpus + need_g > cap.max_gpus
            or cap.max_cpus is not None and cpus + need_c > cap.max_cpus)


def _who(who: str | tuple[str, str]) -> str:
    return who if isinstance(who, str) else " ".join(who)


def over_alone(job: Job, cfg: Config, running: Iterable[Job] = ()) -> str | None:
    """The refusal line for a job that alone exceeds a cap (it could never run, whatever on_limit
    says: pending would be for ever), or, with on_limit = "refuse", one over a cap now, counting
    the `running` jobs."""
    caps: tuple[tuple[Account | User | None, str, Callable[[Job], bool]], ...] = (
        (cfg.account_named(job.account), f"account {job.account}", lambda j: j.account == job.account),
        (cfg.user_named(job.user), f"user {job.user}", lambda j: j.user == job.user))
    for cap, who, mine in caps:
        if cap is None:
            continue
        for key, need in (("max_gpus", job.total_gpus), ("max_cpus", job.cpus * job.nodes)):
            most = getattr(cap, key)
            if most is not None and need > most:
                return f"{who}: the job asks for {need} {key[4:].upper()}, {key}={most}: it could never run"
        if cap.max_running == 0:
            return f"{who}: max_running=0"
        if cap.on_limit == "refuse":
            held = [j for j in running if mine(j)]
            hit = _over(cap, who, len(held), sum(j.total_gpus for j in held), sum(j.cpus * j.nodes for j in held), job,
                        "", "", "")
            if hit:
                return f"{hit[1]} (on_limit = \"refuse\")"
    return None
