"""A group commit's replies (commit._build): each pushed onto the list its client waits on (RPUSH, with
EXPIRE: a reply nobody pops goes) and kept for the client's retries of the same request id (SET done,
EX), as writes.put_reply writes one.

Why a script (issue 39 item 3): those three commands a request were ~7 of the scheduler's µs a request
to queue in the pipeline, pack, and read back twice (MULTI's QUEUED, then EXEC's reply each: 6 replies a
request); one EVAL for the batch is one command and two replies, whatever its size. Redis runs the same
commands on the same keys, inside the same MULTI/EXEC: nothing is applied unless the whole transaction
is, and its AOF and replicas get the commands themselves (Redis 7 replicates a script by its effects).

Under maxmemory Redis refuses every command queued in MULTI, the script's EVAL too (EXECABORT). Memory
that runs out after the commands are queued (their queue's own can do it) refuses EXEC itself only
where it holds a command that is refused under OOM, which a script without flags is not (it would run,
stop at its first write, and the acknowledgements, LTRIM, never refused, would go through without the
replies): so the batch's first reply stays its own commands (RPUSH: refused under OOM). (A `#!lua`
shebang would make the EVAL such a command, but fakeredis, which the suite uses, cannot parse one.)"""
from .keys import Keys
from .writes import DONE_TTL, REPLY_TTL, _compact, put_reply

# KEYS: reply, done of each reply in turn; ARGV: the reply's TTL, done's TTL, then each reply's text.
# redis.call: an error reply (no command here can get one on the scheduler's own keys) ends the script
# and fails the commit as a command's error in EXEC does (wire._unread raises it).
SCRIPT = """local n = #ARGV - 2
for i = 1, n do
  local text = ARGV[i + 2]
  redis.call('RPUSH', KEYS[2 * i - 1], text)
  redis.call('EXPIRE', KEYS[2 * i - 1], ARGV[1])
  redis.call('SET', KEYS[2 * i], text, 'EX', ARGV[2])
end
return n"""


def put_replies(p, k: Keys, replies, push: bool = True) -> None:
    """writes.put_reply of each of `replies` ((rid, reply, remember) of a Batch); those both pushed and
    remembered past the first, by one script (SCRIPT)."""
    keys: list[str] = []
    texts: list[str] = []
    for i, (rid, reply, remember) in enumerate(replies):
        if i == 0 or not push or not remember:     # the first: its RPUSH refuses EXEC under OOM (above)
            put_reply(p, k, rid, reply, remember, push)
        else:
            keys += (k.reply(rid), k.done(rid))
            texts.append(_compact(reply))
    if texts:
        p.execute_command("EVAL", SCRIPT, len(keys), *keys, REPLY_TTL, DONE_TTL, *texts)
