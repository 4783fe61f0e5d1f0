"""The scheduler's side of the request list (issue 34): clients LPUSH onto `labq:requests` and can do
nothing else there; the scheduler LMOVEs requests into its own `labq:requests:taken` and LREMs each
in the transaction that answers it (SchedulerStore.ack), so a leader that dies leaves them to the
next. Also the wake list the loop waits on between ticks, and the entry in hand: what a recovering
leader handles now, for the poison guard.

A mixin of SchedulerStore (state.py), which holds the connection, the keys and `txn`."""
import contextlib
import hashlib
import itertools
import threading
import time

from . import conn, noderows, wire
from .keys import CONSUMER, GROUP

WOKE_FRESH = 0.05      # seconds: what a wait read as it returned serves the tick right after it, no later


class RequestList:
    # Wake tokens left when the wait returned (about one a request or event): how many requests the
    # tick's first read (look) moves in its own round trip; and those it moved, for take_requests.
    _wake_hint = 0
    _premoved: list = []
    _taken_len: int | None = None     # LLEN of `taken` as the open transaction began watching it (txn)
    _woke: dict = {}                  # what the last wait_wake read as it returned (woken), and when
    _woke_at = 0.0
    _node_names: list = []            # the registered nodes as last read (SchedulerStore.nodes)
    _look_for: tuple = ()             # (streams, count) of the last look: what a wait reads ahead for the next
    _looked: tuple | None = None      # what the last wait read ahead (look's answer), for the next look
    _moved = 0                        # requests the last take_requests handed out: a wait's LMOVEs ahead

    def take_requests(self, count: int, waiting: int | None = None) -> list:
        """Up to `count` requests, oldest first, moved into `taken` (LMOVE: a leader that dies
        holding them leaves them there for the next): [(entry id, raw bytes)]. `waiting`: the
        request list's length where the caller has just read it (look), counting those look moved."""
        pre, self._premoved = self._premoved, []
        self._moved = len(pre)
        n = min(count, self.r.llen(self.k.requests) if waiting is None else waiting) - len(pre)
        if n <= 0:
            return pre
        got = wire.moves(self.r, ("LMOVE", self.k.requests, self.k.taken, "RIGHT", "LEFT"), n)
        if got is None:
            p = self.r.pipeline(transaction=False)
            for _ in range(n):
                p.execute_command("LMOVE", self.k.requests, self.k.taken, "RIGHT", "LEFT", NEVER_DECODE=True)
            got = p.execute()
        out = pre + self._named([raw for raw in got if raw is not None])
        self._moved = len(out)
        return out

    def look(self, streams: list[str], count: int) -> tuple[bool, int, list]:
        """A tick's first read, one round trip: (left behind, requests waiting, new events).

        Left behind: whether requests wait in `taken` or events among the group's pending entries,
        when this leader holds none (each round acknowledges what it read in its own commit). Then a
        deposed leader took them: frozen (SIGSTOP) just past its tick's lease check and resumed after
        its successor recovered, it moved them there and its commit failed on the lease; nobody else
        would look there before the next recovery (issue 35). Asked before the new events are read
        (a pipeline keeps its order), which join the pending entries the recovery then handles.
        Its own round trip was ~70 us of scheduler CPU a tick, a fifth of an idle one. So are the
        first requests' LMOVEs, as many as the wake-up left tokens (after the lengths: a leader that
        finds entries left behind handles what it moved with them; take_requests hands them out)."""
        self._look_for = (list(streams), count)
        moves, self._wake_hint = min(count, self._wake_hint), 0
        ahead, self._looked = self._looked, None
        if ahead is not None:       # read as the wait returned, in its round trip (wait_wake)
            return ahead
        cmds, reads = self._look_commands(streams, count, moves)
        got = wire.call(self.r, cmds, False)
        if got is None:
            p = self.r.pipeline(transaction=False)
            for cmd in cmds:
                p.execute_command(*cmd, NEVER_DECODE=True)
            got = p.execute()
        else:
            got[2:reads] = [stream_reply(x) for x in got[2:reads]]
        return self._looked_at(got, bool(streams), reads)

    def _look_commands(self, streams: list[str], count: int, moves: int) -> tuple[list, int]:
        """look's commands (and how many of them read before the `moves` LMOVEs)."""
        cmds = [("LLEN", self.k.taken), ("LLEN", self.k.requests)]
        if streams:
            cmds += [("XREADGROUP", "GROUP", GROUP, CONSUMER, "COUNT", n, "STREAMS", *streams, *[at] * len(streams))
                     for n, at in ((1, "0"), (count, ">"))]
        return cmds + [("LMOVE", self.k.requests, self.k.taken, "RIGHT", "LEFT")] * moves, len(cmds)

    def _looked_at(self, got: list, streams: bool, reads: int) -> tuple[bool, int, list]:
        """look's answer from its commands' replies (the streams' already in redis-py's shape)."""
        if not got[0]:
            self.held.clear()     # `taken` was empty: nothing held before is there (acknowledged, or by a successor)
        self._premoved = self._premoved + self._named([raw for raw in got[reads:] if raw is not None])
        pending, new = (got[2], got[3]) if streams else (None, None)
        return bool(got[0]) or bool(entries(pending)), int(got[1]), entries(new)

    def wait_wake(self, timeout: float) -> bool:
        """Block until a client or agent pushes to the wake list, or `timeout` passes; then empty it.
        Tokens carry nothing (anyone may push anything): a wake-up means "read the requests and
        events", which the tick does whole, so every token pushed before the DEL is served."""
        # One round trip: Redis runs the DEL as the BLPOP returns, woken or timed out. A token pushed
        # between the two is served all the same: a tick follows every wait. The tick's first reads
        # (who holds the lease, the nodes) come with it, read as the wait returns: two round trips a
        # tick fewer (~70-100 us of scheduler CPU each, issue 39's fixed cost per batch); `woken`
        # hands them to the tick that follows at once, never later.
        names = list(self._node_names)
        cmds = [("BLPOP", self.k.wake, max(0.01, timeout)), ("LLEN", self.k.wake), ("DEL", self.k.wake),
                ("GET", self.k.leader), *noderows.commands(self.k, names)]
        # And the next tick's first look, run by Redis as the BLPOP returns: a round trip and an fsync'd
        # write (its LMOVEs) fewer a batch (issue 39: each write round trip waits for an fsync under
        # appendfsync always). As many LMOVEs as the last intake took (a guess: those answered send
        # again; one that finds the list empty moves nothing), take_requests moves the rest. What they
        # move is in `taken` at once: a scheduler that dies or is deposed before its tick leaves it to
        # the next leader, as a look's.
        ahead = bool(self._look_for) and self._looked is None
        nodes_end = len(cmds)
        if ahead:
            streams, count = self._look_for
            look, reads = self._look_commands(streams, count, min(count, ahead_moves(self._moved)))
            cmds += look
        got = wire.call(self.r, cmds, False)
        self._woke = {}
        if got is not None:
            try:
                self._woke = {"leader": (_text(got[3]),), "nodes": (names, _text(got[4:nodes_end]))}
            except UnicodeDecodeError:      # a node wrote bytes that are no text: read as before
                pass
            self._woke_at = time.monotonic()
            if ahead:
                looked = got[nodes_end:]
                looked[2:reads] = [stream_reply(x) for x in looked[2:reads]]
                self._looked = self._looked_at(looked, bool(streams), reads)
        if got is None:
            p = self.r.pipeline(transaction=False)
            p.execute_command(*cmds[0], NEVER_DECODE=True)
            p.llen(self.k.wake)
            p.delete(self.k.wake)
            got = p.execute()
        self._wake_hint = 1 + int(got[1]) if got[0] else 0
        return bool(got[0])

    def woken(self, what: str) -> tuple | None:
        """What the last wait read of `what` ("leader": (holder,); "nodes": (names asked, replies)) as
        it returned, once, and only within WOKE_FRESH of that: the tick right after the wait."""
        got = self._woke.pop(what, None)
        return got if got is not None and time.monotonic() - self._woke_at < WOKE_FRESH else None

    def wakes_waiting(self) -> bool:
        got = wire.call(self.r, [("LLEN", self.k.wake)])
        return (got[0] if got is not None else self.r.llen(self.k.wake)) > 0

    def taken_requests(self) -> list:
        """What a predecessor took and never answered, oldest first: [(entry id, raw bytes)] (what
        look moved too: it is in `taken`)."""
        self._premoved, self._looked = [], None      # its events are pending entries: read as those
        return self._named(list(reversed(self.r.execute_command("LRANGE", self.k.taken, 0, -1, NEVER_DECODE=True))))

    def _named(self, raws) -> list:
        """Each request's entry id: a digest of its bytes (no id is the client's to choose), the same
        after a restart; twins (the same bytes twice) are told apart by their order."""
        out, seen = [], {}
        for raw in raws:
            eid = hashlib.sha256(raw).hexdigest()[:20]
            seen[eid] = seen.get(eid, 0) + 1
            eid += f".{seen[eid]}" if seen[eid] > 1 else ""
            self.held[eid] = raw
            out.append((eid, raw))
        return out

    # -- the round's first read, with its commit's fence (SchedulerStore.txn) ------------------------
    _early: tuple | None = None    # (ExitStack, pipeline, Keep, lease holder, thread) of a WATCH replies_done opened

    def replies_done(self, rids: list[str], watch: bool = False) -> list:
        """The kept reply of each request id already answered (None where not): one MGET per batch.
        `watch`: in the same round trip, the WATCH that fences the round's commit (txn takes it), the
        lease's holder, `taken`'s length and the budgets' balances where not read since the last
        commit (spent): one round trip a batch fewer (issue 39). Only a round with nothing else to
        watch for: the lease lock is held until the commit (or unwatch), which a renewal thread
        (keeping_lease, a leader's reload) would wait on."""
        if not rids:
            return []
        cmd = ("MGET", *[self.k.done(r) for r in rids])
        if watch and self._early is None:
            more = [cmd] + ([("HGETALL", self.k.spent())] if self._spent is None else [])
            stack = contextlib.ExitStack()
            try:
                stack.enter_context(self.lease_lock)
                p, keep = stack.enter_context(conn.kept_pipeline(self.r))
                holder, self._taken_len, *got = wire.watch_get(p, self.k.leader, self.k.taken, more)
            except BaseException:
                stack.close()
                raise
            self._early = (stack, p, keep, holder, threading.get_ident())
            if len(got) > 1:
                self._spent = {k: int(v) for k, v in wire.hash_of(got[1]).items()}
            return got[0]
        got = wire.call(self.r, [cmd])
        return got[0] if got is not None else self.r.execute_command(*cmd)

    @contextlib.contextmanager
    def fenced(self):
        """(pipeline, its Keep, the lease's holder) of a transaction, WATCHing the lease and `taken`
        (whose length is _taken_len): the WATCH replies_done opened, else one opened now."""
        early, self._early = self._early, None
        if early is None:
            stack = contextlib.ExitStack()
            try:
                stack.enter_context(self.lease_lock)
                p, keep = stack.enter_context(conn.kept_pipeline(self.r))
                holder, self._taken_len = wire.watch_get(p, self.k.leader, self.k.taken)
            except BaseException:
                stack.close()
                raise
            early = (stack, p, keep, holder, None)
        with early[0]:
            yield early[1:4]

    def unwatch(self) -> None:
        """Drop a WATCH replies_done opened and no commit took (its connection back, UNWATCHed); only
        from the thread that opened it (a lease renewal's thread never holds one)."""
        early = self._early
        if early is not None and early[4] == threading.get_ident():
            self._early = None
            early[0].close()

    # -- acknowledgements (commit.py, in the transaction that answers) ----------------------------
    def ack(self, p, stream: str, *eids: str) -> None:
        """Acknowledge: an event in its group; a request leaves `taken` (its answer is kept in
        done:<rid>, never its body)."""
        if stream != self.k.taken:
            p.xack(stream, GROUP, *eids)
            return
        if self._oldest_held(eids):
            # All of `taken` is ours (its length, read as the transaction watched it, is that of
            # `held`), in the order moved: these are its k oldest, at its tail. One LTRIM, where an
            # LREM each sent each request's bytes again (~1.8 KB: 43 % of a commit of submits).
            p.ltrim(self.k.taken, 0, -len(eids) - 1)
            for eid in eids:
                del self.held[eid]
            return
        for eid in eids:
            raw = self.held.pop(eid, None)
            if raw is not None:
                # From the tail, where the oldest taken (the first answered) lie: Redis found each at
                # once, where from the head it compared past all taken after it (twins are equal bytes).
                p.lrem(self.k.taken, -1, raw)

    def _oldest_held(self, eids: tuple[str, ...]) -> bool:
        """Whether `eids` are the oldest entries this leader holds, and `taken` holds nothing else: its
        length when the transaction began watching it is that of `held` (anything another client moved
        there, or a move whose reply was lost, makes it longer; WATCH fails the transaction on any
        change after). Then they are the tail of `taken`: each move pushed on its head."""
        n = len(eids)
        return self._taken_len == len(self.held) and n <= len(self.held) and \
            set(itertools.islice(self.held, n)) == set(eids)

    # -- the entry in hand (daemon._recover_pending) ---------------------------------------------
    def in_hand(self) -> tuple[str, int]:
        """The entry a recovering leader was handling, and how many leaders began it without finishing."""
        got = self.r.get(self.k.in_hand)
        entry, _, n = (got or "").rpartition(" ")
        return entry, int(n) if n.isdigit() else 0

    def hold_in_hand(self, entry: str, n: int) -> None:
        """Written (fenced) before `entry` is handled: a leader that dies on it leaves its name."""
        self.txn(lambda p: p.set(self.k.in_hand, f"{entry} {n}"))

    def drop_in_hand(self) -> None:
        self.txn(lambda p: p.delete(self.k.in_hand))


def ahead_moves(moved: int) -> int:
    """The LMOVEs a wait sends ahead, after an intake that took `moved`: half as many again and a few
    more. A batch bigger than the guess took the rest in a round trip of its own, a write Redis fsyncs
    before it answers (under appendfsync always): ~30 % of the 100-client drain's batches, 0.5-2 ms
    each (issue 39). An LMOVE that finds the list empty writes nothing and costs ~1 µs."""
    return moved + moved // 2 + 8


def _text(x):
    """Replies read undecoded (wire.call(..., False)) as text, as a decoded read gives them."""
    if isinstance(x, bytes):
        return x.decode()
    if isinstance(x, list):
        return [_text(v) for v in x]
    if isinstance(x, dict):     # RESP3's maps and sets
        return {_text(k): _text(v) for k, v in x.items()}
    if isinstance(x, set):
        return {_text(v) for v in x}
    return x


def stream_reply(res):
    """An XREADGROUP reply as wire.call reads it, in redis-py's shape: each entry's fields a dict
    (RESP2 gives a flat list; an entry trimmed while pending has none: None)."""
    if res is None:
        return []
    per = res.items() if isinstance(res, dict) else res
    return [(stream, [(eid, wire.hash_of(fields) if fields is not None else None) for eid, fields in got])
            for stream, got in per]


def entries(res) -> list:
    """An XREADGROUP reply as [(stream, entry id, raw fields)] (fields None: trimmed while pending)."""
    out = []
    for stream, got in (res.items() if isinstance(res, dict) else res or []):
        name = stream.decode() if isinstance(stream, bytes) else stream    # our own key names
        for eid, fields in got:
            out.append((name, eid.decode() if isinstance(eid, bytes) else eid, fields))
    return out
