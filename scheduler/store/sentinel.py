"""Redis behind Sentinel: one URL for the whole lab, the master found anew on every (re)connect.

`sentinel://[user:password@]host:26379,host:26379,…/SERVICE[?db=N&ack=N&sentinel_auth=1]` is what
clientconf.py builds from `redis.sentinels` and `redis.service`; as the one `redis.url` every labq
process is handed (the daemons' config, a runner's settings, a job's $LABQ_REDIS_URL), it carries
everything a process needs to follow a failover without a restart:

- the daemons (redis-py): `redis.sentinel.Sentinel(...).master_for(SERVICE)`, whose pool asks the
  sentinels on every new connection and drops a connection that finds its master demoted;
- the thin client and slot runners (store/resp.py): `master_address` asks each sentinel in turn
  `SENTINEL get-master-addr-by-name`, and the connection checks `ROLE` before trusting the answer.

`ack` is `redis.min_replicas_ack`: the replicas a write must reach (WAIT) before labq acknowledges it,
after which the sentinels must still name its master, with no failover of it under way (`doubt`).
The login (a role's password file, or the URL's user) is the master's; the sentinels get it too only
with `sentinel_auth=1` (`redis.sentinel_auth`), as a sentinel without ACL users refuses an AUTH.

Stdlib only at import: the thin client parses this URL on every `labq sub`.
"""
import time

from ..settings.clientconf import SENTINEL_SCHEME as SCHEME, sentinel_address as address
from .faults import ConnectionLost, RespError, unquote

FAILOVER_WAIT = 30.0     # how long a thin connection waits for a reachable master (a failover's length)
# How long one sentinel may take to accept a connection and to answer, on either side. A sentinel
# answers from memory in well under a millisecond; one that is frozen (SIGSTOP, a hung VM) still
# has its connections accepted by the kernel and would hold the question for the whole socket
# timeout (redis-py's 30 s, the daemons' conn.connect), although the next sentinel could answer.
SENTINEL_TIMEOUT = 2.0


def is_sentinel(url: str) -> bool:
    return url.startswith(SCHEME + "://")


def parse(url: str) -> dict:
    """The sentinel URL's parts, shaped like faults.parse_url's (scheme "sentinel") plus `sentinels`
    [(host, port)], `service`, `ack` and `sentinel_auth`. ValueError names what is wrong."""
    rest = url[len(SCHEME) + 3:]
    rest, _, query_s = rest.partition("?")
    query = {k: unquote(v) for k, v in (q.partition("=")[::2] for q in query_s.split("&") if q)}
    cred, at, where = rest.rpartition("@")
    user, _, password = cred.partition(":") if at else ("", "", "")
    hosts, _, service = where.partition("/")
    if not service or "/" in service:
        raise ValueError(f"expected sentinel://host:port,…/SERVICE, got no service name in {url!r}")
    return {"scheme": SCHEME, "username": unquote(user) or None, "password": unquote(password) or None,
            "host": None, "port": None, "path": None, "db": int(query.get("db") or 0),
            "protocol": int(query.get("protocol", 2)), "query": query,
            "sentinels": [address(h) for h in hosts.split(",")], "service": service,
            "ack": int(query.get("ack") or 0), "sentinel_auth": query.get("sentinel_auth") in ("1", "true", "yes")}


def min_replicas_ack(url: str) -> int:
    """The WAIT count a process connected by `url` owes its acknowledged writes (0: none)."""
    return parse(url)["ack"] if is_sentinel(url) else 0


# -- the thin side (store/resp.py) ----------------------------------------------------------------
def master_address(opts: dict, connect_timeout: float, connection) -> tuple[str, int]:
    """Ask each sentinel in turn for the service's master, over a `connection` (resp.Connection: this
    module is resp.py's for sentinel:// URLs, so it takes the class, never imports it); the first that
    answers is moved to the front (it answers the next connect too). ConnectionLost names every
    sentinel's failure."""
    errors = []
    for i, (host, port) in enumerate(opts["sentinels"]):
        s = _sentinel_conn(host, port, opts, connect_timeout, connection)
        try:
            got = _ask(s, "SENTINEL", "get-master-addr-by-name", opts["service"])
        except (ConnectionLost, RespError) as e:
            errors.append(f"{host}:{port}: {e}")
            continue
        finally:
            s.close()
        if got:
            opts["sentinels"].insert(0, opts["sentinels"].pop(i))
            return got[0], int(got[1])
        errors.append(f"{host}:{port}: knows no master named {opts['service']!r}")
    raise ConnectionLost(f"no sentinel named a master for {opts['service']!r} ({'; '.join(errors)})")


def _sentinel_conn(host: str, port: int, opts: dict, connect_timeout: float, connection):
    t = min(connect_timeout, SENTINEL_TIMEOUT)
    return connection(_sentinel_url(host, port, opts), connect_timeout=t, timeout=t)


def _ask(s, *cmd):
    """One question to a sentinel, not sent again on a timeout (the next sentinel is the retry)."""
    reply = s.pipeline([cmd], resend=False)[0]
    if isinstance(reply, RespError):
        raise reply
    return reply


def _sentinel_url(host: str, port: int, opts: dict) -> str:
    from urllib.parse import quote
    login = ""
    if opts["sentinel_auth"] and opts["password"]:
        login = f"{quote(opts['username'] or '', safe='')}:{quote(opts['password'], safe='')}@"
    return f"redis://{login}[{host}]:{port}" if ":" in host else f"redis://{login}{host}:{port}"


def open_master(conn, opts: dict) -> None:
    """Connect `conn` (a resp.Connection in sentinel mode) to the current master: asked of the
    sentinels, checked with ROLE (a sentinel may still name a master that was just demoted, or one
    that is down until its failover ends). Retries for up to FAILOVER_WAIT seconds, so that a
    command issued during a failover waits for the new master instead of failing."""
    deadline = conn.until or time.monotonic() + float(opts["query"].get("failover_wait") or FAILOVER_WAIT)
    while True:
        try:
            host, port = master_address(opts, conn.connect_timeout, type(conn))
            opts["host"], opts["port"] = host, port
            conn.open_tcp(host, port)
            role = conn.raw_roundtrip([["ROLE"]])[0]
            if isinstance(role, list) and role and role[0] == "master":
                return
            conn.close()
            last: Exception = ConnectionLost(f"{host}:{port} is no longer the master of {opts['service']!r}")
        except (ConnectionLost, RespError) as e:
            conn.close()
            last = e
        if time.monotonic() >= deadline:
            raise ConnectionLost(str(last)) from None
        time.sleep(0.2)


# -- the daemons' side (redis-py) ------------------------------------------------------------------
def redis_py(url: str, **kw):
    """A redis-py client of the service's master (store/conn.py · connect passes its usual keyword
    arguments: timeouts, the packer, the login)."""
    from redis.sentinel import Sentinel
    o = parse(url)
    if o["username"] or o["password"]:
        kw.setdefault("username", o["username"])
        kw.setdefault("password", o["password"])
    skw = {k: v for k, v in kw.items() if k.startswith("socket_")}
    for k in ("socket_timeout", "socket_connect_timeout"):
        skw[k] = min(skw.get(k) or SENTINEL_TIMEOUT, SENTINEL_TIMEOUT)
    if o["sentinel_auth"] and kw.get("password"):
        skw["username"], skw["password"] = kw.get("username"), kw["password"]
    skw["decode_responses"] = True
    kw.setdefault("protocol", o["protocol"])
    sentinel = Sentinel(o["sentinels"], sentinel_kwargs=skw, db=o["db"], **kw)
    r = sentinel.master_for(o["service"], decode_responses=True, connection_class=_connection_class())
    r.labq_min_ack = o["ack"]
    return r


_CLASS: list = []


def _connection_class():
    """redis-py's Sentinel connection, which also takes NOREPLICAS (a master that lacks the good
    replicas `min-replicas-to-write` asks for: cut off, or an old master not yet demoted) as the
    master being unreachable for now: the connection is dropped and the caller retries, as after
    a READONLY from a demoted master."""
    if not _CLASS:
        from redis.exceptions import ConnectionError, ResponseError
        from redis.sentinel import SentinelManagedConnection

        class Connection(SentinelManagedConnection):
            def read_response(self, *a, **kw):
                try:
                    return super().read_response(*a, **kw)
                except ResponseError as e:
                    if not str(e).startswith("NOREPLICAS"):
                        raise
                    self.disconnect()
                    raise ConnectionError(f"the master refuses writes for now: {e}") from None
        _CLASS.append(Connection)
    return _CLASS[0]


# -- is the master written to still the master? (before anything is acknowledged) -----------------
# A master that stopped answering (SIGSTOP, a frozen VM, a long swap) past down-after-milliseconds
# and then resumes is still a master until Sentinel demotes it, seconds later, and the replica that
# was not promoted may still be attached to it: a write there passes min-replicas-to-write and WAIT,
# and is discarded when that replica resyncs from the new master. A write is therefore acknowledged
# only once the sentinels, asked after its WAIT, name the master it went to and none of them has
# that master down or a failover of it under way (the failover's leader flags it from the start,
# before it tells a replica to take over; once done, it names the new master with a higher epoch).
DOUBTFUL = ("s_down", "o_down", "failover_in_progress")


def doubt(answers: list, host: str, port: int) -> tuple[str, bool]:
    """Why the sentinels' `answers` (each SENTINEL MASTER's fields as a dict, or the exception that
    asking raised) do not confirm host:port as the service's master: ("", False) when they do;
    (reason, True) when the newest configuration among them (the highest config-epoch: a sentinel
    that missed the last failover still names the master before it, and is not believed) names
    another master, or one that names host:port has it down or a failover of it under way (the
    caller's master is, or may soon be, an old one); (reason, False) when fewer than a majority
    answered (a failover needs a majority's votes: without one, no answer is sure)."""
    got = [a for a in answers if isinstance(a, dict)]
    if len(got) * 2 <= len(answers):
        errors = "; ".join(str(a) for a in answers if not isinstance(a, dict))[:300]
        return f"only {len(got)} of {len(answers)} sentinels answered ({errors})", False
    ours = (str(host), int(port))

    def named(a) -> tuple[str, int]:
        return str(a.get("ip")), int(a.get("port") or 0)

    def flags(a) -> list:
        f = a.get("flags") or ""
        return f.split(",") if isinstance(f, str) else list(f)
    newest = max(int(a.get("config-epoch") or 0) for a in got)
    latest = [a for a in got if int(a.get("config-epoch") or 0) == newest]
    for a in latest:
        # The failover's leader, still moving the other replicas over, names the old master at the
        # new epoch until it is done; the others at that epoch already name the promoted one.
        leader_finishing = "failover_in_progress" in flags(a) and any(named(b) == ours for b in latest)
        if named(a) != ours and not leader_finishing:
            return f"Sentinel names {named(a)[0]}:{named(a)[1]} the master (epoch {newest}), not {host}:{port}", True
    for a in got:
        bad = [f for f in DOUBTFUL if f in flags(a)]
        if named(a) == ours and bad:
            return f"a sentinel has {host}:{port} {' and '.join(bad)}", True
    return "", False


def doubt_thin(conn) -> tuple[str, bool]:
    """doubt() for a resp.Connection in sentinel mode, of the master it is connected to."""
    opts, answers = conn.opts, []
    for host, port in list(opts["sentinels"]):
        s = _sentinel_conn(host, port, opts, conn.connect_timeout, type(conn))
        try:
            flat = _ask(s, "SENTINEL", "MASTER", opts["service"])
            answers.append(dict(zip(flat[::2], flat[1::2])) if isinstance(flat, list) else flat)
        except (ConnectionLost, RespError) as e:
            answers.append(e)
        finally:
            s.close()
    return doubt(answers, opts["host"], opts["port"])


def doubt_redis_py(pool, connection) -> tuple[str, bool]:
    """doubt() for a redis-py Sentinel pool (redis_py's), of the master `connection` went to;
    ("", False) for any other pool (no Sentinel to ask: WAIT is all there is)."""
    manager = getattr(pool, "sentinel_manager", None)
    if manager is None:
        return "", False
    from redis import RedisError
    answers = []
    for s in manager.sentinels:
        try:
            answers.append(s.sentinel_master(pool.service_name))
        except RedisError as e:
            answers.append(e)
    return doubt(answers, connection.host, connection.port)
