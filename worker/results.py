"""An attempt's outcome kept on the node's spool until Redis has it (issue 35): the runner writes
it as the job ends, before its `finished` post, and drops it once the post went through. One file
per slot (a slot runs one attempt at a time), naming the runner that holds it, so that
- the agent never kills a runner holding a finished result (its lease lapsing in a long Redis
  outage, or its heartbeat silent because the job is over), and
- a runner killed anyway leaves the result to the slot's next runner, which posts it instead of
  a node failure."""
import contextlib
import json
import os
import signal
import time

DIR = "results"
STOP_WAIT = 2.0        # seconds a SIGSTOPped runner may take to stop (it is then killed anyway)


def path(spool: str, slot: int) -> str:
    return os.path.join(spool, DIR, f"slot-{slot}.json")


def keep(spool: str, slot: int, entry: str, rank: int, body: dict) -> None:
    """Write the outcome of the attempt `entry` ("<job>:<attempt>", part `rank`) atomically.
    Not synced: a runner's death keeps the page cache, and only the host's crash within the first
    `finished` post (milliseconds) would lose it; a post that fails syncs it (`sync`) before it
    waits. An fsync here cost 10 ms a job (p50, 2 loaded cores) with one slot's jobs behind it."""
    os.makedirs(os.path.join(spool, DIR), mode=0o700, exist_ok=True)
    final = path(spool, slot)
    tmp = f"{final}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump({"pid": os.getpid(), "entry": entry, "rank": rank, "body": body}, f, separators=(",", ":"))
    os.replace(tmp, final)


def sync(spool: str, slot: int) -> None:
    """Make the kept outcome of `slot` survive the host's crash: the file, then its directory entry."""
    for p, flags in ((path(spool, slot), os.O_RDONLY), (os.path.join(spool, DIR), os.O_RDONLY | os.O_DIRECTORY)):
        fd = os.open(p, flags)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def kept(spool: str, slot: int, entry: str, rank: int) -> dict | None:
    """The body kept for that attempt's part in this slot, or None."""
    got = _read(path(spool, slot))
    if got is None or got.get("entry") != entry or got.get("rank") != rank:
        return None
    return got.get("body") if isinstance(got.get("body"), dict) else None


def drop(spool: str, slot: int) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path(spool, slot))


def mark_death(spool: str, slot: int, pid: int, at: float) -> None:
    """The runner `pid` of `slot` died (or was killed) at `at`, and its attempt could not be ended
    then (Redis away): whoever ends it later ends it then, not at the late post (deadslot.end)."""
    os.makedirs(os.path.join(spool, DIR), mode=0o700, exist_ok=True)
    final = os.path.join(spool, DIR, f"slot-{slot}.died")
    tmp = f"{final}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump({"pid": pid, "at": at}, f)
    os.replace(tmp, final)


def death(spool: str, slot: int, pid: int) -> float | None:
    """When runner `pid` of `slot` died, if marked (mark_death)."""
    got = _read(os.path.join(spool, DIR, f"slot-{slot}.died"))
    ok = got is not None and got.get("pid") == pid and isinstance(got.get("at"), (int, float))
    return float(got["at"]) if ok and got is not None else None


def drop_death(spool: str, slot: int) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(spool, DIR, f"slot-{slot}.died"))


def holders(spool: str) -> set[int]:
    """The pids of the runners holding a result not yet posted."""
    try:
        names = os.listdir(os.path.join(spool, DIR))
    except FileNotFoundError:
        return set()
    out = set()
    for n in names:
        if n.startswith("slot-") and n.endswith(".json"):
            got = _read(os.path.join(spool, DIR, n))
            if got is not None and isinstance(got.get("pid"), int):
                out.add(got["pid"])
    return out


def _read(p: str) -> dict | None:
    try:
        with open(p) as f:
            got = json.load(f)
    except (FileNotFoundError, ValueError):
        return None
    return got if isinstance(got, dict) else None


def stop_unless_holding(spool: str, pid: int) -> bool:
    """Before a runner is killed: SIGSTOP it, then look. True: it holds no result and stays stopped
    for the kill (SIGKILL reaches a stopped process). False: it holds one (or is gone) and runs on
    to post it. Stopped first, so that it cannot save a result between the look and the kill: in
    the soak a fence read the holders, a job ended and saved its result, and the kill that
    followed cost a finished job a node failure and a re-run (issue 35)."""
    try:
        os.kill(pid, signal.SIGSTOP)
    except ProcessLookupError:
        return False
    # The signal is delivered asynchronously: a runner on another CPU runs on for a moment.
    end = time.monotonic() + STOP_WAIT
    while _state(pid) not in ("T", "t", "Z", "") and time.monotonic() < end:
        time.sleep(0.001)
    if pid not in holders(spool):
        return True
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)
    return False


def _state(pid: int) -> str:
    """A process's state letter from /proc ("" once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return ""
