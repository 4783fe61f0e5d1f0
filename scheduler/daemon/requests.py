"""The daemon's side of the users' inboxes: who sent each request (munge), one request answered in
isolation (a failing one is answered or dead-lettered alone), refusals and dead letters. The scheduler
(daemon/loop.py) holds an Inboxes and hands it what it may use of itself (shell.Shell) and its node
events; each change goes through the shell's `commit` with the ack."""
import collections
import json
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..errors import LabqError, RefusedError, StalePlanError, UsageError
from ..jobs import rest
from ..jobs.idruns import Runs
from ..security import auth, private
from ..settings.config import Config
from ..store import histpages
from ..store.commit import release_memory
from ..store.faults import ERRORS as REDIS_ERRORS
from . import decode, triage
from .change import Change
from .decode import Request
from .events import NodeEvents
from .handlers import BUDGET_OPS, CHUNK
from .shell import Shell
from .tickread import TickRead

log = logging.getLogger("labq.scheduler")
# What a failing entry must not swallow: losing the lease or Redis stops the tick, and the entry
# stays unacknowledged for the next leader (it is not the entry's fault).
POISON_PASSES = (StalePlanError, *REDIS_ERRORS)
# `labq admin archive --now`: archive passes in the leader, answered here (they touch SQLite).
ARCHIVE_OP = "archive"
ARCHIVE_NOW_S = 3.0      # at most this long in one request (under a client's 10 s a try); ticks do the rest
STATUS_OP = "request_status"   # `labq stat --rid`: what became of a request a client gave up on
SOLO_OPS = frozenset(("drain", "resume", ARCHIVE_OP, *BUDGET_OPS))
MAX_REQUESTS_PER_TICK = 20_000
READ_COUNT = 500            # requests, and events per stream, per read
# An entry as read: (stream, entry id, what was read: a request's bytes, an event's fields, None if trimmed)
Raw = tuple[str, str, Any]
Entry = tuple[str, str, dict[str, str]]      # an entry whose fields decoded (decode.fields, decode.entry)
Sender = str | RefusedError | None           # a login name, its refusal, or not known yet (identified alone)


class Inboxes:
    def __init__(self, shell: Shell, events: NodeEvents) -> None:
        self.shell, self.events = shell, events
        self.state, self.store, self.k, self.committer = shell.state, shell.store, shell.k, shell.committer
        self.handlers = shell.handlers
        self.reads = TickRead(shell.state, shell.store, shell.ended_jobs)    # what the handlers read beyond the state
        self.recovering = False     # handling what a predecessor took (store.taken_requests), not fresh requests
        self.claimed: set[str] = set()     # the entries whose credential this round claimed (_round resets it)
        self.sent: collections.Counter[str | tuple[str, str]] | None = None   # per user this tick: requests, bytes

    @property
    def cfg(self) -> Config:
        return self.state.cfg       # replaced as the budgets change: read it where it is used

    # -- requests and events: read in batches, each batch one transaction ----------------------
    def intake(self, now: float, pending: bool) -> None:
        """Take requests and read the event streams, handle what was read, commit it as one batch;
        again until both are empty. What a predecessor left unanswered (`pending`) goes one at a time."""
        if pending:
            self.sent = None                   # as in a recovery: the intake bounds count from the next tick
            self._recover_pending(now)
            return
        # The first read of the tick asks in the same round trip whether a deposed leader left anything.
        waiting: int | None
        events: list[Raw] | None
        left, waiting, events = self.store.look(self.events.node_streams(), READ_COUNT)
        if left:
            log.warning("a deposed leader left requests or events taken and unanswered: handling them")
            self.sent = None
            self._recover_pending(now)         # the events just read are among the pending entries too
            waiting, events = None, None
        self.sent = collections.Counter()      # per user this tick: requests, bytes (the intake bounds)
        done = 0
        while done < MAX_REQUESTS_PER_TICK:
            requests = [(self.k.taken, eid, raw) for eid, raw in self.store.take_requests(READ_COUNT, waiting)]
            if events is None:
                events = self.store.read_group(self.events.node_streams(), False, READ_COUNT)
            if not requests and not events:
                break
            self._round(now, requests, events)
            done += len(requests)
            more = _maybe_more(events)
            waiting, events = None, None
            if len(requests) < READ_COUNT and not more:
                # Drained when read: whatever came since pushed a wake-up, which the loop's next
                # wait returns at once. Reading again to find nothing was two round trips a tick.
                break

    def _round(self, now: float, read: list[Raw], read_events: list[Raw]) -> None:
        """Entries as read (raw bytes) handled against the in-memory view, written as one batch."""
        self.state.answered, self.claimed = {}, set()
        self.committer.begin(self.state.usage)
        try:
            requests, events = self._decoded(read, False), self._decoded(read_events, True)
            self.reads.round(requests)
            # With the commit's WATCH (txn), but not in a recovery: a leader's reload renews its lease
            # from a thread, which must not wait on the lease lock while an entry is handled.
            prior = self.store.replies_done([decode.reply_id(f, eid) for _, eid, f in requests],
                                            watch=not self.recovering)
            who = self._all_senders(requests, now)
            for (stream, eid, fields), old, sender in zip(requests, prior, who):
                sender = self._bounded(sender, fields)
                self._isolated(self._request, now, stream, eid, fields, old, sender)
            for stream, eid, fields in events:
                self._isolated(self.events.event, now, stream, eid, fields)
        finally:
            try:
                self.shell.flush()
            finally:
                self.store.unwatch()       # where nothing was committed (or a solo op flushed on its own)

    def _bounded(self, sender: Sender, fields: dict[str, str]) -> Sender:
        """The sender, or the refusal of one who passed this tick's share (triage.bounded); counted
        from the first tick, not in a recovery (`sent` None)."""
        sent = self.sent
        if not isinstance(sender, str) or sent is None:
            return sender
        sent[sender] += 1
        sent[(sender, "bytes")] += sum(map(len, fields.values()))
        return triage.bounded(sender, sent[sender], sent[(sender, "bytes")])

    def _recover_pending(self, now: float) -> None:
        """What a predecessor read and never acknowledged, one entry at a time, each named in
        `store.in_hand` before it is handled: a leader that dies on one leaves its name there, and
        the entry in hand when POISON_STRIKES leaders died is answered, never handled again. An
        entry merely read alongside it is never blamed."""
        self.recovering = True
        try:
            self._recover_taken(now)
        finally:
            self.recovering = False

    def _recover_taken(self, now: float) -> None:
        blamed, strikes = self.store.in_hand()
        held = bool(blamed)
        self.store.held.clear()
        requests = [(self.k.taken, eid, raw) for eid, raw in self.store.taken_requests()]
        while True:
            events = self.store.read_group(self.events.node_streams(), True, READ_COUNT)
            if not requests and not events:
                break
            for entry, is_event in [(e, False) for e in requests] + [(e, True) for e in events]:
                name = f"{entry[0]}/{entry[1]}"
                n = strikes + 1 if name == blamed else 1
                if n > decode.POISON_STRIKES:
                    self._poison(entry, is_event)
                    continue
                self.store.hold_in_hand(name, n)
                held = True
                self._round(now, [] if is_event else [entry], [entry] if is_event else [])
            requests = []
        if held:
            self.store.drop_in_hand()

    def _decoded(self, entries: list[Raw], events: bool) -> list[Entry]:
        """The entries whose fields are UTF-8 text of a sane size (decode.fields, decode.entry),
        decoded; each other is dead-lettered (values redacted) and a request answered, on its own."""
        out = []
        for stream, eid, raw in entries:
            fields, problem = self._fields(raw, events)
            if problem is None:
                out.append((stream, eid, fields))
            elif events:
                self.events.dead(stream, eid, raw, problem)
            else:
                self._refuse(stream, eid, decode.reply_id(fields, eid), fields or {"entry": raw}, problem,
                             dead=True, remember=False)
        return out

    def _fields(self, raw: Any, event: bool) -> tuple[dict[str, str], str | None]:
        """An event is a stream entry (a dict of bytes); a request one JSON object (bytes)."""
        return (decode.fields if event else decode.entry)(raw, self.cfg.max_request_bytes)

    def _poison(self, entry: Raw, is_event: bool) -> None:
        """An entry the leaders died on POISON_STRIKES times: answered and dead-lettered, not handled."""
        stream, eid, raw = entry
        fields, _ = self._fields(raw, is_event)
        if is_event:
            self.events.dead(stream, eid, raw, "this event stopped the scheduler twice; not run again")
        else:
            self._refuse(stream, eid, decode.reply_id(fields, eid), fields or {"entry": raw},
                         "this request stopped the scheduler twice; not run again", dead=True, remember=False)

    def _isolated(self, handle: Callable[..., None], now: float, stream: str, eid: str, fields: dict[str, str],
                  *extra: Any) -> None:
        """Handle one entry; one that raises stages nothing (a handler decides, commit() stages a
        change whole or not at all) and is answered (a request) and dead-lettered on its own, so
        that the rest of its batch still commits, whatever the commit granularity."""
        try:
            handle(now, stream, eid, fields, *extra)
        except POISON_PASSES:
            raise
        except Exception as e:   # noqa: BLE001 - a poison entry must not take its batch down
            log.exception("entry %s of %s failed; answered with an error and acknowledged", eid, stream)
            why = f"internal error: {type(e).__name__}: {str(e)[:300]}"
            if stream == self.k.events or stream.startswith(self.k.events + ":"):
                self.events.dead(stream, eid, fields, why)
            else:
                self._refuse(stream, eid, decode.reply_id(fields, eid), fields, why, dead=True)

    def _refuse(self, stream: str, eid: str, rid: str, fields: dict[str, Any], error: str, code: int = 2,
                dead: bool = False, remember: bool = True) -> None:
        """Answer a request with `error` and acknowledge it; `dead` keeps it in the dead letters too;
        `remember` False where the sender is not known yet (the rid must not bind its real owner)."""
        answer = triage.refusal(rid, error, code)
        self.shell.commit(answer.change, reply=(rid, answer.change.reply, remember), ack=(stream, eid),
                    dead=(stream, eid, fields, error) if dead else None)
        if dead:
            log.warning("request %s on %s dead-lettered: %s", eid, stream, error)

    def _all_senders(self, requests: list[Entry], now: float) -> list[Sender]:
        """The batch's senders at once; if one entry breaks that, each is identified on its own
        inside its isolation (_request with user None), so a poison credential harms only itself."""
        try:
            return self._senders(requests, now)
        except POISON_PASSES:
            raise
        except Exception:   # noqa: BLE001
            log.exception("identifying a batch of %d requests failed; one by one instead", len(requests))
            return [None] * len(requests)

    def _senders(self, requests: Sequence[Entry], now: float) -> list[Sender]:
        """Who sent each request: the `user` it names in single-host mode (only the socket's owner
        can write), whom munge vouches for otherwise (decoded concurrently, claimed in one round
        trip); a RefusedError where refused."""
        sec = self.cfg.security
        entries = [(fields.get("user", ""), fields, f"{stream}/{eid}") for stream, eid, fields in requests]

        def claim_many(claims: list[tuple[str, str]]) -> list[str | None]:
            return [self._redelivery(entry, held) for (_, entry), held in
                    zip(claims, self.store.claim_credentials(claims, sec.credential_ttl))]
        return [who if not isinstance(who, str) or decode.USER.match(who) else
                RefusedError(f"user: expected the sender's login name, got {who[:40]!r}")
                for who in auth.identify_many(entries, sec, now, claim_many)]

    def _redelivery(self, entry: str, held: str | None) -> str | None:
        """A credential this entry claimed before ("same") is a redelivery only for what a predecessor
        took (recovery) or what this round claimed already (a batch identified again one by one). An
        entry's id is the digest of its bytes, so a fresh entry of the same bytes is a replay."""
        if held == "same" and not (self.recovering or entry in self.claimed):
            return None
        if held is not None:
            self.claimed.add(entry)
        return held

    def _request(self, now: float, stream: str, eid: str, fields: dict[str, str], prior: str | None = None,
                 user: Sender = None) -> None:
        """Identify (munge, the store) → screen (triage.py: refused, a retry answered again, invalid,
        expired) → handle (handlers.py), for this one entry; whatever a handler raises becomes this
        entry's error reply (in _isolated)."""
        rid = decode.reply_id(fields, eid)
        if user is None:
            user = self._senders([(stream, eid, fields)], now)[0]
        answered: dict[str, Any] | None = None       # refused before its id's answer is looked at
        if isinstance(user, RefusedError):
            log.warning("inbox %s entry %s: %s", stream, eid, user)
        else:
            answered = json.loads(prior) if prior is not None else self.state.answered.get(rid)
        got = triage.screen(eid, fields, user, answered, self.cfg.max_request_bytes)
        if isinstance(got, decode.Request):
            # The one wall-clock read in a tick, and it stamps nothing: whether the client still waits
            # for this answer is a matter of real time (a long tick may read a request after the
            # client gave up and told its user nothing was done), not of the tick's `now`.
            got = triage.expired(got, now, self.shell.clock()) or got
        if isinstance(got, triage.Answered):
            self.shell.commit(got.change, reply=(rid, got.change.reply, got.remember), ack=(stream, eid))
            return
        req = got
        assert isinstance(user, str), "triage.screen answers every request of a sender it does not know"
        solo = req.op in SOLO_OPS     # budget and node changes: later requests must see them applied
        if solo:
            self.shell.flush()
            self.committer.begin(self.state.usage)
        try:
            change = self._handle(user, req, now)
        except LabqError as e:
            change = Change(reply={"ok": False, "code": e.exit_code, "error": str(e)})
        streamed = change.chunks is not None
        if change.chunks is not None:
            change = self._streamed(rid, change, change.chunks, req.expires)
        elif req.expires is not None and self.committer.batch is not None:
            self.committer.batch.expires = min(self.committer.batch.expires, req.expires)
        # A script or exported environment (private.py) is handed over, never kept in a `done` key.
        reply = (rid, change.reply, req.op != private.OP)
        self.shell.commit(change, reply=reply, ack=(stream, eid), partial=(rid, None) if streamed else None)
        self.state.answered[rid] = change.reply
        if self.shell.metrics:
            self.shell.metrics.requests.inc()
        if solo:
            self.shell.flush()
            self.committer.begin(self.state.usage)

    def _streamed(self, rid: str, change: Change, chunks: Iterator[Change], expires: float | None) -> Change:
        """A mass cancel: each chunk committed on its own with the runs of ids committed so far
        (store.partial), then the reply with the ack. A leader that dies between chunks leaves whole
        chunks; its successor handles the request again (it was never acknowledged), cancels the
        rest and names in its reply what the dead leader committed (whose records have ended).
        The client's expiry holds for the first chunk only: once tasks have ended, the cancel is
        finished and answered as one, never answered 'expired' (which says that nothing was done)."""
        prior = self.store.partial(rid)
        self.shell.flush()
        done = Runs()
        done.extend(prior)
        for i, part in enumerate(chunks):
            done.extend(_reply(part)["runs"])
            if i == 0 and not prior and expires is not None:
                self.committer.begin(self.state.usage).expires = expires
                self.shell.commit(part, partial=(rid, list(done.runs)))
                self.shell.flush()
                continue
            self.shell.commit(part, partial=(rid, list(done.runs)))
        if done.count > CHUNK:
            release_memory()
        self.committer.begin(self.state.usage)
        return triage.resumed(prior, change)

    def _handle(self, user: str, req: Request, now: float) -> Change:
        """The archive's requests are answered here (they touch its database); the rest by handlers."""
        if req.op == ARCHIVE_OP:
            return self._archive_now(user, now)
        if req.op == STATUS_OP:
            return Change(reply=self._request_status(user, req.body))
        if req.op == private.OP:        # a script and exported environment, for their owner and admins
            return Change(reply=self._private(user, req.body))
        if req.op == histpages.OP:     # a page of the archive, for a client that cannot open it
            return Change(reply=histpages.answer(self._archive_to_serve(), req.body))
        return self.reads.decided(lambda: self.handlers.handle(user, req.op, req.body, now))

    def _private(self, user: str, body: dict[str, Any]) -> dict[str, Any]:
        """`labq show --script/--json`: the job read here (table, Redis, archive), then, once allowed
        (security/private.py decides), its script and exported environment."""
        jid = private.job_id(body)
        archive = self.shell.archiver.existing() if self.shell.archiver is not None else None
        found = self.state.jobs.get(jid) or self.store.job(jid) or (archive.jobs([jid]).get(jid) if archive else None)
        job = private.allowed(found, jid, user, self.cfg.security.admins)
        return private.answer(job, *self.store.reader().private(job))

    def _request_status(self, user: str, body: dict[str, Any]) -> dict[str, Any]:
        """What became of request `of` (`labq stat --rid`): its answer and its job read here, the
        reply decided by triage.status."""
        rid = triage.status_of(body)
        kept = self.state.answered.get(rid)
        if kept is None:
            got = self.store.replies_done([rid])[0]
            kept = json.loads(got) if got else None
        jid = kept.get("job_id") if kept is not None and kept.get("ok") else None
        job = None
        if isinstance(jid, int):      # a held array kept as one rest (jobs/rest.py) has no record yet
            job = self.state.jobs.get(jid) or rest.tasks_of(self.state.rests, [jid]).get(jid) or self.store.job(jid)
        return triage.status(rid, kept, job, user, self.cfg.security.admins)

    def _archive_to_serve(self) -> Any:
        if self.shell.archiver is None:
            raise UsageError("this scheduler keeps no archive (it was started without one)")
        return self.shell.archiver.archive

    def _archive_now(self, user: str, now: float) -> Change:
        """Archive passes now (what history.keep lets go), in the leading scheduler: it is the one
        writer of Redis and of the archived ledger's hash chain (two writers could each chain a row
        to the same predecessor). Up to ARCHIVE_NOW_S; a backlog left is drained tick by tick."""
        if user not in self.cfg.security.admins:
            raise RefusedError(f"only admins ({', '.join(self.cfg.security.admins) or 'none set'}) may run "
                               "an archive pass")
        self._archive_to_serve()
        jobs = ledger = 0
        start = time.monotonic()
        while True:
            self.shell.archiver.next = float("-inf")
            j, n = self.shell.archiver.step(now)     # the tick's clock: what is old enough is judged at `now`
            jobs, ledger = jobs + j, ledger + n
            more = max(j, n) >= self.shell.archiver.size
            if not more or time.monotonic() - start > ARCHIVE_NOW_S:
                return Change(reply={"ok": True, "jobs": jobs, "ledger": ledger, "more": more,
                                     "keep": self.shell.archiver.keep})


def _reply(change: Change) -> dict[str, Any]:
    """A mass cancel's chunk's reply (handlers._chunks: each carries its runs)."""
    assert change.reply is not None, "a mass cancel's changes carry their replies"
    return change.reply


def _maybe_more(entries: list[Raw]) -> bool:
    """Whether a read_group stopped at its count on some stream (more may be waiting there)."""
    per = collections.Counter(stream for stream, _, _ in entries)
    return bool(per) and max(per.values()) >= READ_COUNT
