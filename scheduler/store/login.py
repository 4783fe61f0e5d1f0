"""How the daemons open Redis: each logs in as its own ACL role (acl.py), checks the server, and gets
the store objects it works through. The connection stays inside them: `labq scheduler`, `labq worker`
and `labq up` (cli/daemons.py) import no connection module."""
import os
import socket
import time
import uuid

from . import acl, conn, schema
from .faults import ERRORS
from .keys import Keys
from .reads import Reader
from .state import SchedulerStore


def scheduler_name() -> str:
    """This scheduler's name in the leader lease: host, pid and a nonce (a restart is someone else)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class SchedulerLink:
    """The scheduler's connection: logged in as its role, the server reached and its schema checked."""

    def __init__(self, cfg, url: str):
        conn.login_as(acl.SCHEDULER, cfg.redis_password_file)
        # With a password file the role's password comes from it, never from the URL.
        self.url = conn.without_credentials(url) if cfg.redis_password_file else url
        self._r = conn.connect(self.url)
        conn.ping(self._r)
        self.keys = Keys(cfg.prefix)
        schema.check(self._r, self.keys)

    def store(self, me: str) -> SchedulerStore:
        """A store for `me` (the leader lease's holder, or what it is for: "durability", "history")."""
        return SchedulerStore(self._r, self.keys, me)

    def history(self, cfg, pass_s: float):
        """(Archiver, History): the scheduler archives ended jobs and old ledger entries (history.keep)
        into its archive, and reads what it moved there."""
        from .archive import Archiver, committed_fn
        from .history import History, default_path
        path = default_path(cfg.history["url"])
        cluster = self.store("history").cluster_id()
        archiver = Archiver(self._r, self.keys, path, cfg.history["keep"], cfg.history["purge_after"],
                            committed=committed_fn(self._r, self.keys, cfg), pass_s=pass_s, cluster=cluster)
        if "://" not in path and os.path.exists(path):
            # Another cluster's archive is refused now, before leading; this one's is published in Redis
            # (an archive from before the key existed included): clients find it there, never guess.
            archiver.publish()
        return archiver, History(path)


def as_admin(password_file: str) -> None:
    """This command, and its children, log in as labq-admin (`labq admin acl --apply` and the
    commands for admins: the client role cannot read or do what they do)."""
    conn.login_as(acl.ADMIN, password_file)


class AdminLink:
    """`labq admin acl`'s connection (as labq-admin after as_admin, else as the URL says)."""

    def __init__(self, url: str, prefix: str):
        self._r = conn.connect(url)
        self.keys = Keys(prefix)

    def node_names(self) -> set[str]:
        """The nodes that ever registered: each gets its role."""
        return Reader(self._r, self.keys).node_names()

    def apply_roles(self, rules: dict[str, list[str]], passwords: dict[str, str]) -> None:
        acl.apply(self._r, rules, passwords)


def worker(cfg, url: str, node: str) -> str:
    """Log in as `node`'s role and reach the server: the address its agent and runners use (without
    credentials where the role's password comes from a file)."""
    conn.login_as(acl.node_role(node), cfg.redis_password_file)
    if cfg.redis_password_file:
        url = conn.without_credentials(url)
    conn.ping(conn.connect(url))
    return url


def first_node(url: str, prefix: str, timeout: float, dead) -> tuple[int, int]:
    """The (GPUs, CPUs) of the first node registered within `timeout` while `dead()` names nothing
    (a stack's process that exited); (0, 0) if none did."""
    store, end = SchedulerStore(conn.connect(url), Keys(prefix), "up"), time.monotonic() + timeout
    while time.monotonic() < end and not dead():
        try:
            for node in store.nodes(time.time()):
                return len(node.gpus), node.cpus
        except ERRORS:
            pass        # Redis still starting (or loading its AOF): ask again until the timeout
        time.sleep(0.1)
    return 0, 0
