"""What every command needs: the config, the Redis URL, a client, and turning errors into exit codes."""
import click

from .ctx import Ctx
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


pass_ctx = click.make_pass_decorator(Ctx)


def run_guarded(fn):
    """Call fn(); user errors become one line on stderr and their exit code, never a traceback."""
    return guarded(fn, redis_errors)


def redis_errors():
    """redis-py's error classes (a Redis client error we did not map, for one), imported only then."""
    from labq.scheduler.store.faults import ERRORS
    return ERRORS


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
