"""What every command needs: the config, the Redis URL, a client, and turning errors into exit codes."""
import click

from .out import guarded, url_or_default


def redis_url(cfg) -> str:
    """$LABQ_REDIS_URL, else redis.url from the config, else the private Redis of `labq up`."""
    return url_or_default(cfg.redis_url)


MAX_COUNT = 100_000


def bounded_count(value: int, flag: str = "-n/--count", hi: int = MAX_COUNT) -> int:
    """`value` of a "the newest N" option, or a UsageError (one line, exit 2) outside 1..hi."""
    from labq.scheduler.errors import UsageError
    if not 1 <= value <= hi:
        raise UsageError(f"{flag}: expected a count from 1 to {hi:,}, got {value}")
    return value


class Ctx:
    def __init__(self, config_path):
        self.config_path = config_path
        self._cfg = None
        self._client = None
        self._thin = None

    @property
    def cfg(self):
        if self._cfg is None:
            from labq.scheduler.settings import config as config_mod  # here: `--help` never needs it (issue 39)

            from .out import config_source
            self._cfg = config_mod.load(*config_source(self.config_path))
        return self._cfg

    @property
    def thin(self):
        """The thin client (no redis-py) of the hot commands, from the config's [redis] table alone."""
        if self._thin is None:
            from .fast import thin_client
            self._thin = thin_client(self.config_path)
        return self._thin

    @property
    def client(self):
        if self._client is None:
            from labq.scheduler.client import Client
            self._client = Client(self.cfg, url=redis_url(self.cfg))
            from labq.scheduler.store.history import History, path_of
            c = self._client
            url = self.cfg.history["url"]
            c.read.history = History(path_of(url) if url else None, ask=lambda op, body: c._checked(
                c.request(op, body)), get=c.r.get, keys=c.k)
        return self._client


pass_ctx = click.make_pass_decorator(Ctx)


def run_guarded(fn):
    """Call fn(); user errors become one line on stderr and their exit code, never a traceback."""
    def redis_errors():   # a Redis client error class we did not map, for one
        from labq.scheduler.store.faults import ERRORS
        return ERRORS
    return guarded(fn, redis_errors)


def volatile_header(ctx) -> None:
    """Say so when the scheduler leads a Redis without AOF (redis.allow_volatile = true): one INFO,
    only where the config allows it (a volatile Redis is refused otherwise)."""
    if not ctx.cfg.allow_volatile:
        return
    from labq.scheduler.daemon.durability import volatile_line
    from labq.scheduler.store.state import SchedulerStore
    c = ctx.client
    if SchedulerStore(c.r, c.k, "reader").aof_enabled() is False:
        click.echo(f"WARNING: {volatile_line(c.url).split(';')[0]} (redis.allow_volatile = true)")
