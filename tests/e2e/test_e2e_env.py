"""A SLURM user's first day, end to end. A job's environment: the submitter's venv reaches the job
(sbatch's --export=ALL), --export=NONE and --export=VAR[=value] behave as SLURM documents, labq's and
SLURM's job variables are set, and the daemons' own environment never leaks into a job. An sbatch
script runs with its #SBATCH resources, limit and output file.

One stack for the module (real redis-server, scheduler and worker processes); the CLI runs as a
user would run it, with an environment of the test's choosing.
"""
import os
import re

from labq.scheduler.jobs import logpath, states
from tests.harness import E2E_MARKS, ROOT, SECRET, VENV_BIN, labq, user_env, wait_for

pytestmark = E2E_MARKS  # the same markers and skip as test_e2e


def run(e, *args, env) -> str:
    """Submit, wait for the end, return the job's output."""
    p = labq(e, "sub", "--parsable", "-A", "eta", "-o", "out-%j.txt", *args, env=env)
    assert p.returncode == 0, p.stderr
    jid = int(p.stdout.strip())
    j = e.wait_state(jid, states.TERMINAL, 90)
    with open(logpath.out_path(j)) as f:
        out = f.read()
    assert j.state == states.COMPLETED, (j.state, j.detail, out)
    return out


SHOW = 'echo "FOO=${FOO-unset} BAR=${BAR-unset} PATH=$PATH"'


def test_readme_example_runs_from_inside_a_venv(stack):
    out = run(stack, "--", "python", os.path.join(ROOT, "examples", "train.py"), "--seconds", "1", "--epochs", "2",
              env=user_env(stack))
    assert "loss" in out


def test_export_all_is_the_default(stack):
    out = run(stack, "--", "/bin/sh", "-c", SHOW, env=user_env(stack, FOO="outer", BAR="b"))
    assert out.startswith(f"FOO=outer BAR=b PATH={VENV_BIN}:")


def test_export_none_gives_a_clean_environment(stack):
    out = run(stack, "--export=NONE", "--", "/bin/sh", "-c", SHOW, env=user_env(stack, FOO="outer", BAR="b"))
    # the compat commands' folder (sbatch, srun… as labq speaks them) comes last: worker/shimbin.py
    assert re.fullmatch(r"FOO=unset BAR=unset PATH=/usr/local/bin:/usr/bin:/bin:/\S+/spool/bin", out.strip()), out


def test_export_list_gives_only_those_variables(stack):
    env = user_env(stack, FOO="outer", BAR="b")
    assert run(stack, "--export=FOO=1", "--", "/bin/sh", "-c", SHOW, env=env).startswith("FOO=1 BAR=unset PATH=/usr/")
    assert run(stack, "--export=BAR,FOO=1", "--", "/bin/sh", "-c", SHOW, env=env).startswith("FOO=1 BAR=b PATH=/usr/")
    assert run(stack, "--export=ALL,FOO=2", "--", "/bin/sh", "-c", SHOW, env=env).startswith(f"FOO=2 BAR=b PATH={VENV_BIN}")


def test_job_variables_and_no_daemon_secret(stack):
    # The submitter's own job variables (submitting from inside a job) must not leak into the new job.
    env = user_env(stack, SLURM_ARRAY_TASK_ID="99", LABQ_ARRAY_TASK_ID="99")
    out = run(stack, "-a", "3-3", "-c", "2", "-G", "1", "-J", "envjob", "--",
              "/bin/sh", "-c", "env | sort", env=env)
    vars_ = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    assert SECRET not in out
    assert vars_["SLURM_JOB_ID"] == vars_["LABQ_JOB_ID"]
    assert vars_["SLURM_ARRAY_TASK_ID"] == vars_["LABQ_ARRAY_TASK_ID"] == "3"
    assert vars_["SLURM_ARRAY_JOB_ID"] == vars_["LABQ_ARRAY_JOB_ID"]
    assert vars_["SLURM_JOB_NAME"] == "envjob" and vars_["SLURM_CPUS_PER_TASK"] == "2"
    assert vars_["SLURM_SUBMIT_DIR"] == stack.work and vars_["SLURM_JOB_NUM_NODES"] == "1"
    assert vars_["CUDA_VISIBLE_DEVICES"] == vars_["LABQ_JOB_GPUS"] and vars_["CUDA_VISIBLE_DEVICES"]
    assert "SLURM_NTASKS" not in vars_          # Lightning would take the job for an srun step


def test_an_environment_over_the_bound_is_refused_at_the_client(stack):
    p = labq(stack, "sub", "--", "true", env=user_env(stack, **{f"HUGE{i}": "x" * 100_000 for i in range(3)}))
    assert p.returncode == 2 and "--export=NONE" in p.stderr and "Traceback" not in p.stderr

SCRIPT = """#!/bin/bash
#SBATCH --job-name=sb-test
#SBATCH --gres=gpu:1
#SBATCH --time=00:01:00
#SBATCH --output=sb-%j.out
#SBATCH -c 2 --mem=1G
#SBATCH --partition=gpu          # labq has no partitions
#SBATCH --mail-type=END
#SBATCH --signal=B:USR1@30
echo "gpus=$CUDA_VISIBLE_DEVICES cpus=$SLURM_CPUS_PER_TASK name=$SLURM_JOB_NAME"
#SBATCH --gres=gpu:4            (after the first command: not a directive, as in sbatch)
"""


def test_an_sbatch_script_runs_with_its_directives(stack):
    path = os.path.join(stack.work, "job.sbatch")
    with open(path, "w") as f:
        f.write(SCRIPT)
    p = labq(stack, "sub", "--parsable", "-A", "eta", "job.sbatch", env=user_env(stack))
    assert p.returncode == 0, p.stderr
    warnings = [line for line in p.stderr.splitlines() if "warning" in line]
    assert warnings == ["labq: warning: #SBATCH directives ignored: --partition=gpu --mail-type=END"]
    jid = int(p.stdout)
    j = stack.wait_state(jid, states.TERMINAL, 90)
    assert j.state == states.COMPLETED, j.detail
    assert (j.gpus, j.cpus, j.mem, j.time_limit, j.name) == (1, 2, 1 << 30, 60, "sb-test")
    assert tuple(j.warn_signal) == ("USR1", 30, "batch")     # B: the batch shell only
    with open(os.path.join(stack.work, f"sb-{jid}.out")) as f:
        out = f.read()
    assert out.startswith("gpus=GPU-") and "cpus=2 name=sb-test" in out


def test_a_command_line_flag_beats_the_directive(stack):
    path = os.path.join(stack.work, "t.sbatch")
    with open(path, "w") as f:
        f.write("#!/bin/sh\n#SBATCH -t 5\n#SBATCH -J from-script\ntrue\n")
    p = labq(stack, "sub", "--parsable", "-A", "eta", "-t", "7", "t.sbatch", env=user_env(stack))
    assert p.returncode == 0 and not p.stderr, p.stderr
    j = stack.wait_state(int(p.stdout), states.TERMINAL, 90)
    assert (j.time_limit, j.name) == (7 * 60, "from-script")


def test_begin_as_slurm_writes_it(stack):
    import datetime as dt
    import time
    env = user_env(stack)
    ids = {}
    for text in ("16:00", "tomorrow", "now+30minutes"):
        p = labq(stack, "sub", "--parsable", "-A", "eta", "--begin", text, "--mem", "1Gi", "--", "true", env=env)
        assert p.returncode == 0, p.stderr
        ids[text] = int(p.stdout)
    jobs = {t: stack.job(i) for t, i in ids.items()}
    four = dt.datetime.fromtimestamp(jobs["16:00"].begin)
    assert (four.hour, four.minute) == (16, 0) and 0 < jobs["16:00"].begin - time.time() <= 86400
    midnight = dt.datetime.combine(dt.date.today() + dt.timedelta(days=1), dt.time())
    assert jobs["tomorrow"].begin == midnight.timestamp() and jobs["tomorrow"].mem == 1 << 30
    assert abs(jobs["now+30minutes"].begin - jobs["now+30minutes"].submit_time - 1800) < 60
    assert labq(stack, "del", *map(str, ids.values()), env=env).returncode == 0


def test_queue_views_as_squeue_and_sacct_show_them(stack):
    env = user_env(stack)

    def q(*args, code=0):
        p = labq(stack, *args, env=env)
        assert p.returncode == code, (args, p.stdout, p.stderr)
        return p.stdout.strip()

    arr = int(q("sub", "--parsable", "-A", "eta", "-a", "0-29", "-G", "1", "-t", "10m", "--", "sleep", "300"))
    wait_for(lambda: len(q("stat", "-t", "RUNNING", "-o", "%i", "--noheader").split()) == 4, 60,
             what="four tasks to run")
    assert q("stat", "-t", "pending", "-o", "%i %T %b", "--noheader") == f"{arr}_[4-29] PENDING gres/gpu:1"
    assert len(q("stat", "-r", "-t", "PD", "-o", "%i", "--noheader").splitlines()) == 26
    assert q("stat", "-j", f"{arr}_5", "-o", "%t|%.8i|%j", "--noheader") == "PD|" + f"{arr}_5".rjust(8) + "|sleep"
    assert "unknown state 'BOGUS'" in labq(stack, "stat", "-t", "BOGUS", env=env).stderr
    assert labq(stack, "stat", "-t", "BOGUS", env=env).returncode == 2
    shown = q("show", str(arr))
    assert "30 tasks" in shown and "RUNNING" in shown and f"{arr}_[4-29]" in shown
    prio = q("prio").splitlines()
    assert len(prio) == 3 and prio[2].startswith(f"{arr}_[4-29]")      # weights line, header, one row
    dep = int(q("sub", "--parsable", "-A", "eta", "-d", f"afterok:{arr}", "--", "true"))
    wait_for(lambda: stack.job(dep).reason == states.DEPENDENCY, 30, what="the dependent to be planned")
    assert f"afterok:{arr}_0 (R)" in stack.job(dep).detail
    out = q("del", str(arr), str(dep)).splitlines()
    assert len(out) <= 3 and f"{arr}_[4-29]" in "\n".join(out)

    failed = int(q("sub", "--parsable", "-A", "eta", "-J", "exit3", "--", "sh", "-c", "exit 3"))
    killed = int(q("sub", "--parsable", "-A", "eta", "--", "sh", "-c", "kill -TERM $$"))
    for jid in (failed, killed):
        stack.wait_state(jid, states.TERMINAL, 60)
    assert q("acct", "-j", f"{failed},{killed}", "--format=JobID,JobName,State,ExitCode", "-P", "--noheader") == \
        f"{failed}|exit3|FAILED|3:0\n{killed}|sh|FAILED|0:15"
    assert str(failed) in q("acct")                                   # today's jobs by default
    assert "exit code: 0:15" in q("show", str(killed)) and q("wait", str(failed), code=3).endswith("exit=3:0")
    assert q("acct", "-E", "2000-01-01", "-P", "-n") == ""
    assert "unknown field 'Bogus'" in labq(stack, "acct", "--format=JobID,Bogus", env=env).stderr
    share = q("share", "-P").splitlines()
    assert share[0] == "Account|RawShares|NormShares|RawUsage|EffectvUsage|FairShare"
    assert any(line.startswith("eta|1|") for line in share[1:])


def test_show_names_dependencies_as_the_user_wrote_them(stack):
    env = user_env(stack)

    def sub(*args):
        p = labq(stack, "sub", "--parsable", "-A", "eta", "--hold", *args, env=env)
        assert p.returncode == 0, p.stderr
        return p.stdout.strip()

    arr, one = sub("-a", "0-9", "--", "true"), sub("--", "true")
    dep = sub("-d", f"afterok:{arr}:{one},afterany:{arr}_3:{arr}_5:{arr}_6:{arr}_7", "--", "true")
    out = labq(stack, "show", dep, env=env).stdout
    assert f"dependency: afterok:{arr}:{one},afterany:{arr}_3:{arr}_[5-7]" in out, out
    labq(stack, "del", arr, one, dep, env=env)


def test_exported_variables_live_apart_from_the_job_record(stack):
    """Tokens in a submitter's environment are stored once per submission, in a key the client ACL
    role cannot read (acl.NOT_READ), not in the job record every client may read."""
    import json

    from labq.scheduler.store import acl, envs
    from labq.scheduler.store.keys import Keys
    out = run(stack, "-a", "0-1", "--", "/bin/sh", "-c", 'echo "token=$MY_TOKEN"', env=user_env(stack, MY_TOKEN="s3cret"))
    assert out.strip() == "token=s3cret"
    r, k = stack.client.read.r, Keys()
    first = max(int(i) for i in r.zrange(k.history, 0, -1))
    arr = stack.job(first).array_id
    assert all("s3cret" not in r.get(k.job(i)) for i in (arr, arr + 1))
    assert dict(json.loads(envs.text(r, k, arr)))["MY_TOKEN"] == "s3cret" and not r.exists(k.job_env(arr + 1))
    roles = acl.roles(k, ["n1"])
    # Nor may a node role read it: the scheduler hands it over to the node it dispatches to (keys.handover).
    assert all(key("*") not in " ".join(roles[acl.CLIENT]) + " ".join(roles[acl.node_role("n1")])
               for key in (k.job_env, k.env_text, k.env_refs))
    assert k.handover("n1", "*", "*") in " ".join(roles[acl.node_role("n1")])
