"""The soak (issue 14): a lab's contention on real processes, with kill -9 of the scheduler and the agent.

Two accounts with guarantees that borrow from each other, a third without one whose budget preempts
when it runs out (on_exhaust = "preempt"), three QoS classes, arrays and dependencies, jobs that
checkpoint and jobs that ignore SIGTERM, the scheduler and the agent kill -9'ed at random moments.
Every job stamps its own file (start, one line a second, end, with its attempt); at the end the report
says, from those stamps, the job records and `labq ledger verify`:

  lost        jobs accepted that never ended, or ended COMPLETED without their last attempt's end stamp
  double      attempts that ran twice, or overlapped the job's next attempt
  preempted   the most times one job was preempted (must be <= max_preemptions)
  guarantee   the longest time an account was short of its guarantee while there was room it could
              take (free GPUs nobody earmarked, other accounts' borrowed work), chaos windows left out
  charges     each budget's spent == the sum of its attempts' charges, and `labq ledger verify` is clean
  commitment  no attempt charged above what safe mode commits (rate x (time limit + kill_wait))

    python bench/soak.py --minutes 30 [--seed 1] [--json out.json]
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from labq.cli.embedded import Stack
from labq.cli.subcore import build_body
from labq.scheduler import config as config_mod, ledger, states
from labq.scheduler.client import Client

GRACE, KILL_WAIT, TICK, MAX_PREEMPTIONS = 3, 2, 0.5, 2
CONFIG = f"""
[scheduler]
tick = {TICK}
kill_wait = "{KILL_WAIT}s"
node_lease = "4s"
lease = "3s"
crash_guard_failures = 0
[qos.high]
priority = 200
grace = "{GRACE}s"
max_preemptions = {MAX_PREEMPTIONS}
[qos.normal]
priority = 100
grace = "{GRACE}s"
max_preemptions = {MAX_PREEMPTIONS}
[qos.low]
priority = 0
preemptible = true
grace = "{GRACE}s"
min_runtime = "0s"
max_preemptions = {MAX_PREEMPTIONS}
[rates]
gpu_hour = 36.0
[accounts.lab-a]
users = []
guarantee = 3
borrow_limit = 3
[accounts.lab-b]
users = []
guarantee = 3
borrow_limit = 3
[accounts.lab-c]
users = []
[[budgets]]
name = "lab-c"
account = "lab-c"
limit = {{budget}}
on_exhaust = "preempt"
[worker]
name = "soak-node"
gpus = 8
cpus = 16
mem = "32G"
slots = 16
spool = "{{spool}}"
run_as = "self"
"""
JOB = r"""#!/bin/sh
# soak job: $1 kind (plain | ckpt | stubborn), $2 seconds of work, $3 stamp directory
S="$3/$LABQ_JOB_ID"; A="$LABQ_RESTART_COUNT"
[ "$1" = stubborn ] && trap '' TERM
echo "start $A $(date +%s.%N)" >> "$S"
i=0
if [ "$1" = ckpt ] && [ -f "$LABQ_CHECKPOINT_DIR/step" ]; then i=$(cat "$LABQ_CHECKPOINT_DIR/step"); fi
while [ "$i" -lt "$2" ]; do
  sleep 1; i=$((i+1))
  [ "$1" = ckpt ] && echo "$i" > "$LABQ_CHECKPOINT_DIR/step"
  echo "alive $A $(date +%s.%N)" >> "$S"
done
echo "end $A $(date +%s.%N)" >> "$S"
"""
GUARANTEED = {"lab-a": 3, "lab-b": 3}
WAITING = {states.RESOURCES, states.PRIORITY, states.PREEMPTING_FOR, states.NONE}


class Soak:
    def __init__(self, seconds: float, seed: int, budget: float):
        self.rnd = random.Random(seed)
        self.seconds = seconds
        self.dir = tempfile.mkdtemp(prefix="labq-soak-", dir="/tmp")
        self.stamps = os.path.join(self.dir, "stamps")
        os.makedirs(self.stamps)
        os.makedirs(os.path.join(self.dir, "out"))
        self.script = os.path.join(self.dir, "job.sh")
        with open(self.script, "w") as f:
            f.write(JOB)
        os.chmod(self.script, 0o755)
        self.cfg_path = os.path.join(self.dir, "labq.toml")
        with open(self.cfg_path, "w") as f:
            f.write(CONFIG.format(budget=budget, spool=os.path.join(self.dir, "spool")))
        self.cfg = config_mod.load(self.cfg_path)
        self.log = open(os.path.join(self.dir, "daemons.log"), "w")
        self.stack = Stack(self.dir, self.cfg_path, log=self.log)
        self.ids: list[int] = []
        self.chaos: list[list[float]] = []       # [start, end] of each window the daemons were down
        self.kills = {"scheduler": 0, "worker": 0}
        self.short_max = 0.0
        self.short_since: dict[str, float] = {}
        self.done = threading.Event()

    # -- driving ------------------------------------------------------------------------------------
    def run(self) -> dict:
        self.stack.start_all()
        self.client = Client(self.cfg, url=self.stack.url)
        self._wait(lambda: [n for n in self.client.nodes() if n.state == "up"], 60)
        watcher = threading.Thread(target=self._watch, daemon=True)
        watcher.start()
        end = time.monotonic() + self.seconds
        next_chaos = time.monotonic() + self.rnd.uniform(10, min(40, self.seconds * 0.6))
        while time.monotonic() < end:
            if time.monotonic() >= next_chaos:
                self._chaos()
                next_chaos = time.monotonic() + self.rnd.uniform(20, 60)
            self._submit()
            time.sleep(self.rnd.uniform(0.5, 2.0))
        drained = self._drain()
        self.done.set()
        watcher.join(5)
        return self.report(drained)

    def _submit(self) -> None:
        active = self.client.read.active()
        if sum(1 for j in active if j.state == states.PENDING) > 30:
            return
        r = self.rnd
        acct = r.choices(["lab-a", "lab-b", "lab-c"], [4, 4, 2])[0]
        kind = r.choices(["plain", "ckpt", "stubborn"], [5, 3, 2])[0]
        opts = {"account": acct, "chdir": self.dir, "time_": "1m", "qos": r.choice(["low", "normal", "high"]),
                "gpus": str(r.choice([1, 1, 1, 2])), "output": os.path.join(self.dir, "out", "%j.out")}
        if r.random() < 0.1:
            opts["array"] = "1-3"
        elif r.random() < 0.15 and self.ids:
            opts["dependency"] = f"afterok:{r.choice(self.ids[-10:])}"
        body = build_body(opts, [self.script, kind, str(r.randint(3, 20)), self.stamps], None)
        try:
            got = self.client.submit(body, timeout=60)
        except Exception as e:      # refused (a budget that cannot pay), or the scheduler is down
            print(f"submit: {e}", file=sys.stderr)
            return
        self.ids.extend(range(got["job_id"], got["job_id"] + got.get("count", 1)))

    def _chaos(self) -> None:
        which = self.rnd.choice(["scheduler", "worker"])
        start = time.time()
        p = self.stack.procs[which]
        p.kill()
        p.wait(30)
        self.kills[which] += 1
        time.sleep(self.rnd.uniform(0.2, 2.0))
        if which == "scheduler":
            self.stack.start("scheduler", "scheduler")
            k = self.client.k
            self._wait(lambda: self.client.r.get(k.leader), 60)
        else:
            self.stack.start("worker", "worker", *self.stack.worker_args)
            self._wait(lambda: [n for n in self.client.nodes() if n.state == "up"], 60)
        # the jobs on a dead node end NF when its lease runs out, and are requeued: leave that out too
        self.chaos.append([start, time.time() + self.cfg.node_lease + GRACE + KILL_WAIT + 2])
        print(f"chaos: kill -9 {which} at +{start - self.t0:.0f}s", file=sys.stderr)

    def _drain(self) -> bool:
        end = time.monotonic() + 300
        while time.monotonic() < end:
            active = self.client.read.active()
            # what can never run now: lab-c's budget ran out, or a dependency failed
            parked = [j for j in active if j.state == states.PENDING
                      and j.reason in (states.BUDGET_EXHAUSTED, states.BUDGET_RESERVED, states.DEPENDENCY_NEVER)]
            if parked:
                self.client.cancel([str(j.id) for j in parked])
            if not active:
                return True
            time.sleep(1)
        return False

    def _wait(self, pred, timeout):
        end = time.monotonic() + timeout
        while not pred():
            if time.monotonic() > end:
                raise RuntimeError(f"timed out; see {self.log.name}")
            time.sleep(0.1)

    # -- the guarantee, watched ------------------------------------------------------------------------
    def _watch(self) -> None:
        while not self.done.is_set():
            try:
                self._sample(time.time())
            except Exception as e:       # Redis is never killed; a read racing a write is retried
                print(f"watch: {e}", file=sys.stderr)
            time.sleep(0.25)

    def _sample(self, now: float) -> None:
        if any(a <= now <= b for a, b in self.chaos) or self.stack.dead():
            self.short_since.clear()
            return
        jobs = self.client.read.active()
        on = [j for j in jobs if j.state in states.ON_NODE]
        kept = {u for j in jobs if j.state == states.PENDING for u in j.earmark_gpus}
        used = {u for j in on for u in j.gpu_uuids}
        unclaimed = 8 - len(used | kept)
        for acct, owed in GUARANTEED.items():
            held = sum(j.gpus for j in on if j.account == acct)
            room = unclaimed + sum(j.gpus for j in on if j.state == states.RUNNING and j.borrowed
                                   and j.account != acct and j.preempt_count < MAX_PREEMPTIONS)
            wants = [j for j in jobs if j.account == acct and j.state == states.PENDING and j.reason in WAITING
                     and j.gpus <= min(owed - held, room) and not j.held and not j.deps]
            last = self.short_since.get(("held", acct))
            self.short_since[("held", acct)] = held
            if not wants or (last is not None and held > last):
                self.short_since.pop(acct, None)
                continue
            since = self.short_since.setdefault(acct, now)
            self.short_max = max(self.short_max, now - since)

    # -- the report ---------------------------------------------------------------------------------
    def report(self, drained: bool) -> dict:
        jobs = {j.id: j for j in self.client.read.jobs(self.ids) if j is not None}
        stamps = {i: _stamps(os.path.join(self.stamps, str(i))) for i in self.ids}
        lost = [i for i in self.ids if i not in jobs or jobs[i].state not in states.TERMINAL]
        double = []
        for i, lines in stamps.items():
            starts = [a for kind, a, _ in lines if kind == "start"]
            if len(starts) != len(set(starts)):
                double.append(i)
                continue
            begun = {a: t for kind, a, t in lines if kind == "start"}
            if any(b > a and t > begun[b] for kind, a, t in lines for b in begun):
                double.append(i)       # an attempt still stamped after a later one started
        for i, j in jobs.items():
            if j.state == states.COMPLETED:
                last = j.restart_count
                if not any(kind == "end" and a == last for kind, a, _ in stamps.get(i, [])):
                    lost.append(i)
        spent = self.client.read.spent()
        charged: dict[str, int] = {}
        over = []
        model = "fake"
        for j in jobs.values():
            for a in j.attempts:
                for name, amount in a.charges:
                    charged[name] = charged.get(name, 0) + amount
                    b = next(b for b in self.cfg.budgets if b.name == name)
                    if amount > ledger.forecast(j, b.unit, model, self.cfg):
                        over.append((j.id, a.attempt, amount))
        verify = subprocess.run(self.stack.command("ledger", "verify"), env=self.stack.env(), capture_output=True,
                                text=True, timeout=120)
        preempted = [sum(1 for a in j.attempts if a.outcome == "preempted") for j in jobs.values()]
        outcomes: dict[str, int] = {}
        for j in jobs.values():
            for a in j.attempts:
                outcomes[a.outcome or "?"] = outcomes.get(a.outcome or "?", 0) + 1
        return {
            "seconds": round(self.seconds), "jobs": len(self.ids), "drained": drained,
            "attempts": sum(len(j.attempts) for j in jobs.values()), "outcomes": outcomes,
            "kills": self.kills, "lost": sorted(set(lost)), "double_runs": sorted(double),
            "max_preemptions_per_job": max(preempted, default=0),
            "max_preempt_count": max((j.preempt_count for j in jobs.values()), default=0),
            "max_preemptions": MAX_PREEMPTIONS,
            "guarantee_short_max_s": round(self.short_max, 2),
            "guarantee_bound_s": GRACE + KILL_WAIT + TICK,
            "spent": {k: int(v) for k, v in spent.items()}, "charged": charged,
            "charges_equal_attempts": {k: int(v) for k, v in spent.items()} == charged,
            "ledger_verify": {"rc": verify.returncode, "out": (verify.stdout + verify.stderr).strip()[-400:]},
            "above_commitment": over,
        }

    def close(self) -> None:
        self.stack.stop_all(timeout=20)
        self.log.close()


def _stamps(path: str):
    try:
        with open(path) as f:
            rows = [line.split() for line in f]
    except FileNotFoundError:
        return []
    return [(r[0], int(r[1]), float(r[2])) for r in rows if len(r) == 3]


def soak(seconds: float, seed: int = 1, budget: float = 3.0, keep: bool = False) -> dict:
    s = Soak(seconds, seed, budget)
    s.t0 = time.time()
    try:
        return s.run()
    finally:
        s.close()
        if not keep:
            shutil.rmtree(s.dir, ignore_errors=True)
        else:
            print(f"kept {s.dir}", file=sys.stderr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--budget", type=float, default=3.0, help="lab-c's budget, $ (on_exhaust = preempt)")
    ap.add_argument("--json", help="write the report here too")
    ap.add_argument("--keep", action="store_true", help="keep the stamps and daemons.log")
    a = ap.parse_args()
    out = soak(a.minutes * 60, a.seed, a.budget, a.keep)
    text = json.dumps(out, indent=1)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text)
    ok = (not out["lost"] and not out["double_runs"] and out["max_preemptions_per_job"] <= MAX_PREEMPTIONS
          and out["charges_equal_attempts"] and out["ledger_verify"]["rc"] == 0 and not out["above_commitment"])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
