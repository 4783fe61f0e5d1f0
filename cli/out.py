"""Output, exit codes and where the private Redis lives: what every command needs, without click
(the fast path of the hot commands, fast.py, imports this and not click)."""
import os
import sys

from labq.scheduler.errors import LabqError
from labq.scheduler.store.faults import ConnectionLost


def echo(text: str = "", err: bool = False, nl: bool = True) -> None:
    """click.echo's behaviour for text: one line (or as it is, nl=False), flushed."""
    f = sys.stderr if err else sys.stdout
    if nl and type(text) is str and len(text) > 1 << 16:
        f.write(text)       # a long text (`prio`'s 720 KB at 10,000 jobs) not copied whole to add a newline
        f.write("\n")
    else:
        f.write(f"{text}\n" if nl else text)
    f.flush()


def echo_json(obj) -> None:
    import json  # not at the top: `json` imports `re` and `enum`, which the plain views need not (cjson.py)
    echo(json.dumps(obj, indent=2, sort_keys=False))


def fail(message: str, code: int = 2):
    echo(f"labq: {message}", err=True)
    sys.exit(code)


MAX_COUNT = 100_000


def bounded_count(value: int, flag: str = "-n/--count", hi: int = MAX_COUNT) -> int:
    """`value` of a "the newest N" option, or a UsageError (one line, exit 2) outside 1..hi."""
    from labq.scheduler.errors import UsageError
    if not 1 <= value <= hi:
        raise UsageError(f"{flag}: expected a count from 1 to {hi:,}, got {value}")
    return value


def private_socket() -> str:
    """The socket of `labq up`'s private Redis, in the user's state directory."""
    from labq.scheduler.settings.statedir import state_dir
    return os.path.join(state_dir(), "redis", "redis.sock")


def url_or_default(configured: str) -> str:
    """$LABQ_REDIS_URL, else redis.url from the config, else the private Redis of `labq up`: the
    environment beats the config file. Where $LABQ_REDIS_URL names the very server redis.url names
    (a job's environment carries the address alone), redis.url's login (an ACL role) is kept."""
    env = os.environ.get("LABQ_REDIS_URL")
    if not env:
        return configured or f"unix://{private_socket()}"
    if configured and env != configured:
        from labq.scheduler.store.faults import without_credentials
        if without_credentials(configured) == without_credentials(env) == env:
            return configured
    return env


def config_source(explicit: str | None) -> tuple[str | None, bool]:
    """(path, read /etc/labq/labq.toml when no path): --config, else $LABQ_CONFIG, else the system file
    unless $LABQ_NO_SYSTEM_CONFIG is set (to anything but "" or "0"; the test suite sets it, so that
    a machine's /etc/labq changes no test)."""
    path = explicit or os.environ.get("LABQ_CONFIG") or None
    return path, os.environ.get("LABQ_NO_SYSTEM_CONFIG", "") in ("", "0")


def guarded(fn, redis_errors=None):
    """Call fn(); user errors become one line on stderr and their exit code, never a traceback.
    `redis_errors()`: the error classes of the Redis client in use (asked only after an error, so
    that redis-py is not imported to start a command)."""
    try:
        return fn()
    except LabqError as e:
        fail(_hint(str(e)), e.exit_code)
    except KeyboardInterrupt:
        fail("interrupted", 130)
    except BrokenPipeError:
        sys.stderr.close()   # `labq stat | head`: the reader left; nothing more to say
        sys.exit(1)
    except Exception as e:
        if isinstance(e, OSError) and e.filename and not str(e.filename).endswith(".sock"):
            fail(f"{e.filename}: {e.strerror or e}", 2)    # a file of ours, not the Redis socket
        if isinstance(e, ConnectionLost) or (redis_errors and isinstance(e, redis_errors())):
            fail(_hint(f"Redis does not answer: {e}"), 4)
        raise


def _hint(message: str) -> str:
    """What to do about a socket this user may not open: another user's `labq up` (private to them)."""
    if "Permission denied" in message and ".sock" in message:
        return (f"{message} (another user's `labq up`? Its Redis is private to that user: run your own "
                "`labq up`, or ask an admin for a shared one, docs/admin.md)")
    return message
