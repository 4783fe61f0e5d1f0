"""The end of an attempt (runner.Run holds an Ending over the attempt's RunState, attemptstate.py):
reap the tree, measure it, classify the outcome (exit, timeout, stopped, OOM on evidence; or not
started, fenced), write labq's line into the job's log, post `started` (late, after a Redis blip)
and `finished`. Every end-of-job reason the runner gives is named here."""
import contextlib
import logging
import math
import os
import resource
import signal
import time

from labq.scheduler.store import faults
from labq.scheduler.units import fmt_size

from . import exitwatch, jobmsg, launch, memwatch, proctree, results
from .attemptstate import RunState

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
    """The end of an attempt, once the job's leader has exited or its stop is decided, over the
    RunState the watch (runner.Run) holds too."""

    def __init__(self, st: RunState):
        self.st = st

    def finish(self, why: str) -> None:
        st = self.st
        pid = st.proc.pid
        # Orphans that died on their own, before we kill anything: their statuses are OOM evidence.
        early_kill = self._reap_early(pid)
        # Nothing of the job outlived its leader: the job ended as the leader exited, which the
        # agent timed (exitwatch) even if we were frozen then; else it ends as we kill the rest.
        alone = not proctree.live_descendants()
        # Whatever is left (background processes, TERM-ignoring children) dies with the attempt.
        # The leader is still an unreaped zombie here, so its pid, the pgid, cannot have been reused.
        if st.cg is not None:
            st.cg.kill()
        proctree.signal_tree(pid, signal.SIGKILL)
        _, status, _ = os.wait4(pid, 0)
        st.proc.returncode = status      # reaped by us; keep Popen from waiting on it again
        # Every process of the job was ours (born in its cgroup, subreaper): all reaped, its cgroup
        # is empty and needs no other kill.
        st.tree_gone = self._reap_all()
        seen = self._leader_exit()
        end = min(time.time(), seen if alone else math.inf)
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        code = -sig if sig else os.WEXITSTATUS(status)
        st.body.update(exit_code=code, signal=sig, end_time=end, usage=self._usage(end))
        if why == "error":
            return
        oom = self._oom(why, sig == signal.SIGKILL and why == "exited" or early_kill)
        if why == "exited" and st.ckpt_dir:
            self.tick_checkpoint()
        if oom:
            self.say(jobmsg.oom(st.job.display_id, limit=fmt_size(st.mem_limit) if st.mem_limit else ""))
        elif why in HARD:       # stopped without a grace, so no line was written when the stop began
            self.say(jobmsg.stopped(why, st.job.display_id, st.s.node, end))
        if oom:
            st.body.update(outcome="oom", message=oom)
        elif why == "exited" and code and code == st.job.checkpoint_exit_code:
            st.body.update(outcome="checkpoint_exit", message=f"checkpoint exit code {code}: requeued")
        elif why == "exited":
            st.body.update(outcome="completed" if code == 0 else "exit", message=_describe(code, sig))
        elif why in ("preempted", "shutdown") and code == 0 and not sig:
            # It finished its work inside the grace: done, never re-run. The preemption is on the
            # attempt's record (its usage), not its outcome.
            st.body["usage"].update(stopped_for="preempted" if why == "preempted" else "shutdown",
                                    stop_signal_at=st.stopped_at)
            st.body.update(outcome="completed", message="exit code 0 (inside its preemption grace)")
        elif why == "timeout":
            st.body.update(outcome="timeout", message=f"time limit of {st.job.time_limit}s reached")
        else:
            message = st.kill_now[1] if st.kill_now and st.kill_now[0] == why else end_message(why)
            st.body.update(outcome=OUTCOMES[why], message=message)

    def note_leader(self) -> None:
        st = self.st
        if st.slot is not None:
            try:
                st.leader_start = exitwatch.note(st.s.spool, st.slot.index, st.proc.pid)
            except OSError as e:
                log.warning("job %s: cannot name its leader on the spool: %s", st.job.id, e)

    def _leader_exit(self) -> float:
        """When the agent saw the leader exit (exitwatch): before our reap when we were frozen."""
        st = self.st
        if st.slot is None or st.leader_start is None:
            return math.inf
        at = exitwatch.exited_at(st.s.spool, st.slot.index, st.proc.pid, st.leader_start)
        exitwatch.forget(st.s.spool, st.slot.index)
        return max(at, st.start or at) if at is not None else math.inf

    def say(self, line: str | None) -> None:
        """labq's line about the job's end (worker/jobmsg.py), into the job's own log."""
        st = self.st
        if line and st.ident is not None:
            why = launch.append_line(st.job, st.ident, line, st.rank, st.s.node)
            if why:
                log.warning("job %s: cannot write to its log: %s", st.job.id, why)

    def _usage(self, end: float) -> dict:
        st = self.st
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        usage = {"cpu_s": round(ru.ru_utime + ru.ru_stime - st.ru0.ru_utime - st.ru0.ru_stime, 3),
                 # Sampled, not ru_maxrss: that counts the forked runner's image before exec.
                 "max_rss_bytes": st.peak_rss,
                 "wall_s": round(end - (st.start or end), 3)}
        if st.peak_pss is not None:
            usage["max_pss_bytes"] = st.peak_pss
        if st.mem_limit > 0:
            usage["mem_limit_bytes"] = st.mem_limit
        if st.cg is not None:
            usage.update(st.cg.usage())
        usage.update(st.gpu.usage())
        return usage

    def _oom(self, why: str, sigkilled_unsent: bool) -> str | None:
        """Why this attempt ran out of memory, on evidence only (labq.worker.memwatch), or None. A
        cancel or a preemption keeps its own outcome: the job was being stopped anyway."""
        st = self.st
        if why == "oom":
            return st.kill_now[1]
        if why not in ("exited", "timeout"):
            return None
        if st.cg is not None and "memory" in st.cg.controllers:
            killed = st.cg.memory_events().get("oom_kill", 0)
            if not killed:
                return None
            limit = f"its limit of {fmt_size(st.cg.mem_max)}" if st.cg.mem_max else "no limit: the host ran out"
            return f"out of memory: the kernel's OOM killer killed {killed} process(es) of the job ({limit})"
        return memwatch.host_oom(st.oom0, memwatch.host_oom_kills(), sigkilled_unsent, st.table.seen, st.kmsg0)

    def _reap_early(self, leader: int) -> bool:
        """Reap exited orphans (not the leader); True if one of them died of SIGKILL."""
        killed = False
        for pid in proctree.zombie_children(exclude=leader):
            with contextlib.suppress(ChildProcessError):
                got, status = os.waitpid(pid, os.WNOHANG)
                killed = killed or bool(got and os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL)
        return killed

    def tick_checkpoint(self) -> None:
        """Record the newest checkpoint written during this attempt (also after the exit: one
        written in the job's last second still counts)."""
        st = self.st
        ckpt = launch.newest_mtime(st.ckpt_dir)
        if ckpt and ckpt > (st.body.get("last_checkpoint") or 0) and ckpt >= (st.start or 0):
            st.body["last_checkpoint"] = ckpt

    def cleanup_after_error(self) -> None:
        st = self.st
        if st.proc is None:
            return
        try:
            if st.proc.returncode is None:
                self.finish("error")
            else:
                self._reap_all()
        except Exception:       # the original error is the one worth reporting
            log.exception("job %s: cleanup after a runner error failed", st.job.id)

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
                log.error("job %s: children %s would not die", self.st.job.id, proctree.live_descendants())
                return False
            proctree.signal_tree(None, signal.SIGKILL)    # something forked after the last sweep
            time.sleep(0.02)

    def not_startable(self) -> bool:
        """Fencing before the spawn: the lease may have lapsed by now (as far as the runner can
        tell) or the agent is gone. Then nothing starts, and the attempt is a node failure: the
        scheduler requeues it (as `error` it ended the job F without its having run)."""
        st = self.st
        orphaned = st.term.orphaned or os.getppid() != st.ppid
        why = "orphaned_start" if orphaned else "fenced_start" if time.monotonic() >= st.lease_until else ""
        if why:
            log.warning("job %s attempt %d not started: %s", st.job.id, st.n, end_message(why))
            st.body.update(outcome="node_failure", message=end_message(why))
        return bool(why)

    def announce(self) -> None:
        """Post `started` (the attempt's first heartbeat too). Redis unreachable just then (a
        restart, a blip) is no reason to stop a job that runs: the next tick posts it again, and
        the lease the claim saw still bounds how long the job may run without Redis."""
        st = self.st
        try:
            sent = time.monotonic()
            st.lease_seen(sent, st.store.started(st.job.id, st.n, st.s.node, st.proc.pid, st.start, st.rank))
            st.announced = True
        except faults.ERRORS as e:
            log.warning("job %s: cannot post started yet: %s", st.job.id, e)

    def post_finished(self) -> bool:
        """Until Redis has it: an outage of any length delays the record, never changes it (the
        result is also on the spool, results.py, should this runner be killed meanwhile). An
        EXECABORT (a command refused while Redis loads its data after a restart) is an outage too.
        False: not posted, left on the spool. A runner whose agent died waits for no Redis: the next
        agent's runner of this slot posts the kept result (an orphan retrying forever outlived its
        agent by hours: seen after a test's Redis was gone)."""
        st = self.st
        wait, first = POST_WAIT[0], True
        while True:
            if st.proc is not None and not st.announced:
                # `started` could not be posted (Redis was away): first, so that the attempt's
                # record has its start (a duplicate is a no-op for the scheduler).
                self.announce()
            try:
                if st.proc is None or st.announced:
                    st.store.post("finished", st.job.id, st.n, st.s.node, st.body, st.slot)
                    return True
            except faults.AWAY as e:
                if first:
                    self._sync_result()      # an outage may last: the kept copy must outlive a crash
                if st.kept and (st.term.orphaned or os.getppid() != st.ppid):
                    log.warning("job %s: its agent is gone and Redis away (%s): its result stays on the spool "
                                "for the next runner of this slot", st.job.id, e)
                    return False
                log.warning("job %s: posting finished failed (%s), retrying in %.1fs", st.job.id, e, wait)
            time.sleep(wait)
            wait, first = min(wait * 2, POST_WAIT[1]), False

    def keep_result(self) -> None:
        st = self.st
        if st.slot is not None:
            try:
                results.keep(st.s.spool, st.slot.index, st.slot.entry, st.rank, st.body)
                st.kept = True
            except OSError as e:
                log.warning("job %s: cannot keep its result on the spool: %s", st.job.id, e)

    def _sync_result(self) -> None:
        st = self.st
        if st.kept and st.slot is not None:
            try:
                results.sync(st.s.spool, st.slot.index)
            except OSError as e:
                log.warning("job %s: cannot sync its kept result: %s", st.job.id, e)

    def drop_result(self) -> None:
        st = self.st
        if st.slot is not None:
            results.drop(st.s.spool, st.slot.index)


def _describe(code: int, sig: int | None) -> str:
    if sig:
        return f"killed by {signal.Signals(sig).name}"
    return "exit code 0" if code == 0 else f"exit code {code}"
