"""TOML configuration → validated, frozen config. Every error names the key and what is expected.

The key names are a contract (DESIGN §8): add keys, rename none. Unknown keys are errors, because a
misspelt limit that is silently ignored is worse than a refusal to start.
"""
import tomllib
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from .. import units
from ..errors import ConfigError, UsageError
from ..jobs import bounds
from ..money.ledger import Budget, cap
from .clientconf import (
    TOO_DEEP,
    _check_keys,
    _dur,
    _str,
    _table,
    boolean as _bool,
    history_table,
    read_toml,
    redis_table,
    refuse_removed,
    resolve_path,
    security_table,
)
from .configcheck import (
    MAX_RATE,
    address as _address,
    alerts as _alerts,
    budget as _budget,
    caps as _caps,
    num as _num,
    scheduler_times as _scheduler_times,
    users as _users,
)
from .sections import Alerts, Estimate, History, Priority, Security, Worker

# Checkpoint signals a QoS may send first on preemption: the ones --signal allows (never KILL or STOP).
QOS_SIGNALS = frozenset({"USR1", "USR2", "TERM", "INT", "HUP", "QUIT", "ALRM", "URG"})


@dataclass(frozen=True)
class Qos:
    name: str
    priority: int = 0
    preemptible: bool = False
    grace: int = 120
    min_runtime: int = 600
    max_preemptions: int = 3
    rate_factor: float = 1.0
    reserved: int = 0          # GPUs protected for this class and higher: never given to lower ones
    signal: str = "TERM"       # the checkpoint signal a preempted job gets first (a job's --signal overrides)


@dataclass(frozen=True)
class Account:
    name: str
    users: tuple[str, ...] = ()
    max_running: int | None = None
    max_gpus: int | None = None
    share: float = 1.0
    max_cpus: int | None = None
    max_submit: int | None = None       # pending + running jobs; beyond it a submit is refused
    guarantee: int = 0                  # GPUs the account is owed; others' work on them is reclaimed
    borrow_limit: int | None = None     # GPUs beyond the guarantee it may borrow while others idle
    on_limit: str = "pend"              # "pend" | "refuse": a submit over max_running/max_gpus/max_cpus
    open: bool = False                  # anyone may charge it with -A, not only its users


@dataclass(frozen=True)
class User:
    """Per-user caps ([users.NAME]); `default` applies to users without a table of their own."""
    name: str
    max_running: int | None = None
    max_gpus: int | None = None
    max_cpus: int | None = None
    max_submit: int | None = None
    on_limit: str = "pend"


@dataclass(frozen=True)
class Rates:
    currency: str = "USD"
    gpu_hour: float = 2.0
    gpu_hour_by_model: tuple[tuple[str, float], ...] = ()
    cpu_hour: float = 0.0
    mem_gib_hour: float = 0.0
    overhead_per_attempt: float = 0.0
    forecast_margin: float = 0.2
    billing: str = "second"    # "second" | "started_hour": the granularity an attempt is billed in
    node_hour: tuple[tuple[str, float], ...] = ()   # node -> whole-instance price per hour

    # (asked for every job a pass quotes: no dict built where there are no such prices)
    def node_price(self, node: str) -> float:
        return dict(self.node_hour).get(node, 0.0) if self.node_hour else 0.0

    def gpu_rate(self, model: str) -> float:
        return dict(self.gpu_hour_by_model).get(model, self.gpu_hour) if self.gpu_hour_by_model else self.gpu_hour


@dataclass(frozen=True)
class Config:
    redis_url: str = ""
    prefix: str = "labq"
    redis_password_file: str = ""  # daemons: root-only file of "ROLE PASSWORD" lines (store/conn.py)
    min_replicas_ack: int = 0      # replicas a commit must reach (WAIT) before its replies go out
    tick: float = 1.0
    max_pending: int = 100_000
    max_pending_per_user: int = 10_000
    node_lease: float = 30.0
    default_time: int = 24 * 3600
    kill_wait: int = 30
    start_timeout: float = 60.0    # an attempt no runner claimed by then is withdrawn and requeued uncharged
    fence_margin: float = 5.0      # after a node's lease is gone, wait this long before requeueing its attempts
    lease: float = 0.0             # the leader lease; 0: max(10s, 3 ticks)
    budget_mode: str = "safe"
    metrics: str = ""              # host:port of the Prometheus endpoint; "" = off
    priority: Priority = field(default_factory=Priority)
    qos: tuple[Qos, ...] = (Qos("normal", priority=100),
                            Qos("low", priority=0, preemptible=True, rate_factor=0.5))
    rates: Rates = Rates()
    accounts: tuple[Account, ...] = ()
    users: tuple[User, ...] = ()
    budgets: tuple[Budget, ...] = ()
    backfill_depth: int = 1        # blocked jobs that get a reservation; 0 turns backfill off
    preemption: bool = True
    crash_guard_failures: int = 5  # a user's failed attempts within crash_guard_window that hold their jobs; 0 = off
    crash_guard_window: int = 600
    retry_backoff: int = 30        # --retries: the first retry waits this long, each next one twice as long
    retry_backoff_max: int = 3600
    max_time_limit: int = bounds.DEFAULT_MAX_TIME_LIMIT       # -t beyond it is refused at submit
    max_array_size: int = bounds.DEFAULT_MAX_ARRAY            # tasks in one array
    max_request_bytes: int = bounds.DEFAULT_MAX_REQUEST_BYTES  # a request body, scripts included
    allow_volatile: bool = False   # redis.allow_volatile: lead on a Redis without AOF (data lost on a crash)
    state_file: str = ""           # scheduler.state_file: figures that detect a Redis gone backwards
    worker: Worker = field(default_factory=Worker)
    alerts: Alerts = field(default_factory=Alerts)
    history: History = field(default_factory=History)
    security: Security = field(default_factory=Security)
    estimate: Estimate = field(default_factory=Estimate)
    source: str = "<built-in defaults>"

    def __post_init__(self) -> None:
        # A section given as a plain dict (`replace(cfg, priority={...})`, written before the
        # sections were typed) becomes its dataclass: readers may use attributes everywhere.
        for name, kind in (("priority", Priority), ("worker", Worker), ("alerts", Alerts), ("history", History),
                           ("security", Security), ("estimate", Estimate)):
            value = getattr(self, name)
            if not isinstance(value, kind):
                object.__setattr__(self, name, kind(**value))

    def qos_named(self, name: str) -> Qos | None:
        return self._qos_index.get(name)

    def account_named(self, name: str) -> Account | None:
        return self._account_index.get(name)

    def user_named(self, name: str) -> User | None:
        return self._user_index.get(name) or self._user_index.get("default")

    # Looked up once per pending job per plan pass: index them (cached_property works on a frozen
    # dataclass because it writes the instance __dict__ directly).
    @cached_property
    def _qos_index(self) -> dict[str, Qos]:
        return {q.name: q for q in self.qos}

    @cached_property
    def _account_index(self) -> dict[str, Account]:
        return {a.name: a for a in self.accounts}

    @cached_property
    def _user_index(self) -> dict[str, User]:
        return {u.name: u for u in self.users}

    @cached_property
    def budget_caps(self) -> tuple[dict[str, Budget], dict[str, int]]:
        """(name -> budget, name -> what admission may commit of it: ledger.cap), read by every plan pass."""
        return {b.name: b for b in self.budgets}, {b.name: cap(b) for b in self.budgets}

    @cached_property
    def rate_memo(self) -> dict[tuple[int, int, int, int, str, str], int]:
        """ledger.rate's memo of money rates without a node price: (request, QoS, GPU model) -> rate
        (of this config's rates and QoS factors: a replaced config starts its own)."""
        return {}

    def default_account(self, user: str) -> str:
        """The first account that lists the user, else "default"."""
        return next((a.name for a in self.accounts if user in a.users), "default")


def load(path: str | None = None, system: bool = True) -> Config:
    """The config at `path`, else /etc/labq/labq.toml if present and `system`, else defaults (no environment)."""
    path = resolve_path(path, system)
    return from_dict(read_toml(path), source=path) if path else Config()


def loads(text: str, source: str = "<string>") -> Config:
    try:
        return from_dict(tomllib.loads(text), source=source)
    except (tomllib.TOMLDecodeError, RecursionError) as e:
        raise ConfigError(source, f"not valid TOML: {TOO_DEEP if isinstance(e, RecursionError) else e}") from None


def from_dict(data: dict[str, Any], source: str = "<dict>") -> Config:
    _check_keys("", data, {"redis", "scheduler", "priority", "qos", "rates", "accounts", "users", "budgets",
                            "worker", "alerts", "security", "history", "estimate"})
    kw: dict[str, Any] = {"source": source}
    kw.update(_redis(_table("redis", data.get("redis", {}))))
    kw.update(_scheduler(_table("scheduler", data.get("scheduler", {}))))
    kw["priority"] = Priority(**_priority(_table("priority", data.get("priority", {}))))
    if "qos" in data:
        kw["qos"] = tuple(_qos(n, _table(f"qos.{n}", t)) for n, t in _table("qos", data["qos"]).items())
    kw["rates"] = _rates(_table("rates", data.get("rates", {})))
    kw["accounts"] = tuple(_account(n, _table(f"accounts.{n}", t))
                           for n, t in _table("accounts", data.get("accounts", {})).items())
    kw["users"] = tuple(_user(n, _table(f"users.{n}", t)) for n, t in _table("users", data.get("users", {})).items())
    budgets = data.get("budgets", [])
    if not isinstance(budgets, list):
        raise ConfigError("budgets", "expected an array of tables ([[budgets]])")
    kw["budgets"] = tuple(_budget(i, _table(f"budgets[{i}]", b)) for i, b in enumerate(budgets))
    names = [b.name for b in kw["budgets"]]
    if len(set(names)) != len(names):
        raise ConfigError("budgets", f"budget names must be unique, got {names}")
    kw["worker"] = Worker(**_worker(_table("worker", data.get("worker", {}))))
    kw["alerts"] = Alerts(**_alerts(_table("alerts", data.get("alerts", {}))))
    kw["security"] = Security(**_security(_table("security", data.get("security", {}))))
    kw["history"] = History(**history_table(_table("history", data.get("history", {}))))
    kw["estimate"] = Estimate(**_estimate(_table("estimate", data.get("estimate", {}))))
    cfg = Config(**kw)
    if cfg.qos_named("normal") is None:
        raise ConfigError("qos.normal", "the default QoS 'normal' must be defined")
    return cfg


def _redis(t: dict[str, Any]) -> dict[str, Any]:
    _check_keys("redis", t, {"url", "prefix", "password_file", "allow_volatile", "sentinels", "service",
                             "sentinel_auth", "min_replicas_ack"})   # the thin client: clientconf.py's checks
    return {**redis_table(t), "allow_volatile": _bool("redis.allow_volatile", t.get("allow_volatile", False))}


def _scheduler(t: dict[str, Any]) -> dict[str, Any]:
    _check_keys("scheduler", t, {"tick", "max_pending", "max_pending_per_user", "node_lease",
                                 "default_time", "kill_wait", "budget_mode", "backfill_depth", "preemption", "lease",
                                 "crash_guard_failures", "crash_guard_window", "retry_backoff", "retry_backoff_max",
                                 "max_time_limit", "max_array_size", "max_request_bytes", "state_file",
                                 "metrics", "start_timeout", "fence_margin"})
    out = _scheduler_times(t)
    if "backfill_depth" in t:
        out["backfill_depth"] = _num("scheduler.backfill_depth", t["backfill_depth"], lo=0, integer=True, hi=10 ** 6)
    if "preemption" in t:
        out["preemption"] = _bool("scheduler.preemption", t["preemption"])
    if "crash_guard_failures" in t:
        out["crash_guard_failures"] = _num("scheduler.crash_guard_failures", t["crash_guard_failures"], lo=0,
                                           integer=True)
    if "budget_mode" in t:
        out["budget_mode"] = _str("scheduler.budget_mode", t["budget_mode"], ("safe", "forecast"))
    if "metrics" in t:
        out["metrics"] = _address("scheduler.metrics", t["metrics"])
    if "state_file" in t:
        out["state_file"] = _str("scheduler.state_file", t["state_file"])
    if out.get("default_time", Config.default_time) > out.get("max_time_limit", bounds.DEFAULT_MAX_TIME_LIMIT):
        raise ConfigError("scheduler.default_time", "must not be above scheduler.max_time_limit")
    return out


def _priority(t: dict[str, Any]) -> dict[str, Any]:
    _check_keys("priority", t, Priority.keys_())
    out = dict(Priority())
    for k in ("qos_weight", "age_weight", "fairshare_weight", "burst_penalty", "short_job_weight"):
        if k in t:
            out[k] = float(_num(f"priority.{k}", t[k], lo=0))
    if "burst_jobs" in t:
        out["burst_jobs"] = _num("priority.burst_jobs", t["burst_jobs"], lo=1, integer=True)
    for k in ("age_max", "fairshare_half_life", "burst_window", "short_job_scale"):
        if k in t:
            out[k] = _dur(f"priority.{k}", t[k])
    if out["short_job_weight"] > out["age_weight"]:
        raise ConfigError("priority.short_job_weight", f"must be at most priority.age_weight ({out['age_weight']:g}), "
                          f"got {out['short_job_weight']:g}: above it a stream of short jobs could starve a long one")
    return out


def _estimate(t: dict[str, Any]) -> dict[str, Any]:
    _check_keys("estimate", t, Estimate.keys_())
    out = dict(Estimate())
    if "quantile" in t:
        out["quantile"] = float(_num("estimate.quantile", t["quantile"], lo=0.01, hi=1))
    for k, lo in (("min_samples", 1), ("window", 1), ("max_keys", 1), ("history", 0)):
        if k in t:
            out[k] = _num(f"estimate.{k}", t[k], lo=lo, integer=True, hi=10 ** 7)
    for k in ("backfill", "forecast"):
        if k in t:
            out[k] = _bool(f"estimate.{k}", t[k])
    if out["window"] < out["min_samples"]:
        raise ConfigError("estimate.window", f"must be at least estimate.min_samples ({out['min_samples']}), "
                          f"got {out['window']}")
    return out


def _qos(name: str, t: dict[str, Any]) -> Qos:
    k = f"qos.{name}"
    _check_keys(k, t, {"priority", "preemptible", "grace", "min_runtime", "max_preemptions", "rate_factor",
                       "reserved", "signal"})
    sig = _str(f"{k}.signal", t.get("signal", "TERM")).upper().removeprefix("SIG")
    if sig not in QOS_SIGNALS:
        raise ConfigError(f"{k}.signal", f"expected one of {', '.join(sorted(QOS_SIGNALS))}, got {t['signal']!r}")
    return Qos(
        name=name,
        priority=_num(f"{k}.priority", t.get("priority", 0), integer=True),
        preemptible=_bool(f"{k}.preemptible", t.get("preemptible", False)),
        grace=_dur(f"{k}.grace", t.get("grace", "120s")),
        min_runtime=_dur(f"{k}.min_runtime", t.get("min_runtime", "10m")),
        max_preemptions=_num(f"{k}.max_preemptions", t.get("max_preemptions", 3), lo=0, integer=True),
        rate_factor=float(_num(f"{k}.rate_factor", t.get("rate_factor", 1.0), lo=0)),
        reserved=_num(f"{k}.reserved", t.get("reserved", 0), lo=0, integer=True),
        signal=sig,
    )


def _rates(t: dict[str, Any]) -> Rates:
    _check_keys("rates", t, {"currency", "gpu_hour", "gpu_hour_by_model", "cpu_hour", "mem_gib_hour",
                             "overhead_per_attempt", "forecast_margin", "billing", "node_hour"})
    by_model = _table("rates.gpu_hour_by_model", t.get("gpu_hour_by_model", {}))
    by_node = _table("rates.node_hour", t.get("node_hour", {}))
    return Rates(
        currency=_str("rates.currency", t.get("currency", "USD")),
        gpu_hour=float(_num("rates.gpu_hour", t.get("gpu_hour", 2.0), lo=0, hi=MAX_RATE)),
        gpu_hour_by_model=tuple(sorted((m, float(_num(f"rates.gpu_hour_by_model.{m}", v, lo=0, hi=MAX_RATE)))
                                       for m, v in by_model.items())),
        cpu_hour=float(_num("rates.cpu_hour", t.get("cpu_hour", 0.0), lo=0, hi=MAX_RATE)),
        mem_gib_hour=float(_num("rates.mem_gib_hour", t.get("mem_gib_hour", 0.0), lo=0, hi=MAX_RATE)),
        overhead_per_attempt=float(_num("rates.overhead_per_attempt", t.get("overhead_per_attempt", 0.0), lo=0, hi=MAX_RATE)),
        forecast_margin=float(_num("rates.forecast_margin", t.get("forecast_margin", 0.2), lo=0)),
        billing=_str("rates.billing", t.get("billing", "second"), ("second", "started_hour")),
        node_hour=tuple(sorted((n, float(_num(f"rates.node_hour.{n}", v, lo=0, hi=MAX_RATE))) for n, v in by_node.items())),
    )


def _account(name: str, t: dict[str, Any]) -> Account:
    k = f"accounts.{name}"
    _check_keys(k, t, {"users", "open", "share", "guarantee", "borrow_limit", "on_limit", "max_running", "max_gpus",
                       "max_cpus", "max_submit"})
    borrow = t.get("borrow_limit")
    return Account(name=name, users=_users(k, t), open=_bool(f"{k}.open", t.get("open", False)),
                   share=float(_num(f"{k}.share", t.get("share", 1.0), lo=0)), **_caps(k, t),
                   guarantee=_num(f"{k}.guarantee", t.get("guarantee", 0), lo=0, integer=True),
                   borrow_limit=None if borrow is None else _num(f"{k}.borrow_limit", borrow, lo=0, integer=True))


def _user(name: str, t: dict[str, Any]) -> User:
    k = f"users.{name}"
    _check_keys(k, t, {"on_limit", "max_running", "max_gpus", "max_cpus", "max_submit"})
    return User(name=name, **_caps(k, t))


def _worker(t: dict[str, Any]) -> dict[str, Any]:
    _check_keys("worker", t, Worker.keys_())
    out = dict(Worker())
    out.update(t)
    _str("worker.name", out["name"])
    for k in ("gpus", "cpus"):
        # worker.gpus may also name a JSON file of fake GPUs with scripted samples (tests, demos)
        if out[k] != "auto" and not (k == "gpus" and isinstance(out[k], str) and out[k].endswith(".json")):
            _num(f"worker.{k}", out[k], lo=0, integer=True, hi=4096 if k == "gpus" else 1 << 20)
    if out["mem"] != "auto":
        try:
            out["mem"] = _num("worker.mem", units.parse_size(out["mem"], "worker.mem"), lo=0, integer=True)
        except UsageError as e:
            raise ConfigError("worker.mem", str(e).split(": ", 1)[-1]) from None
    _num("worker.slots", out["slots"], lo=0, integer=True, hi=4096)
    _str("worker.gpu_model", out["gpu_model"])
    _str("worker.addr", out["addr"])
    _str("worker.spool", out["spool"])
    _str("worker.run_as", out["run_as"], ("submitter", "self"))
    _str("worker.cgroups", out["cgroups"], ("auto", "off"))
    _bool("worker.allow_root", out["allow_root"])
    _bool("worker.limit_cpus", out["limit_cpus"])
    for k in ("slurm_env", "compat_commands", "pbs_env", "sge_env"):
        _bool(f"worker.{k}", out[k])
    _num("worker.pids_max", out["pids_max"], lo=0, integer=True)
    if _num("worker.idle_gpu_util", out["idle_gpu_util"], lo=0) > 100:
        raise ConfigError("worker.idle_gpu_util", f"a percentage is at most 100, got {out['idle_gpu_util']!r}")
    for k in ("idle_gpu_after", "stop_grace"):
        out[k] = _dur(f"worker.{k}", out[k])
    return out


def _security(t: dict[str, Any]) -> dict[str, Any]:
    refuse_removed(t)
    _check_keys("security", t, Security.keys_())
    return security_table(t)   # the thin client reads this table alone, with the same checks (clientconf.py)
