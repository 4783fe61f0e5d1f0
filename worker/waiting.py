"""What a runner sleeps on while its job runs: the job leader's exit (a pidfd), signals to the runner
itself, and controls from the scheduler (a blocking read on a thread), all through one poll()."""
import contextlib
import os
import signal
import threading

from labq.scheduler.store import faults
from labq.scheduler.store.agentside import AgentStore

from . import proctree
from .proctree import PARENT_DIED

STOP_POLL = 0.1        # while a stopping tree drains (an exited leader's pidfd stays readable)
CONTROL_BLOCK = 5.0    # one blocking read of the control list; the thread then reads again
RETRY = 1.0            # after a Redis error, before the next blocking read


class Sigterm:
    """SIGTERM to a runner is the agent's orderly stop (systemctl stop), passed on by the slot
    runner: preempt the job. proctree.PARENT_DIED (its PDEATHSIG) means the slot runner died:
    `orphaned`, kill at once. The handlers write to a pipe the watch loop sleeps on, so either is
    acted on at once."""

    def __init__(self, ppid: int = 0):
        self.got, self.orphaned, self._old = False, False, {}
        self.ppid = ppid or os.getppid()
        self.orphaned = os.getppid() != self.ppid     # it died before the handlers below were set
        self.rfd, self.wfd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        if threading.current_thread() is threading.main_thread():
            self._old = {signal.SIGTERM: signal.signal(signal.SIGTERM, self._set),
                         PARENT_DIED: signal.signal(PARENT_DIED, self._parent_died)}

    def _set(self, *_):
        if os.getppid() != self.ppid:
            self.orphaned = True
        else:
            self.got = True
        self.poke()

    def _parent_died(self, *_):
        self.orphaned = True
        self.poke()

    def poke(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self.wfd, b"x")

    def drain(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            while os.read(self.rfd, 512):
                pass    # empty the self-pipe: its bytes only say "wake up"

    def restore(self) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)
        self._old = {}

    def close(self) -> None:
        """The attempt is over: the slot runner's own handlers again, and the pipe closed (the
        runner lives on for the next attempt)."""
        self.restore()
        for fd in (self.rfd, self.wfd):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.rfd = self.wfd = -1


class ControlWatch(threading.Thread):
    """Blocks on the job's control list on this node (the scheduler pushes to it with every
    preempt or cancel) and wakes the watch loop at once, instead of a poll once a second. It ends
    within one blocking read after `stop()` (the attempt is over; the runner takes the next)."""

    def __init__(self, run):
        """`run`: the attempt's attemptstate.RunState (its control_due is set from this thread)."""
        super().__init__(daemon=True, name=f"control-{run.job.id}")
        self.run_, self.store = run, AgentStore.open(run.s.redis_url, run.s.prefix)
        self.done = threading.Event()

    def stop(self) -> None:
        self.done.set()

    def run(self) -> None:
        r = self.run_
        try:
            while not self.done.is_set():
                try:
                    got = self.store.wait_control(r.s.node, r.job.id, CONTROL_BLOCK)
                except faults.ERRORS:
                    self.done.wait(RETRY)      # the runner's tick reads the control key meanwhile
                    continue
                if got and not self.done.is_set():
                    r.control_due = True
                    r.term.poke()
        finally:
            with contextlib.suppress(*faults.ERRORS):
                self.store.close()


class LeaderWaiter:
    """Sleeps until a deadline, the leader's exit or a poke on `wake_fd` (a signal, a control),
    whichever comes first, without reaping the leader (waitid WNOWAIT, tech-notes §4.2). A pidfd
    wakes us the moment it exits; where there is none, we poll on a short interval."""

    def __init__(self, pid: int, wake_fd: int | None = None):
        self.pid, self.done, self.wake_fd = pid, False, wake_fd
        try:
            self.fd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            self.fd = None

    def exited(self) -> bool:
        self.done = self.done or os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        return self.done

    def wait(self, timeout: float) -> None:
        fds = [] if self.wake_fd is None else [self.wake_fd]
        if self.fd is None or self.done:      # an exited leader's pidfd stays readable: don't spin
            timeout = min(timeout, STOP_POLL)
        else:
            fds.append(self.fd)
        proctree.readable(fds, timeout)      # a signal may wake it early: the watch loop re-checks everything

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


# -- what a control says (the key labq:job:<id>:control) ---------------------------------------
def control_verb(control: str | None) -> str | None:
    """The control's verb: "cancel", or "preempt" from "preempt" / "preempt:GRACE"."""
    return control.split(":", 1)[0] if control else None


def stops_part(control: str | None, attempt: int) -> bool:
    """Whether the control is the gang stop of this attempt ("stop:N", attempt.gang_stop)."""
    return control == f"stop:{attempt}"


def control_grace(control: str) -> int | None:
    _, _, grace = control.partition(":")
    return int(grace) if grace.isdigit() else None
