"""Every Redis key labq uses, with its type and who writes it. Nothing else formats key strings.

Writers: S = the scheduler (single writer of jobs, allocations and the ledger), W = a node agent or
its runners (only its own node's keys, attempt status and the events stream), U = a user's client
(LPUSH onto the request list and the wake list, nothing else).
"""
from functools import cached_property

ROWS_VERSION = 4    # the shape of a `stat` row (statrows.py): a new shape is a new key, rebuilt at start
ACCT_VERSION = 1    # the shape of an ended job's acct row in Redis (acctrows.redis_row): likewise, back-filled


class Keys:
    def __init__(self, prefix: str = "labq"):
        self.p = prefix

    @property
    def schema(self) -> str:                  # STRING (S): layout version of the data (store/schema.py)
        return f"{self.p}:schema"

    # -- requests and replies --------------------------------------------------------------------
    @cached_property    # the two each request names: a property's call, run cold in a busy drain (issue 39)
    def requests(self) -> str:                # LIST (U: LPUSH only): one JSON object a request {rid, op,
        return f"{self.p}:requests"           # body, user, expires, cred} (store/inbox.py); the scheduler
                                              # LMOVEs them into `taken`, oldest first

    @property
    def taken(self) -> str:                   # LIST (S): requests read and not answered yet; what a leader
        return f"{self.p}:requests:taken"     # left here when it died, its successor handles (LREM on answer)

    @cached_property
    def wake(self) -> str:                    # LIST (U, W): any token; wakes the scheduler (emptied on wake)
        return f"{self.p}:wake"

    def reply(self, rid: str) -> str:         # LIST (S): one JSON reply, expires after 10 minutes
        return f"{self.p}:reply:{rid}"

    def done(self, rid: str) -> str:          # STRING (S): the reply kept for dedup, expires after a day
        return f"{self.p}:done:{rid}"

    def partial(self, rid: str) -> str:       # STRING (S): runs of ids (idruns) a mass cancel has committed so
        return f"{self.p}:partial:{rid}"      # far; its successor's reply names them too (deleted with the reply)

    @property
    def in_hand(self) -> str:                 # STRING (S): "<stream>/<entry id> <n>": the entry a recovering
        return f"{self.p}:inhand"             # leader handles now, begun by n leaders (poison guard)

    def credential(self, key: str) -> str:    # STRING (S): inbox entry that first used a munge credential
        return f"{self.p}:cred:{key}"         # (replay guard, expires after 2 x security.credential_ttl)

    # -- jobs ----------------------------------------------------------------------------------
    @property
    def seq(self) -> str:                     # STRING (S): INCR source of job ids
        return f"{self.p}:seq:job"

    def job(self, jid: int) -> str:           # STRING (S): the job record, JSON (codec.py)
        return f"{self.p}:job:{jid}"

    @property
    def active(self) -> str:                  # ZSET (S): ids of non-terminal jobs, score = id
        return f"{self.p}:active"

    @property
    def history(self) -> str:                 # ZSET (S): ids of ended jobs, score = end time
        return f"{self.p}:history"

    def spec(self, array_id: int) -> str:     # STRING (S): an array's shared {argv} (codec.shares_spec)
        return f"{self.p}:job:{array_id}:spec"

    def rest(self, array_id: int) -> str:     # STRING (S): JSON {lo, step, runs, template}: the tasks of a
        return f"{self.p}:rest:{array_id}"    # held array not made into records yet (jobs/rest.py, store/rests.py)

    @property
    def rests(self) -> str:                   # HASH (S): array id of each rest -> JSON {lo, step, runs, row}:
        return f"{self.p}:rests"              # its tasks' shared `stat` row (statrows.py), read with the rows

    @property
    def stat_rows(self) -> str:               # HASH (S): id of each active job -> its `stat` row (statrows.py)
        return f"{self.p}:statrows:v{ROWS_VERSION}"

    @property
    def ran(self) -> str:                     # SET (S): ids of the active jobs that ran or are on a node, and
        return f"{self.p}:ran:v1"             # "-": kept with the records (ThinReader.ran; absent: an older labq)

    @property
    def ran_by(self) -> str:                  # STRING (S): the leader (Keys.leader's value) that rebuilt Keys.ran:
        return f"{self.p}:ran:v1:by"          # readers trust the set only while that leader leads (a downgrade)

    @property
    def report_new(self) -> str:              # HASH (S): id of an ended job -> its report contribution
        return f"{self.p}:report:v1:new"      # (money/totals.contribution, "?": not known), not yet in cells

    @property
    def report_cells(self) -> str:            # HASH (S): cell (JSON [hour, account, user, qos, project,
        return f"{self.p}:report:v1:cells"    # state]) -> the summed Row.vector of its ended jobs in Redis

    @property
    def report_all(self) -> str:              # HASH (S): DIMS (money/totals.dims_of) -> report_cells' and the
        return f"{self.p}:report:v1:all"      # split jobs' vectors summed over every hour (a report of all time)

    @property
    def report_folded(self) -> str:           # HASH (S): id -> the contribution report_cells holds of it
        return f"{self.p}:report:v1:folded"   # ("s": in report_split), removed when archived

    @property
    def report_split(self) -> str:            # ZSET (S): ended jobs whose attempts end in several hours,
        return f"{self.p}:report:v1:split"    # score = end time (as in `history`): read whole

    @property
    def report_by(self) -> str:               # STRING (S): the leader (Keys.leader's value) that rebuilt the
        return f"{self.p}:report:v1:by"       # report keys: readers trust them only while it leads

    @property
    def ranking(self) -> str:                 # STRING (S): "time\ntext": `labq prio`'s text as the leader
        return f"{self.p}:ranking:v1"         # rendered it then (daemon/ranking.py)

    @property
    def ranking_by(self) -> str:              # STRING (S): the leader (Keys.leader's value) that published the
        return f"{self.p}:ranking:v1:by"      # ranking: readers trust it only while that leader leads (a downgrade)

    @property
    def ranking_since(self) -> str:           # HASH (S): user -> jobs of theirs the commits since the ranking
        return f"{self.p}:ranking:v1:since"   # changed (store/ranking.py)

    @property
    def ranking_index(self) -> str:           # HASH (S): "" -> the ranking's parameters and lines' sort keys,
        return f"{self.p}:ranking:v1:index"   # user -> their pending jobs in it (priopatch.py)

    @property
    def ranking_mine(self) -> str:            # HASH (S): user -> "id:submit time,…" of their jobs the commits
        return f"{self.p}:ranking:v1:mine"    # since the ranking changed, "*" past ranking.CAP (store/ranking.py)

    @property
    def blocker(self) -> str:                 # STRING (S): backfill off, the display id of the job the last
        return f"{self.p}:blocker"            # pass's jobs behind it wait for (codes.BEHIND_BLOCKER; absent: none)

    @property
    def acct_rows(self) -> str:               # HASH (S): id of each ended job in `history` -> its acct row
        return f"{self.p}:acctrows:v{ACCT_VERSION}"   # (acctrows.redis_row): written with the job's end,
                                              # removed with its record by the archiver

    def job_env(self, ref: int) -> str:       # STRING (S): JSON [[name, value], …] a submission exported
        return f"{self.p}:env:{ref}"          # (--export), by array id or job id (codec.env_ref); not
                                              # readable by clients (acl.NOT_READ): it may hold tokens

    def env_text(self, digest: str) -> str:   # STRING (S): the JSON text of an exported environment, once
        return f"{self.p}:envtext:{digest}"   # per distinct text (codec.env_stored's digest), which
                                              # job_env values name as "@DIGEST" (schema 3). Not readable
                                              # by clients or nodes (acl.NOT_READ): it holds their tokens

    def env_refs(self, digest: str) -> str:   # SET (S): the submissions (job_env refs) whose job_env names
        return f"{self.p}:envrefs:{digest}"   # env_text(digest): the text goes with the last of them
                                              # (writes.drop_specs)

    def script(self, ref: int) -> str:        # STRING (S): the script text of a submission, by array id or
        return f"{self.p}:script:{ref}"       # job id (codec.env_ref); records only say `scripted`. Not
                                              # readable by clients (acl.NOT_READ): `labq show --script`
                                              # asks the scheduler (scheduler/security/private.py). Not under
                                              # `job:`: the clients' read pattern `job:*` would match it

    def handover(self, node: str, jid: int, what: str) -> str:   # STRING (S COPY at dispatch, W GET+DEL at
        return f"{self.p}:handover:{node}:{jid}:{what}"         # claim): job jid's "script" or "env", copied
                                                                 # for the node its attempt went to: a node
                                                                 # role reads its own node's only (acl.py)

    def control(self, jid: int) -> str:       # STRING (S): "cancel" | "preempt" for the running attempt
        return f"{self.p}:job:{jid}:control"

    def attempt(self, jid: int, n: int | str) -> str:   # HASH (W): runner status {claimed, pid, start, hb}
        return f"{self.p}:job:{jid}:a{n}"

    def part(self, jid: int, n: int, rank: int) -> str:   # HASH (W): a gang part's status; rank 0's is
        return self.attempt(jid, n) if not rank else f"{self.p}:job:{jid}:a{n}.{rank}"   # the attempt's;
                                                          # rank 0 adds {addr, port}: MASTER_ADDR/PORT

    # -- nodes ---------------------------------------------------------------------------------
    @property
    def nodes(self) -> str:                   # SET (W): registered node names
        return f"{self.p}:nodes"

    def node(self, name: str) -> str:         # HASH (W): {cpus, mem, slots, gpus(JSON), hb, pid, host}
        return f"{self.p}:node:{name}"

    def node_lease(self, name: str) -> str:   # STRING (W) with PX TTL: the agent's lease
        return f"{self.p}:node:{name}:lease"

    def node_admin(self, name: str) -> str:   # STRING (S): "drain" when the scheduler drains it
        return f"{self.p}:node:{name}:admin"

    def node_health(self, name: str) -> str:  # HASH (S): {since, reason} while the node is unhealthy
        return f"{self.p}:node:{name}:health"

    def node_runners(self, name: str) -> str:  # HASH (W): slot -> "idle" | "running <job>.<attempt>" | ...
        return f"{self.p}:node:{name}:runners"

    def node_purge(self, name: str) -> str:   # SET (S SADD, W SRANDMEMBER/SREM): archived jobs whose
        return f"{self.p}:node:{name}:purge"   # stored script and checkpoints the node's spool drops

    # -- dispatch to a node (scheduler -> its runners) ---------------------------------------------
    def dispatch(self, node: str) -> str:     # LIST (S LPUSH, W BLMOVE): "<job>:<attempt>" admitted there
        return f"{self.p}:dispatch:{node}"

    def dispatch_slot(self, node: str, slot: int) -> str:   # LIST (W): what runner `slot` took, until done
        return f"{self.p}:dispatch:{node}:{slot}"

    def node_control(self, node: str, jid: int) -> str:     # LIST (S LPUSH, W BLPOP): wakes the runner
        return f"{self.p}:control:{node}:{jid}"              # of job `jid` for a new control value

    def node_events(self, node: str) -> str:  # STREAM (W): that node's events (who wrote it proves the node)
        return f"{self.p}:events:{node}"

    # -- events, ledger, leader ------------------------------------------------------------------
    @property
    def events(self) -> str:                  # STREAM (W): {kind, job, attempt, node, body(JSON)}
        return f"{self.p}:events"

    @property
    def dead(self) -> str:                    # STREAM (S): dead letters {source, id, reason, entry(JSON), ts}
        return f"{self.p}:dead"

    @property
    def ledger(self) -> str:                  # STREAM (S): append-only ledger entries
        return f"{self.p}:ledger"

    @property
    def ledger_anchor(self) -> str:           # STRING (S): JSON {sid, hash, rows} of the archived ledger's
        return f"{self.p}:ledger:anchor"      # chain head at the last archive pass (store/archive.py)

    @property
    def ledger_keys(self) -> str:             # SET (S): idempotency keys of ledger entries
        return f"{self.p}:ledger:keys"

    def spent(self) -> str:                   # HASH (S): budget, or budget@PERIOD -> settled micro-units
        return f"{self.p}:spent"              # (a cache of the ledger's charges; periods.py)

    @property
    def overrides(self) -> str:               # HASH (S): override id -> JSON (ledger.Override)
        return f"{self.p}:budget:overrides"

    @property
    def limits(self) -> str:                  # HASH (S): budget -> JSON {limit, by, at, prev} of `budget set`
        return f"{self.p}:budget:limits"

    @property
    def periods(self) -> str:                 # HASH (S): budget -> label of the period last rolled into
        return f"{self.p}:budget:periods"

    @property
    def alerts(self) -> str:                  # STREAM (S): {kind, scope, level, message, ts, key, data(JSON)}
        return f"{self.p}:alerts"

    @property
    def alerts_fired(self) -> str:            # SET (S): keys of the alerts raised (each fires once)
        return f"{self.p}:alerts:fired"

    @property
    def usage(self) -> str:                   # HASH (S): account -> JSON [decayed usage, as of epoch]
        return f"{self.p}:usage"

    @property
    def leader(self) -> str:                  # STRING (S) with PX TTL: the active scheduler's id
        return f"{self.p}:leader"

    @property
    def state_file(self) -> str:              # STRING (S): path of the leader's state file (durability.py),
        return f"{self.p}:statefile"          # where `labq admin accept-loss` writes

    @property
    def archive(self) -> str:                 # STRING (S): where the archive is (a path, a URL without its
        return f"{self.p}:archive"            # password), set once something was archived into it

    @property
    def cluster(self) -> str:                 # STRING (S): this cluster's id, set at its first start; its
        return f"{self.p}:cluster"            # archive carries the same id (store/archive.py)


GROUP = "scheduler"   # consumer group on each events stream
# One fixed consumer name: only the leader reads, and a restarted leader must see the entries its
# predecessor read but never acknowledged.
CONSUMER = "leader"
