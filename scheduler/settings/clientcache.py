"""The client settings (clientconf.py's) of a config file, kept in the user's cache directory.

Even parsing TOML costs more than the rest of the settings (tomllib and what it imports): the
settings read from a file are kept in $XDG_CACHE_HOME/labq (~/.cache/labq), stamped with the file's
inode, size and mtime, and read back while the stamp still matches. An edge of the core (the
environment names the directory): config.py reads clientconf.py, never this module.
"""
from __future__ import annotations

import os

from ..cjson import dumps, loads
from .clientconf import _settings, books_of, read_toml, resolve_path

TYPE_CHECKING = False
if TYPE_CHECKING:     # for annotations only: the hot CLI commands import neither typing nor the config
    from collections.abc import Callable
    from typing import Any

    from .config import Config

    Stamp = list[str | int]     # the file's absolute path, inode, size and mtime (ns)


def client_settings(path: str | None = None, system: bool = True) -> dict[str, Any]:
    """{redis_url, prefix, redis_password_file, security} of the config at `path` (resolved as
    config.load does): what a client needs to reach Redis and to sign its requests."""
    return _read(resolve_path(path, system))


def _read(path: str | None) -> dict[str, Any]:
    if not path:
        return _settings({})
    stamp = _stamp(path)
    if stamp is None:
        return _settings(read_toml(path))     # read_toml says what is wrong with it
    cache = _cache_file()
    got = _cached(cache, stamp)
    if got is None or not _complete(got):
        got = _settings(read_toml(path))
        _keep(cache, stamp, got)
    return got


def _stamp(path: str) -> Stamp | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [os.path.abspath(path), st.st_ino, st.st_size, st.st_mtime_ns]


def _complete(got: dict[str, Any]) -> bool:
    """Not an older labq's settings (which lack some)."""
    return {"currency", "history_url", "limits", "allow_volatile"} <= got.keys()


BOOK_KEYS = {"budgets", "currency", "node_hour", "source", "shares", "fairshare_half_life", "priority", "qos",
             "pricing"}


def books(path: str | None, system: bool, full: Callable[[str | None], Config]) -> dict[str, Any]:
    """books_of(full(path)) of the config at `path` (resolved as config.load does; `full` is
    config.load, which validates the whole file), kept beside the client settings once `full` has
    accepted this very file (the same stamp): the next `labq budget` then neither parses TOML nor
    builds the config (~20 ms of CPU, issue 39 item 4), and a file it refuses is refused each time."""
    path = resolve_path(path, system)
    stamp = _stamp(path) if path else None
    if path is None or stamp is None:
        return books_of(full(path))
    cache = _cache_file()
    got = _cached(cache, stamp)
    # Books an older labq kept lack what was added since (the shares, the priorities, the prices): load the
    # config again then.
    if got is not None and isinstance(got.get("books"), dict) and BOOK_KEYS <= got["books"].keys():
        kept: dict[str, Any] = got["books"]
        return kept
    out = books_of(full(path))
    _keep(cache, stamp, {**(got if got is not None and _complete(got) else _settings(read_toml(path))), "books": out})
    return out


def _cache_file() -> str:
    """One file, for the config last read (its path is in the stamp): a user has one config."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "labq", "client-settings.json")


def _cached(cache: str, stamp: Stamp) -> dict[str, Any] | None:
    try:
        with open(cache) as f:
            d = loads(f.read())
    except (OSError, ValueError):
        return None
    settings: dict[str, Any] | None = d.get("settings") if isinstance(d, dict) and d.get("stamp") == stamp else None
    return settings


def _keep(cache: str, stamp: Stamp, settings: dict[str, Any]) -> None:
    """Best effort: without a writable cache directory the next command parses the file again."""
    try:
        os.makedirs(os.path.dirname(cache), mode=0o700, exist_ok=True)
        tmp = f"{cache}.{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(dumps({"stamp": stamp, "settings": settings}))
        os.replace(tmp, cache)
    except OSError:
        pass    # the cache only saves time: an unwritable one means reading the file next time
