"""What the request handlers read beyond the scheduler's state (issue 40 item 1), read by the tick and
handed to them as plain data (change.Read, the state's `read`): the round's one bulk read of the
records its requests name; and where a handler needs more (change.Unread), that read and the handler
asked again. The handlers themselves read nothing (tests/test_architecture.py: DECIDERS)."""
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ..jobs.model import Job
from ..settings.config import Config
from . import decode, lookup
from .change import Change, Read, Unread


class Store(Protocol):
    """What is read for the handlers (store/state.SchedulerStore has it)."""
    def jobs(self, ids: list[int]) -> list[Job]: ...
    def spent(self) -> dict[str, int]: ...
    def known_keys(self, keys: list[str]) -> set[str]: ...


class Holder(Protocol):
    """Where the reads go (state.SchedulerState): the read, and the table it need not repeat."""
    read: Read
    jobs: dict[int, Job]
    cfg: Config


class TickRead:
    def __init__(self, state: Holder, store: Store, ended: Callable[[list[int]], list[Job]]) -> None:
        """`ended`: the records of ended jobs, through the archive too (loop.Scheduler.ended_jobs)."""
        self.state, self.store, self.ended = state, store, ended

    def round(self, requests: Sequence[tuple[str, str, dict[str, Any]]]) -> None:
        """A round's read for its handlers: the records of the jobs its requests name that are not in
        the table (lookup.named: ended ones, mostly), in one bulk read for the round, not one per
        request; the ledger keys asked are the round's too."""
        st = self.state
        st.read.records, st.read.charged, st.read.ended = {}, {}, {}
        limit = st.cfg.max_request_bytes

        def parse(text: str) -> object:     # parsed once: the request's decoding finds it (decode.submit_body)
            return decode.submit_body(text, limit)
        named = {i for _, _, f in requests for i in lookup.named(f.get("op", ""), f.get("body") or "", parse)}
        missing = [i for i in named if i not in st.jobs]
        if missing:
            self.read(Unread(missing))

    def decided(self, decide: Callable[[], Change]) -> Change:
        """A handler's Change; where it needs what the round did not read (change.Unread: a task range
        of an ended array, a job that ended within the round, the spent hash, ledger keys), that is
        read and the handler asked again: it changed nothing before it asked."""
        while True:
            try:
                return decide()
            except Unread as need:
                self.read(need)

    def read(self, need: Unread) -> None:
        """What `need` names and was not read yet, into the state's Read (each in one round trip)."""
        read = self.state.read
        ids = [i for i in need.ids if i not in read.records]
        keys = [k for k in need.keys if k not in read.charged]
        spent = need.spent and read.spent is None
        ended = [i for i in need.ended if i not in read.ended]
        if not (ids or keys or spent or ended):      # asked again for what it was handed: a bug, not a loop
            raise RuntimeError(f"a handler asked for what was read already ({need})")
        if ids:
            found = {j.id: j for j in self.store.jobs(ids)}
            read.records.update((i, found.get(i)) for i in ids)
        if spent:
            read.spent = self.store.spent()
        if keys:
            known = self.store.known_keys(keys)
            read.charged.update((k, k in known) for k in keys)
        if ended:
            got = {j.id: j for j in self.ended(ended)}
            read.ended.update((i, got.get(i)) for i in ended)
