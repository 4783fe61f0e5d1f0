"""The config's dict-like sections as typed, frozen dataclasses: [priority], [worker], [alerts],
[history], [security]. Each is read by attribute (`cfg.priority.age_weight`); it also reads as the
mapping it used to be (`cfg.priority["age_weight"]`, `{**cfg.worker}`, `== {...}`), so code and
tests written against the dicts keep working while they move to attributes.
"""
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Self


class Section(Mapping[str, Any]):
    """A frozen dataclass that also reads as a mapping of its fields."""
    __slots__ = ()

    def __getitem__(self, key: str) -> Any:
        if key not in self._names():
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    @classmethod
    def _names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))  # type: ignore[arg-type]

    @classmethod
    def keys_(cls) -> set[str]:
        """The section's key names (the config checks a table against them)."""
        return set(cls._names())

    def with_(self, **changes: Any) -> Self:
        """A copy with some values changed (dataclasses.replace)."""
        return replace(self, **changes)  # type: ignore[type-var]


@dataclass(frozen=True, eq=False)
class Priority(Section):
    qos_weight: float = 1.0
    age_weight: float = 10.0
    age_max: float = 7 * 86400
    fairshare_weight: float = 50.0
    fairshare_half_life: float = 7 * 86400
    # A user who submits more than burst_jobs within burst_window has those extra jobs ranked
    # burst_penalty lower, so one script's 5,000 submits do not bury everyone else.
    burst_jobs: int = 100
    burst_window: float = 600
    burst_penalty: float = 20.0
    # Short jobs first (multifactor.py): off at 0; at most age_weight, so aging still wins.
    short_job_weight: float = 0.0
    short_job_scale: float = 3600


@dataclass(frozen=True, eq=False)
class Estimate(Section):
    """[estimate]: run times learned from ended jobs (estimate.py), and where they are used."""
    quantile: float = 0.75
    min_samples: int = 3
    window: int = 32            # runs kept per basis
    max_keys: int = 100_000     # bases kept (least recently used dropped)
    history: int = 20_000       # ended jobs relearned at start
    backfill: bool = False      # backfill plans with them instead of time limits
    forecast: bool = False      # the forecast budget mode commits them when --est is absent


@dataclass(frozen=True, eq=False)
class Worker(Section):
    name: str = ""
    gpus: Any = "auto"           # "auto", a count, or a JSON file of fake GPUs (tests, demos)
    gpu_model: str = "fake"
    cpus: Any = "auto"           # "auto" or a count
    mem: Any = "auto"            # "auto" or bytes
    slots: int = 0
    spool: str = "~/.local/state/labq"
    run_as: str = "submitter"    # "submitter" | "self"
    cgroups: str = "auto"        # "auto" | "off"
    allow_root: bool = False
    limit_cpus: bool = False
    pids_max: int = 0
    idle_gpu_util: float = 5
    idle_gpu_after: float = 1800
    stop_grace: float = 300
    slurm_env: bool = True
    compat_commands: bool = True  # srun/sbatch/squeue… as labq speaks them on jobs' PATH (worker/shimbin.py)
    pbs_env: bool = True         # PBS_JOBID, PBS_O_WORKDIR, PBS_NODEFILE… in jobs (worker/batchenv.py)
    sge_env: bool = True         # JOB_ID, SGE_TASK_*, NSLOTS… in jobs
    addr: str = ""               # where a gang's other nodes reach this one ("": the host name's address)


@dataclass(frozen=True, eq=False)
class Alerts(Section):
    command: str = ""
    webhook: str = ""
    timeout: float = 10


@dataclass(frozen=True, eq=False)
class History(Section):
    keep: float = 7 * 86400.0       # ended jobs and ledger entries stay in Redis this long
    url: str = ""                   # sqlite:///PATH; "" = history.db in the state directory
    purge_after: float | None = None   # archived jobs deleted after this long; None = never


@dataclass(frozen=True, eq=False)
class Security(Section):
    # auth "none" trusts the inbox name (single host, private socket); "munge" authenticates.
    auth: str = "none"
    admins: tuple[str, ...] = ("root",)
    munge_socket: str = ""
    credential_ttl: float = 300
