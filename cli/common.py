"""What every command needs: the config, the Redis URL, a client, and turning errors into exit codes."""
import click

from .ctx import Ctx
from .out import guarded, url_or_default


def redis_url(cfg) -> str:
    """$LABQ_REDIS_URL, else redis.url from the config, else the private Redis of `labq up`."""
    return url_or_default(cfg.redis_url)


pass_ctx = click.make_pass_decorator(Ctx)


def run_guarded(fn):
    """Call fn(); user errors become one line on stderr and their exit code, never a traceback."""
    return guarded(fn, redis_errors)


def redis_errors():
    """redis-py's error classes (a Redis client error we did not map, for one), imported only then."""
    from labq.scheduler.store.faults import ERRORS
    return ERRORS
