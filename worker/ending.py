"""The end of an attempt (a mixin of runner.Run): reap the tree, measure it, classify the outcome
(exit, timeout, stopped, OOM on evidence; or not started, fenced), write labq's line into the job's
log, post `started` (late, after a Redis blip) and `finished`. Every end-of-job reason the runner
gives is named here."""
import contextlib
import logging
import math
import os
import resource
import signal
import time

from labq.scheduler.store import faults
from labq.scheduler.units import fmt_size

from . import exitwatch, jobmsg, launch, memwatch, proctree, results, waiting

log = logging.getLogger("labq.runner")

REAP_LIMIT = 60.0      # a process stuck in D state must not keep the event from being posted
POST_WAIT = (0.2, 1.0)  # first and longest wait between `finished` posts: within the scheduler's fence margin

# Why an attempt was stopped -> its outcome, and the message the job's record shows. Every
# end-of-job reason the runner gives is here (and in end_message), nowhere else.
OUTCOMES = {"timeout": "timeout", "cancelled": "cancelled", "preempted": "preempted", "shutdown": "preempted",
             "orphaned": "node_failure", "fenced": "node_failure", "runner_killed": "node_failure",
             "fenced_start": "node_failure", "orphaned_start": "node_failure", "redis_lost": "node_failure",
             "gpu_lost": "node_failure", "oom": "oom", "gang_stop": "cancelled"}
MESSAGES = {"cancelled": "cancelled", "preempted": "preempted",
             "shutdown": "preempted: the node agent is stopping (checkpoint signal, grace, requeued)",
             "orphaned": "the node agent went away; the job was killed (fencing)",
             "fenced": "the node's lease was about to lapse (agent stopped or cut off from Redis); "
                       "the job was killed so that it cannot run twice (fencing)",
             "runner_killed": "the job's runner was killed ({}); the job was killed with it (fencing)",
             "fenced_start": "not started: the node's lease may have lapsed before the job could start "
                             "(agent stopped or cut off from Redis); requeued (fencing)",
             "orphaned_start": "not started: the node agent went away before the job could start; requeued (fencing)",
             "redis_lost": "the node lost Redis ({}); the job was stopped and requeued",
             "gang_stop": "another node's part of the job ended; this part was killed (shared fate)"}
# Stop reasons that kill at once, without the grace: the agent is gone, the limit is already exceeded,
# the gang's attempt has ended (its room is free again: a part left running would overlap the next job).
HARD = ("orphaned", "fenced", "oom", "gang_stop")


def end_message(why: str, detail: str = "") -> str:
    """The message of an attempt stopped for `why` (a key of MESSAGES)."""
    return MESSAGES[why].format(detail)


class Ending:
    """What Run does once the job's leader has exited or its stop is decided."""

    waiting_beat = 0.0      # when a part waiting for node rank 0 heart-beats next

    def _finish(self, why: str) -> None:
        pid = self.proc.pid
        # Orphans that died on their own, before we kill anything: their statuses are OOM evidence.
        early_kill = self._reap_early(pid)
        # Nothing of the job outlived its leader: the job ended as the leader exited, which the
        # agent timed (exitwatch) even if we were frozen then; else it ends as we kill the rest.
        alone = not proctree.live_descendants()
        # Whatever is left (background processes, TERM-ignoring children) dies with the attempt.
        # The leader is still an unreaped zombie here, so its pid, the pgid, cannot have been reused.
        if self.cg is not None:
            self.cg.kill()
        proctree.signal_tree(pid, signal.SIGKILL)
        _, status, _ = os.wait4(pid, 0)
        self.proc.returncode = status      # reaped by us; keep Popen from waiting on it again
        # Every process of the job was ours (born in its cgroup, subreaper): all reaped, its cgroup
        # is empty and needs no other kill.
        self.tree_gone = self._reap_all()
        seen = self._leader_exit()
        end = min(time.time(), seen if alone else math.inf)
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        code = -sig if sig else os.WEXITSTATUS(status)
        self.body.update(exit_code=code, signal=sig, end_time=end, usage=self._usage(end))
        if why == "error":
            return
        oom = self._oom(why, sig == signal.SIGKILL and why == "exited" or early_kill)
        if why == "exited" and self.ckpt_dir:
            self._tick_checkpoint()
        if oom:
            self._say(jobmsg.oom(self.job.display_id, limit=fmt_size(self.mem_limit) if self.mem_limit else ""))
        elif why in HARD:       # stopped without a grace, so no line was written when the stop began
            self._say(jobmsg.stopped(why, self.job.display_id, self.s.node, end))
        if oom:
            self.body.update(outcome="oom", message=oom)
        elif why == "exited" and code and code == self.job.checkpoint_exit_code:
            self.body.update(outcome="checkpoint_exit", message=f"checkpoint exit code {code}: requeued")
        elif why == "exited":
            self.body.update(outcome="completed" if code == 0 else "exit", message=_describe(code, sig))
        elif why in ("preempted", "shutdown") and code == 0 and not sig:
            # It finished its work inside the grace: done, never re-run. The preemption is on the
            # attempt's record (its usage), not its outcome.
            self.body["usage"].update(stopped_for="preempted" if why == "preempted" else "shutdown",
                                      stop_signal_at=self.stopped_at)
            self.body.update(outcome="completed", message="exit code 0 (inside its preemption grace)")
        elif why == "timeout":
            self.body.update(outcome="timeout", message=f"time limit of {self.job.time_limit}s reached")
        else:
            message = self.kill_now[1] if self.kill_now and self.kill_now[0] == why else end_message(why)
            self.body.update(outcome=OUTCOMES[why], message=message)

    leader_start: int | None = None     # the leader's start ticks, as named to the agent (exitwatch)

    def _note_leader(self) -> None:
        if self.slot is not None:
            try:
                self.leader_start = exitwatch.note(self.s.spool, self.slot.index, self.proc.pid)
            except OSError as e:
                log.warning("job %s: cannot name its leader on the spool: %s", self.job.id, e)

    def _leader_exit(self) -> float:
        """When the agent saw the leader exit (exitwatch): before our reap when we were frozen."""
        if self.slot is None or self.leader_start is None:
            return math.inf
        at = exitwatch.exited_at(self.s.spool, self.slot.index, self.proc.pid, self.leader_start)
        exitwatch.forget(self.s.spool, self.slot.index)
        return max(at, self.start or at) if at is not None else math.inf

    def _say(self, line: str | None) -> None:
        """labq's line about the job's end (worker/jobmsg.py), into the job's own log."""
        if line and self.ident is not None:
            why = launch.append_line(self.job, self.ident, line, self.rank, self.s.node)
            if why:
                log.warning("job %s: cannot write to its log: %s", self.job.id, why)

    def _usage(self, end: float) -> dict:
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        usage = {"cpu_s": round(ru.ru_utime + ru.ru_stime - self.ru0.ru_utime - self.ru0.ru_stime, 3),
                 # Sampled, not ru_maxrss: that counts the forked runner's image before exec.
                 "max_rss_bytes": self.peak_rss,
                 "wall_s": round(end - (self.start or end), 3)}
        if self.peak_pss is not None:
            usage["max_pss_bytes"] = self.peak_pss
        if self.mem_limit > 0:
            usage["mem_limit_bytes"] = self.mem_limit
        if self.cg is not None:
            usage.update(self.cg.usage())
        usage.update(self.gpu.usage())
        return usage

    def _oom(self, why: str, sigkilled_unsent: bool) -> str | None:
        """Why this attempt ran out of memory, on evidence only (labq.worker.memwatch), or None. A
        cancel or a preemption keeps its own outcome: the job was being stopped anyway."""
        if why == "oom":
            return self.kill_now[1]
        if why not in ("exited", "timeout"):
            return None
        if self.cg is not None and "memory" in self.cg.controllers:
            killed = self.cg.memory_events().get("oom_kill", 0)
            if not killed:
                return None
            limit = f"its limit of {fmt_size(self.cg.mem_max)}" if self.cg.mem_max else "no limit: the host ran out"
            return f"out of memory: the kernel's OOM killer killed {killed} process(es) of the job ({limit})"
        return memwatch.host_oom(self.oom0, memwatch.host_oom_kills(), sigkilled_unsent, self.table.seen, self.kmsg0)

    def _reap_early(self, leader: int) -> bool:
        """Reap exited orphans (not the leader); True if one of them died of SIGKILL."""
        killed = False
        for pid in proctree.zombie_children(exclude=leader):
            with contextlib.suppress(ChildProcessError):
                got, status = os.waitpid(pid, os.WNOHANG)
                killed = killed or bool(got and os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL)
        return killed

    def _tick_checkpoint(self) -> None:
        """Record the newest checkpoint written during this attempt (also after the exit: one
        written in the job's last second still counts)."""
        ckpt = launch.newest_mtime(self.ckpt_dir)
        if ckpt and ckpt > (self.body.get("last_checkpoint") or 0) and ckpt >= (self.start or 0):
            self.body["last_checkpoint"] = ckpt

    def _cleanup_after_error(self) -> None:
        if self.proc is None:
            return
        try:
            if self.proc.returncode is None:
                self._finish("error")
            else:
                self._reap_all()
        except Exception:       # the original error is the one worth reporting
            log.exception("job %s: cleanup after a runner error failed", self.job.id)

    def _reap_all(self) -> bool:
        """waitpid(-1) until no child is left: as subreaper we inherited the tree's orphans. False
        if some would not die within REAP_LIMIT."""
        give_up = time.monotonic() + REAP_LIMIT
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return True
            if pid:
                continue
            if time.monotonic() > give_up:
                log.error("job %s: children %s would not die", self.job.id, proctree.live_descendants())
                return False
            proctree.signal_tree(None, signal.SIGKILL)    # something forked after the last sweep
            time.sleep(0.02)

    def _not_startable(self) -> bool:
        """Fencing before the spawn: the lease may have lapsed by now (as far as the runner can
        tell) or the agent is gone. Then nothing starts, and the attempt is a node failure: the
        scheduler requeues it (as `error` it ended the job F without its having run)."""
        orphaned = self.term.orphaned or os.getppid() != self.ppid
        why = "orphaned_start" if orphaned else "fenced_start" if time.monotonic() >= self.lease_until else ""
        if why:
            log.warning("job %s attempt %d not started: %s", self.job.id, self.n, end_message(why))
            self.body.update(outcome="node_failure", message=end_message(why))
        return bool(why)

    def _rendezvous_stopped(self) -> str | None:
        """Why a part waiting for node rank 0 gives up, its outcome set: stopped (the stop's), or
        its node's lease or agent gone (nothing ran: a node failure, requeued). It heart-beats
        while it waits, as a running part does: its lease stays current and the scheduler and
        agent see it alive. (It read the lease once, with its claim, and gave up when that ran
        out, ending the gang `error`: the job F, though nothing had run.)"""
        now = time.monotonic()
        if now >= self.waiting_beat:
            self.waiting_beat = now + min(1.0, self.s.lease / 3)
            try:
                self.lease_seen(now, self.store.heartbeat(self.job.id, self.n, self.s.node, rank=self.rank))
            except faults.ERRORS as e:       # the lease it saw last still bounds the wait
                log.warning("job %s: heartbeat failed: %s", self.job.id, e)
        ctl = self._control()
        if waiting.stops_part(ctl, self.n) or waiting.control_verb(ctl) in ("cancel", "preempt"):
            self.body["outcome"] = "preempted" if waiting.control_verb(ctl) == "preempt" else "cancelled"
            return f"stopped ({ctl})"
        if self.term.got or self.term.orphaned or time.monotonic() >= self.lease_until:
            self.body["outcome"] = "preempted" if self.term.got and not self.term.orphaned else "node_failure"
            return "the node agent is stopping or its lease lapsed"
        return None

    def _announce(self) -> None:
        """Post `started` (the attempt's first heartbeat too). Redis unreachable just then (a
        restart, a blip) is no reason to stop a job that runs: the next tick posts it again, and
        the lease the claim saw still bounds how long the job may run without Redis."""
        try:
            sent = time.monotonic()
            self.lease_seen(sent, self.store.started(self.job.id, self.n, self.s.node, self.proc.pid, self.start,
                                                     self.rank))
            self.announced = True
        except faults.ERRORS as e:
            log.warning("job %s: cannot post started yet: %s", self.job.id, e)

    def _post_finished(self) -> bool:
        """Until Redis has it: an outage of any length delays the record, never changes it (the
        result is also on the spool, results.py, should this runner be killed meanwhile). An
        EXECABORT (a command refused while Redis loads its data after a restart) is an outage too.
        False: not posted, left on the spool. A runner whose agent died waits for no Redis: the next
        agent's runner of this slot posts the kept result (an orphan retrying forever outlived its
        agent by hours: seen after a test's Redis was gone)."""
        wait = POST_WAIT[0]
        while True:
            if self.proc is not None and not self.announced:
                # `started` could not be posted (Redis was away): first, so that the attempt's
                # record has its start (a duplicate is a no-op for the scheduler).
                self._announce()
            try:
                if self.proc is None or self.announced:
                    self.store.post("finished", self.job.id, self.n, self.s.node, self.body, self.slot)
                    return True
            except faults.AWAY as e:
                if self.kept and (self.term.orphaned or os.getppid() != self.ppid):
                    log.warning("job %s: its agent is gone and Redis away (%s): its result stays on the spool "
                                "for the next runner of this slot", self.job.id, e)
                    return False
                log.warning("job %s: posting finished failed (%s), retrying in %.1fs", self.job.id, e, wait)
            time.sleep(wait)
            wait = min(wait * 2, POST_WAIT[1])

    kept = False            # the result is on the spool (results.keep)

    def _keep_result(self) -> None:
        if self.slot is not None:
            try:
                results.keep(self.s.spool, self.slot.index, self.slot.entry, self.rank, self.body)
                self.kept = True
            except OSError as e:
                log.warning("job %s: cannot keep its result on the spool: %s", self.job.id, e)

    def _drop_result(self) -> None:
        if self.slot is not None:
            results.drop(self.s.spool, self.slot.index)


def _describe(code: int, sig: int | None) -> str:
    if sig:
        return f"killed by {signal.Signals(sig).name}"
    return "exit code 0" if code == 0 else f"exit code {code}"
