"""Redis connections from a URL (redis://, rediss://, unix://)."""
import os
from contextlib import contextmanager

import redis

from ..errors import UnreachableError
from . import resp, sentinel
from .faults import ERRORS, without_credentials

# A daemon logs in as its ACL role with a password from a root-only file (redis.password_file). The
# role and the file's *path* are passed down to its child processes (runners) in these variables;
# the password itself is never in a URL, a command line or an environment.
ROLE_ENV, FILE_ENV = "LABQ_REDIS_ROLE", "LABQ_REDIS_PASSWORD_FILE"


def login_as(role: str, password_file: str) -> None:
    """This process and its children connect as `role` (no-op without a password file)."""
    if password_file:
        credentials(role, password_file)        # fail now, with a clear message, not at first use
        os.environ[ROLE_ENV], os.environ[FILE_ENV] = role, password_file


def credentials(role: str, path: str) -> tuple[str, str]:
    from .passwords import role_path
    path = role_path(path, role)        # a directory holds one file per role
    try:
        st = os.stat(path)
        with open(path) as f:
            lines = dict(x.split(None, 1) for x in (y.strip() for y in f) if x and not x.startswith("#"))
    except OSError as e:
        raise UnreachableError(f"redis.password_file: cannot read {path}: {e.strerror}") from None
    if st.st_mode & 0o077:
        raise UnreachableError(f"redis.password_file: {path} is readable by others (mode {st.st_mode & 0o777:o}); "
                               "chmod 600 it")
    if role not in lines:
        raise UnreachableError(f"redis.password_file: {path} has no line for role {role} "
                               "(`labq admin acl --apply` writes it)")
    return role, lines[role].strip()


def _login(url: str, kw: dict) -> str:
    role, path = os.environ.get(ROLE_ENV), os.environ.get(FILE_ENV)
    if not (role and path):
        return url
    kw["username"], kw["password"] = credentials(role, path)
    # from_url lets the URL's own user and password win over keyword arguments: drop them.
    return without_credentials(url)


def connect(url: str, **kw) -> redis.Redis:
    if not url:
        raise UnreachableError("no Redis URL: set redis.url in the config, or start `labq up`")
    url = _login(url, kw)
    kw.setdefault("socket_connect_timeout", 5)
    # redis-py 8 defaults to a 5 s read timeout, shorter than our blocking reads (BLPOP up to 10 s);
    # keep every blocking call well under this.
    kw.setdefault("socket_timeout", 30)
    kw.setdefault("health_check_interval", 30)
    # No CLIENT SETINFO: redis-py 8 reads its own version from the package metadata for every new
    # connection (6 ms, most of a runner's connect) and then spends a round trip sending it.
    kw.setdefault("driver_info", None)
    if _fast_pack() and not {"encoding", "encoding_errors", "command_packer"} & kw.keys():
        kw["command_packer"] = Packer()
    if sentinel.is_sentinel(url):
        try:
            return sentinel.redis_py(url, **kw)
        except ValueError as e:
            raise UnreachableError(f"redis.sentinels: {e}") from None
    return redis.Redis.from_url(url, decode_responses=True, **kw)


class Packer:
    """redis-py's command packer (PythonRespSerializer: utf-8, strict) giving the very same bytes,
    faster where every argument is a str, bytes or int and the command name one word: resp.encode's
    one format per argument and one join, where redis-py makes a few checks and a join per argument (the group
    commit's transactions pack tens of thousands: a quarter of a reason pass over a 10,000-task
    array). Anything else is packed by redis-py's own serializer. Not used where hiredis is
    installed: redis-py packs in C then."""

    def __init__(self):
        from redis._parsers.encoders import Encoder
        from redis.connection import PythonRespSerializer
        self._slow = PythonRespSerializer(6000, Encoder("utf-8", "strict", False).encode)

    def pack(self, *args):
        head = args[0]
        if type(head) is not str or not (head.isascii() and head.isalpha()) or \
                not all(type(a) in _PLAIN or isinstance(a, str) for a in args):   # a StrEnum: its text
            return self._slow.pack(*args)    # redis-py splits such a name on whitespace; refuses bools, None
        return [resp.encode(args)]


_PLAIN = frozenset((str, bytes, int))


_FAST_PACK: list = []


def _fast_pack() -> bool:
    """redis-py takes a command_packer and has no hiredis to pack in C (asked once)."""
    if not _FAST_PACK:
        import inspect
        try:
            from redis._parsers.encoders import Encoder  # noqa: F401 - Packer's fallback needs it
            from redis.connection import AbstractConnection, PythonRespSerializer  # noqa: F401
            from redis.utils import HIREDIS_AVAILABLE
            ok = not HIREDIS_AVAILABLE and "command_packer" in inspect.signature(AbstractConnection.__init__).parameters
        except ImportError:
            ok = False
        _FAST_PACK.append(ok)
    return _FAST_PACK[0]


def connect_resp(url: str) -> resp.Connection:
    """The same server, user and password as `connect`, over store/resp.py (no redis-py): for a
    slot runner's per-attempt round trips. Decoded replies; connects on first use."""
    if not url:
        raise UnreachableError("no Redis URL: set redis.url in the config, or start `labq up`")
    kw: dict = {}
    c = resp.Connection(_login(url, kw), connect_timeout=5, timeout=30)
    if kw:
        c.opts["username"], c.opts["password"] = kw["username"], kw["password"]
    return c


WAIT_MS = 2000    # how long an acknowledged write waits for its replicas (redis.min_replicas_ack)


def replicas_online(role) -> int:
    """The replicas a master's ROLE reply lists. A write is waited on until all of them have it,
    not just `min_replicas_ack` of them: Sentinel promotes the replica it last saw furthest ahead
    (its offsets are up to a second old), which need not be the one that acknowledged."""
    return len(role[2]) if isinstance(role, list) and len(role) > 2 and role[0] in ("master", b"master") else 0


class Keep:
    """A pipeline's connection pool, except that the connection the pipeline gives back is kept for
    one more command (WAIT: it counts the writes of its own connection) and only then returned.
    Set as `pipeline.connection_pool`; `give_back()` in a finally."""

    def __init__(self, pool):
        self.pool, self.kept = pool, None
        self.doubt, self.stale = "", False     # why the sentinels did not confirm the master (wait)

    def get_connection(self, *a, **kw):
        return self.pool.get_connection(*a, **kw)

    def release(self, c) -> None:
        self.kept = c

    def wait(self, replicas: int, ms: int) -> int:
        """WAIT for every replica connected now (at least `replicas`); how many acknowledged. Behind
        Sentinel, 0 unless the sentinels then confirm the master (store/sentinel.py · doubt: a stale
        master's replica acknowledges writes the failover discards); `doubt` says why, `stale`
        whether the master is, or is about to be, an old one."""
        self.kept.send_command("ROLE")
        online = replicas_online(self.kept.read_response())
        self.kept.send_command("WAIT", max(replicas, online), ms)
        acked = int(self.kept.read_response())
        if replicas and acked >= replicas:
            self.doubt, self.stale = sentinel.doubt_redis_py(self.pool, self.kept)
        return 0 if self.doubt else acked

    def give_back(self) -> None:
        if self.kept is not None:
            self.pool.release(self.kept)
            self.kept = None

    def __getattr__(self, name):
        return getattr(self.pool, name)


@contextmanager
def kept_pipeline(r: redis.Redis):
    """(a transaction pipeline, its Keep): the pipeline's connection stays for a WAIT after EXEC."""
    keep = Keep(r.connection_pool)
    try:
        with r.pipeline() as p:
            p.connection_pool = keep
            yield p, keep
    finally:
        keep.give_back()


def ping(r: redis.Redis) -> None:
    try:
        r.ping()
    except ERRORS as e:
        raise UnreachableError(f"Redis at {describe(r)} does not answer: {e}") from None


def describe(r: redis.Redis) -> str:
    pool = r.connection_pool
    if getattr(pool, "service_name", None):
        return f"the master of {pool.service_name!r} (Sentinel)"
    kw = pool.connection_kwargs
    return kw.get("path") or f"{kw.get('host')}:{kw.get('port')}"


def send_and_pop(r: redis.Redis):
    """inbox.call's two callables over a redis-py connection: send(cmds) runs commands as one
    pipeline, pop(key, seconds) BLPOPs one key (the thin client has its own, over resp.py)."""
    def send(cmds) -> list:
        p = r.pipeline(transaction=False)
        for c in cmds:
            p.execute_command(*c)
        return p.execute(raise_on_error=False)

    def pop(key: str, seconds: int):
        return r.blpop([key], timeout=seconds)
    return send, pop
