"""What the scheduler's parts are given of its shell (loop.Scheduler), declared: the node events
(events.NodeEvents) and the inboxes (requests.Inboxes) are objects the shell composes, each told in
its constructor what it may read and call, not mixins of one class reading attributes that class
never declared (issue 40). The shell is one of these; a test may hand in another."""
from collections.abc import Callable
from typing import Any, Protocol

from ..jobs.model import Job
from ..settings.config import Config
from ..store.batch import Ack, Dead, Partial, Reply
from ..store.commit import Committer
from ..store.keys import Keys
from ..store.state import SchedulerStore
from .change import Change
from .handlers import Handlers
from .state import SchedulerState


class Commit(Protocol):
    """Stage a change with what caused it: the state takes it at once, Redis with the open batch."""

    def __call__(self, change: Change, ack: Ack | None = None, reply: Reply | None = None,
                 dead: Dead | None = None, partial: Partial | None = None) -> None: ...


class Shell(Protocol):
    """What the inboxes read of the scheduler: its state and store, the open batch and how to
    commit into it, the handlers, the clock; the metrics and the archive where it has them."""
    state: SchedulerState
    store: SchedulerStore
    k: Keys
    committer: Committer
    handlers: Handlers
    clock: Callable[[], float]
    metrics: Any                            # metrics.Metrics, or None where scheduler.metrics is not set
    archiver: Any                           # store/archive.Archiver, or None: the scheduler keeps no archive

    @property
    def cfg(self) -> Config: ...
    @property
    def jobs(self) -> dict[int, Job]: ...

    def commit(self, change: Change, ack: Ack | None = None, reply: Reply | None = None,
               dead: Dead | None = None, partial: Partial | None = None) -> None: ...

    def flush(self) -> None: ...

    def ended_jobs(self, ids: list[int]) -> list[Job]: ...
