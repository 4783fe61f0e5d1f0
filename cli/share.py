"""`labq share`: each account's share, recent usage and fair-share factor, as sshare shows them.

RawShares is the configured `share`; NormShares its fraction of all shares; RawUsage the decayed
usage in GPU-equivalent seconds (scheduler/money/fairshare.py, half-life priority.fairshare_half_life);
EffectvUsage its fraction of all usage; FairShare the factor priority uses, 2^(-EffectvUsage/NormShares).
"""
import time

from labq.scheduler.money import fairshare

from . import statview
from .out import echo, echo_json

HEADERS = ("Account", "RawShares", "NormShares", "RawUsage", "EffectvUsage", "FairShare")


def rows(usage: dict[str, float], shares: dict[str, float]) -> list[dict]:
    names = sorted(set(usage) | set(shares))
    total_share = sum(shares.get(a, 1.0) for a in names) or 1.0
    total_use = sum(usage.values())
    factor = fairshare.factors(usage, shares)
    return [{"account": a, "raw_shares": shares.get(a, 1.0), "norm_shares": shares.get(a, 1.0) / total_share,
             "raw_usage": usage.get(a, 0.0), "effective_usage": usage.get(a, 0.0) / total_use if total_use else 0.0,
             "fairshare": factor[a]} for a in names]


def run(ctx, account, noheader, parsable2, as_json) -> None:
    """`labq share` (spec.SHARE's options), through the thin client: redis-py's import alone cost
    ~8x `labq sub` (issue 39 item 4)."""
    # The shares and half-life from the client settings cache (ctx.books), not the whole config (~20 ms)
    books, c = ctx.books, ctx.thin
    # the running jobs as views (store/jobview.py): the job model would cost ~14 ms more
    usage = c.fairshare(time.time(), c.read.on_node(), books["fairshare_half_life"])
    wanted = {a.strip() for a in account.split(",")} if account else None
    ds = [d for d in rows(dict(usage), books["shares"])
          if not wanted or d["account"] in wanted]
    if as_json:
        return echo_json(ds)
    table = [(d["account"], f"{d['raw_shares']:g}", f"{d['norm_shares']:.6f}", f"{d['raw_usage']:.0f}",
              f"{d['effective_usage']:.6f}", f"{d['fairshare']:.6f}") for d in ds]
    if parsable2:
        lines = ([] if noheader else ["|".join(HEADERS)]) + ["|".join(r) for r in table]
    else:
        lines = statview.table(table, HEADERS).splitlines()[noheader:]
    if lines:
        echo("\n".join(lines))
