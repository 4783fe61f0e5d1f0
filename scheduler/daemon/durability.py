"""Durable or refused: the scheduler leads only on a Redis that keeps what it acknowledged.

Two checks before leading. (1) Persistence: Redis without AOF loses every job and the ledger on a
crash, so the scheduler refuses it unless `redis.allow_volatile = true`. It reads `INFO
persistence` (`aof_enabled`), which a restricted ACL role may read where CONFIG GET is denied.
(2) Rollback: a small state file beside the scheduler keeps the figures Redis had when last seen
(the last job id, how many ledger entries were ever added, the hash of the newest one). A Redis
behind them (restored from an old dump, restarted without its data) is refused, naming both
figures and `labq admin accept-loss`, which takes Redis's figures as the new truth.
"""
import hashlib
import json
import logging
import os
from dataclasses import fields, replace

from ..errors import RefusedError
from ..settings.statedir import state_dir
from ..store.faults import without_credentials
from ..store.figures import Figures

log = logging.getLogger("labq.scheduler")
# Figures' fields, plain values all: its dict made by these (dataclasses.asdict recursed and deep-copied
# each value: 17 -> 5 us hot of each leading tick's save, a batch's in the 100-client drain, issue 39)
_FIELDS = tuple(f.name for f in fields(Figures))


def default_path(prefix: str, url: str) -> str:
    """One file per Redis (URL) and key prefix, in the daemon's state directory."""
    tag = hashlib.sha256(url.encode()).hexdigest()[:8]
    return os.path.join(state_dir(daemon=True), f"scheduler-{prefix}-{tag}.json")


def volatile_line(url: str) -> str:
    return (f"Redis at {url} has no AOF persistence (appendonly no): a Redis crash would lose every job "
            "and the ledger; turn AOF on (appendonly yes) or set redis.allow_volatile = true to accept that")


def behind(saved: Figures, now: Figures, entry_seen: bool | None) -> bool:
    """Did Redis go backwards from `saved` to `now`? `entry_seen`: whether the saved newest ledger
    entry is still there with the same hash (None: archived away, which is no loss)."""
    return (now.last_job_id < saved.last_job_id or now.ledger_count < saved.ledger_count
            or entry_seen is False)


# A saved record is padded to SLOT bytes: the next save is then one pwrite over it in the file this
# process wrote last, where a tmp file and a rename each time (the leader saves after every tick that
# hands out job ids) were ~100-200 us of the scheduler's CPU per tick (issue 39: the fixed cost per
# batch). A write of one 512-byte record at offset 0 is never seen half-done by a reader nor torn by a
# crash of the writing process; nothing here was fsynced before either.
SLOT = 512


class StateFile:
    def __init__(self, path: str):
        self.path = path
        self.saved: Figures | None = None
        self._warned = False
        self._fd: int | None = None          # the file this process wrote last, open, and its (dev, inode)
        self._at: tuple[int, int] | None = None

    def load(self) -> Figures | None:
        try:
            with open(self.path) as f:
                data = json.load(f)
            return Figures(**{k: data[k] for k in _FIELDS if k in data})
        except (FileNotFoundError, NotADirectoryError):
            return None                 # never written (a directory that cannot be is save()'s to say)
        except (OSError, ValueError, TypeError) as e:
            raise RefusedError(f"state file {self.path} is unreadable ({e}); "
                               "run `labq admin accept-loss` to write it afresh from what Redis holds") from None

    def save(self, figures: Figures, strict: bool = False) -> None:
        """Write the figures when they changed (atomically: a crash leaves the old file or the new).
        `strict`: a file that cannot be written is a RefusedError naming it (before leading: a leader
        without its state file would lead a rolled-back Redis blind); else one warning."""
        if figures == self.saved:
            return
        data = json.dumps({k: getattr(figures, k) for k in _FIELDS}).encode()
        if len(data) < SLOT:
            data = data.ljust(SLOT - 1) + b"\n"     # json.load reads past the spaces
            if self._rewrite(data):
                self.saved = figures
                return
        tmp = f"{self.path}.{os.getpid()}.tmp"      # a standby on the same host writes the same file
        try:
            try:
                fd = _write(tmp, data)
            except FileNotFoundError:     # its directory, made once (a makedirs each tick cost 3 syscalls)
                os.makedirs(os.path.dirname(self.path) or ".", mode=0o700, exist_ok=True)
                fd = _write(tmp, data)
            try:
                os.replace(tmp, self.path)
            except OSError:
                os.close(fd)
                raise
            if len(data) != SLOT:       # too long to rewrite in place: each save renames
                os.close(fd)
                fd = None
            self._keep(fd)
            self.saved = figures
        except OSError as e:
            if strict:
                raise RefusedError(f"cannot write the state file {self.path} ({e.strerror}): without it a Redis "
                                   "that goes backwards would be led unnoticed; make its directory writable "
                                   "($STATE_DIRECTORY, scheduler.state_file)") from None
            if not self._warned:
                log.warning("cannot write the state file %s (%s): a Redis that goes backwards will not be "
                            "detected", self.path, e.strerror)
                self._warned = True

    def _rewrite(self, data: bytes) -> bool:
        """`data` (SLOT bytes) over the record this process wrote last, where the path still names that
        file (another process, a standby or `labq admin accept-loss`, may have put its own there)."""
        if self._fd is None:
            return False
        try:
            st = os.stat(self.path)
            if (st.st_dev, st.st_ino) == self._at and st.st_size == SLOT and os.pwrite(self._fd, data, 0) == SLOT:
                return True
        except OSError:
            pass    # gone, or the disk refused the write: save() writes and renames afresh, and says so
        self._keep(None)
        return False

    def _keep(self, fd: int | None) -> None:
        """Keep `fd` (the file now at the path) for the next save's rewrite, letting the last one go."""
        if self._fd is not None:
            os.close(self._fd)
        self._fd, self._at = fd, None
        if fd is not None:
            st = os.fstat(fd)
            self._at = (st.st_dev, st.st_ino)

    def __del__(self) -> None:
        if getattr(self, "_fd", None) is not None:
            os.close(self._fd)


def _write(path: str, data: bytes) -> int:
    """`data` as the whole of file `path`, as open(path, "w") makes it, without a text layer (its
    encoder was most of a save); the file left open for writing (its descriptor returned)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    try:
        while data:
            data = data[os.write(fd, data):]
    except BaseException:
        os.close(fd)
        raise
    return fd


class Durability:
    """The checks `labq scheduler` runs before leading (tests that build a Scheduler by hand skip them)."""

    def __init__(self, store, url: str, allow_volatile: bool, path: str):
        self.store, self.allow_volatile = store, allow_volatile
        self.url = without_credentials(url)     # shown in messages: never a password
        self.file = StateFile(path)

    def check(self, adopt: bool = True) -> None:
        """Raise RefusedError (one line) when this Redis must not be led. `adopt`: the file takes
        Redis's figures now; not behind replicas (redis.min_replicas_ack), where Redis may hold
        writes no failover keeps (a cut-off or stale master's): the file then learns only what a
        commit got acknowledged (acknowledged, seen), else a failover that discards them would
        have the scheduler refuse the new master for good."""
        aof = self.store.aof_enabled()
        if not aof:
            if not self.allow_volatile:
                raise RefusedError(volatile_line(self.url) if aof is False else
                                   f"Redis at {self.url} does not let the scheduler read INFO persistence; "
                                   "grant it +info, or set redis.allow_volatile = true")
            log.warning("Redis at %s has no AOF (redis.allow_volatile = true): a crash loses every job", self.url)
        saved = self.file.load()
        now = self.store.figures()
        if saved is not None and behind(saved, now, self.store.ledger_entry_is(saved.ledger_last,
                                                                              saved.ledger_hash)):
            raise RefusedError(
                f"Redis went backwards: it holds {now.describe()}, the state file {self.file.path} says "
                f"{saved.describe()}; restore Redis from its AOF, or accept the loss with "
                f"`labq admin accept-loss` (then start the scheduler again)")
        self.file.saved = None
        self.file.save(now if adopt or saved is None else saved, strict=True)   # written (or refused) before leading
        self.store.record_state_file(self.file.path)
        if aof and (fsync := self.store.aof_fsync()) not in ("always", None):     # issue 34: never silently
            log.warning("Redis at %s syncs its AOF with appendfsync %s, not always: a crash of the machine "
                        "can lose the last second of acknowledged submits and charges", self.url, fsync)

    def acknowledged(self, last_job_id: int) -> None:
        """Before replies go out behind replicas (redis.min_replicas_ack): the file learns the job ids
        they hand out, so that a promoted replica that lacks them is refused, never led to give the
        same ids again."""
        base = self.file.saved or Figures()
        if last_job_id > base.last_job_id:
            self.file.save(replace(base, last_job_id=last_job_id))

    def seen(self, committed=None) -> None:
        """After a leading tick: remember what Redis now holds, as the store that `committed` the tick's
        changes knows it (SchedulerStore.figures_now: read only where its commits do not tell)."""
        self.file.save((committed or self.store).figures_now())
