"""What every command needs: the config, the Redis URL, a client, and turning errors into exit codes."""
import json
import os
import sys

import click

from labq.scheduler import config as config_mod
from labq.scheduler.errors import LabqError


def state_dir() -> str:
    """Per-user state: the private Redis of `labq up`, its data and pid file."""
    base = os.environ.get("LABQ_STATE_DIR") or os.path.join(
        os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state"), "labq")
    return base


def private_socket() -> str:
    return os.path.join(state_dir(), "redis", "redis.sock")


def redis_url(cfg) -> str:
    """redis.url from the config, else $LABQ_REDIS_URL, else the private Redis of `labq up`."""
    return cfg.redis_url or os.environ.get("LABQ_REDIS_URL") or f"unix://{private_socket()}"


class Ctx:
    def __init__(self, config_path):
        self.config_path = config_path
        self._cfg = None
        self._client = None

    @property
    def cfg(self):
        if self._cfg is None:
            self._cfg = config_mod.load(self.config_path)
        return self._cfg

    @property
    def client(self):
        if self._client is None:
            from labq.scheduler.client import Client
            self._client = Client(self.cfg, url=redis_url(self.cfg))
        return self._client


pass_ctx = click.make_pass_decorator(Ctx)


def fail(message: str, code: int = 2):
    click.echo(f"labq: {message}", err=True)
    sys.exit(code)


def echo_json(obj) -> None:
    click.echo(json.dumps(obj, indent=2, sort_keys=False))


def run_guarded(fn):
    """Call fn(); user errors become one line on stderr and their exit code, never a traceback."""
    try:
        return fn()
    except LabqError as e:
        fail(str(e), e.exit_code)
    except KeyboardInterrupt:
        fail("interrupted", 130)
    except Exception as e:  # a Redis client error class we did not map, for one
        from labq.scheduler.store.conn import ERRORS
        if isinstance(e, OSError) and e.filename and not str(e.filename).endswith(".sock"):
            fail(f"{e.filename}: {e.strerror or e}", 2)    # a file of ours, not the Redis socket
        if isinstance(e, ERRORS):
            fail(f"Redis does not answer: {e}", 4)
        raise


def volatile_header(ctx) -> None:
    """Say so when the scheduler leads a Redis without AOF (redis.allow_volatile = true): one INFO,
    only where the config allows it (a volatile Redis is refused otherwise)."""
    if not ctx.cfg.allow_volatile:
        return
    from labq.scheduler.durability import volatile_line
    from labq.scheduler.store.state import SchedulerStore
    c = ctx.client
    if SchedulerStore(c.r, c.k, "reader").aof_enabled() is False:
        click.echo(f"WARNING: {volatile_line(c.url).split(';')[0]} (redis.allow_volatile = true)")
