"""API submission rate and a 10,000-task array.

The jobs go to the account `parked`, held, so they stay pending and the worker stays
idle: what is timed is the request path (client → inbox → scheduler → reply), not job execution.
A diagnostic run of the loop with Redis's appendfsync at everysec (the stack uses always) shows what
the fsync of each request costs.
Between measurements the parked jobs are cancelled (untimed), so each one starts from the same
queue, and exactly one 10,000-task array is left pending for `labq stat`.
"""
import threading
import time

from rows import Row

from labq.scheduler.client import Client


def _loop(bs, n: int, client=None, ids=None) -> float:
    client = client or bs.client
    body = bs.body(["true"], account="parked")
    got = []
    t0 = time.perf_counter()
    for _ in range(n):
        got.append(client.submit(dict(body))["job_id"])
    dt = time.perf_counter() - t0
    if ids is not None:
        ids += got
    return dt


def _cancel(bs, ids) -> None:
    ids = [str(i) for i in ids]
    for i in range(0, len(ids), 1000):
        reply = bs.client.request("cancel", {"ids": ids[i:i + 1000]}, timeout=120)
        if not reply.get("ok"):
            raise RuntimeError(f"cancel of parked jobs failed: {str(reply.get('error'))[:300]}")


def _concurrent(bs, clients: int, per_client: int, ids) -> float:
    cs = [Client(bs.cfg, url=bs.stack.url) for _ in range(clients)]
    errors = []

    def work(c):
        try:
            _loop(bs, per_client, c, ids)
        except Exception as e:       # reported, not hidden
            errors.append(e)
    threads = [threading.Thread(target=work, args=(c,)) for c in cs]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - t0


def _without_fsync(bs, n: int) -> Row:
    """The same loop with Redis's appendfsync at everysec instead of the stack's always: what the
    per-request fsync costs (a diagnostic beside the target, not a setting labq uses)."""
    r = bs.client.store.r
    was = r.config_get("appendfsync").get("appendfsync", "always")
    ids: list = []
    r.config_set("appendfsync", "everysec")
    try:
        dt = _loop(bs, n, ids=ids)
    finally:
        r.config_set("appendfsync", was)
    _cancel(bs, ids)
    return Row("API submission in a loop, Redis appendfsync everysec (diagnostic)", n / dt, "jobs/s",
               better="higher", key="sub.api.everysec",
               note=f"{n} sequential submits, {dt * 1000 / n:.2f} ms each; the stack's Redis runs appendfsync "
                    f"{was} (an fsync per write), this shows what that costs per submit")


def run(bs, quick: bool) -> list[Row]:
    n = 300 if quick else 1000
    ids: list = []
    dt = _loop(bs, n, ids=ids)
    rows = [Row("API submission, Client.submit in a loop", n / dt, "jobs/s", 5000, "higher",
                f"{n} sequential submits, {dt * 1000 / n:.2f} ms each, onto an empty queue", key="sub.api")]
    _cancel(bs, ids)
    rows.append(_without_fsync(bs, n // 2))
    k, per, ids = 4, (100 if quick else 250), []
    dt = _concurrent(bs, k, per, ids)
    rows.append(Row(f"API submission, {k} concurrent clients", k * per / dt, "jobs/s", 5000, "higher",
                    f"{k} threads × {per} submits, onto an empty queue", key="sub.api4"))
    _cancel(bs, ids)
    times, runs = [], 1 if quick else 3
    for i in range(runs):
        body = bs.body(["true"], account="parked", array="1-10000")
        t0 = time.perf_counter()
        reply = bs.client.submit(body, timeout=120)
        times.append(time.perf_counter() - t0)
        if reply["count"] != 10000:
            raise RuntimeError(f"array reply has {reply['count']} tasks: {reply.get('display')}")
        if i < runs - 1:
            _cancel(bs, [reply["job_id"]])
    rows.append(Row("10,000-task array submit (one request)", min(times) * 1000, "ms", 100,
                    note=f"best of {runs} ({', '.join(f'{t * 1000:.0f}' for t in times)} ms), onto an empty queue",
                    key="array10k"))
    return rows
