"""Redis ACL roles, generated from keys.py so that they follow its renames (DESIGN §9).

- `default`: off. Nobody talks to the lab's Redis without a role.
- `labq-client`: LPUSH onto the request list (no ids, no trimming), wake the scheduler, pop its
  replies, read what the read commands read: never others' requests, dead letters, scripts or
  exported environments (NOT_READ). Its password may sit in the world-readable config: munge, not Redis, says who asks.
- `labq-node-NAME`: one per node agent: that node's hash, lease and events, the attempt hashes its
  runners write, the job records and controls they read, its dispatch queue, and the scripts and
  environments of the attempts dispatched to it (keys.handover), never other nodes'.
- `labq-scheduler`: every labq key; no pub/sub, no dangerous commands.
- `labq-admin`: what `labq admin acl --apply` itself needs later (ACL SETUSER, …).

Redis 7 selectors `(…)` tie commands to key patterns: a command is allowed only where both match.
"""
import hashlib
import inspect
import secrets
from urllib.parse import quote

from .keys import Keys

CLIENT, SCHEDULER, ADMIN = "labq-client", "labq-scheduler", "labq-admin"
BASE = ["+ping", "+echo", "+hello", "+client|setname", "+select", "+multi", "+exec",
        "+discard", "+watch", "+unwatch", "+readonly"]
READ = ["+get", "+mget", "+strlen", "+exists", "+type", "+ttl", "+pttl", "+hget", "+hmget", "+hgetall", "+hvals",
        "+hkeys", "+hlen", "+hexists", "+smembers", "+sismember", "+smismember", "+scard", "+zrange",
        "+zrangebyscore", "+zrevrange", "+zrevrangebyscore", "+zcard", "+zscore", "+zcount", "+xrange",
        "+xrevrange", "+xlen", "+lrange", "+llen", "+lindex"]
# Keys a client may not read: other people's requests (with their credentials), replay records,
# dead letters (what was left of others' requests: admins read them with `labq admin dead`).
# Nor scripts and exported environments (job_env, env_text, env_refs, script: issue 34, they hold tokens
# and passwords; env_refs names no secret, but nobody else has a use for it):
# their owners and admins read them through the scheduler (scheduler/security/private.py).
NOT_READ = {"requests", "taken", "credential", "done", "job_env", "env_text", "env_refs", "script", "handover", "dead",
            "partial"}


def node_role(node: str) -> str:
    return f"labq-node-{node}"


def patterns(k: Keys, exclude=()) -> list[str]:
    """One glob per key Keys names (its arguments as `*`), minus `exclude`: read access follows
    every key added to keys.py without a change here."""
    out = set()
    for name, member in inspect.getmembers(type(k)):
        if name.startswith("_") or name in exclude:
            continue
        if isinstance(member, property):
            key = getattr(k, name)
        elif inspect.isfunction(member):
            params = [p for p in inspect.signature(member).parameters if p != "self"]
            if len(params) != len(inspect.signature(member).parameters) - 1:
                continue                      # a staticmethod: a helper, not a key of ours
            key = getattr(k, name)(*["*"] * len(params))
        else:
            continue
        if isinstance(key, str) and key.startswith(k.p + ":"):
            out.add(key)
    return sorted(out)


def _node_rules(k: Keys, node: str) -> list[str]:
    """A node agent and its runners: write its own node's keys and events, pop (never push) its own
    dispatch queue, wake its runners' control lists, read job records and its drain flag."""
    own = [k.node(node), k.node_lease(node), k.node_runners(node), k.node_events(node), k.nodes,
           k.attempt("*", "*")]
    writes = ["+hset", "+hsetnx", "+hdel", "+hincrby", "+set", "+del", "+expire", "+pexpire", "+sadd", "+xadd"]
    return ["resetkeys", "resetchannels", "-@all", *BASE,
            f"({' '.join('~' + p for p in own)} {' '.join(READ)} {' '.join(writes)})",
            f"(~{k.wake} +lpush)",
            # BLMOVE from the queue into a slot's own list; the slot list is read and trimmed.
            f"(~{k.dispatch(node)} ~{k.dispatch_slot(node, '*')} +blmove +lmove +lrange +llen +lrem)",
            f"(~{k.node_control(node, '*')} +blpop +lpop +del)",
            f"(~{k.node_purge(node)} +srandmember +srem +scard)",
            # The scripts and environments of the attempts dispatched here only: the scheduler copies
            # them under this node's name at dispatch (keys.handover), the runner deletes them at claim.
            f"(~{k.handover(node, '*', '*')} +get +del)",
            f"(%R~{k.job('*')} %R~{k.node_admin(node)} %R~{k.schema} %R~{k.leader} "
            f"{' '.join(READ)})"]


def roles(k: Keys, nodes) -> dict[str, list[str]]:
    """Role -> ACL rules (without `on` and the password)."""
    reads = " ".join(f"%R~{p}" for p in patterns(k, NOT_READ))
    out = {
        CLIENT: ["resetkeys", "resetchannels", "-@all", *BASE,
                 f"(~{k.requests} ~{k.wake} +lpush)", f"(~{k.reply('*')} +blpop +lpop +llen)",
                 f"({reads} {' '.join(READ)})"],
        SCHEDULER: ["resetkeys", "resetchannels", f"~{k.p}:*", "+@all", "-@dangerous", "+info",
                    "+config|get", "+client|setname"],
        ADMIN: ["resetkeys", "resetchannels", "~*", "&*", "+@all"],
    }
    for node in nodes:
        out[node_role(node)] = _node_rules(k, node)
    return out


def password_hash(password: str) -> str:
    return hashlib.sha256(password.encode()).hexdigest()


def aclfile(rules: dict[str, list[str]], passwords: dict[str, str]) -> str:
    """The text of a Redis `aclfile` (passwords as SHA-256, never in clear)."""
    lines = ["user default off resetkeys resetchannels -@all nopass"]
    for role, r in rules.items():
        pw = f"#{password_hash(passwords[role])}" if role in passwords else f">PASSWORD-OF-{role}"
        lines.append(" ".join(["user", role, "on", "resetpass", pw, *r]))
    return "\n".join(lines) + "\n"


def apply(r, rules: dict[str, list[str]], passwords: dict[str, str]) -> None:
    """Create or reset each role, then switch the default user off (last: this connection may be it)."""
    for role, rs in rules.items():
        r.execute_command("ACL", "SETUSER", role, "reset", "on", f"#{password_hash(passwords[role])}", *rs)
    r.execute_command("ACL", "SETUSER", "default", "off", "resetkeys", "resetchannels", "-@all")


def read_passwords(path: str) -> dict[str, str]:
    """{role: password} of redis.password_file `path`, a file or a directory (store/passwords.py)."""
    from .passwords import read
    return read(path)


def client_url(url: str, password: str) -> str:
    """The configured Redis address `url` with the client role's login, as the world-readable
    config's redis.url: redis://labq-client:PW@head:6380/0, unix://labq-client:PW@/run/redis.sock."""
    from .conn import without_credentials
    scheme, _, rest = without_credentials(url).partition("://")
    return f"{scheme}://{CLIENT}:{quote(password, safe='')}@{rest}"


def new_password() -> str:
    return secrets.token_urlsafe(24)
