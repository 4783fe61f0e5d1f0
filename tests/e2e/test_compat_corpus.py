"""Scripts written as labs write them for SLURM (tests/slurm_corpus/), run unchanged by a real
unprivileged user with the compat commands on PATH (as `make install-slurm-compat` puts them): the
user types `sbatch script.sh`, the job's own `srun`, `sbatch`, `squeue`, `scancel`, `sacct` and
`module` are the worker's (worker/shimbin.py), and each script ends as its `# expect:` lines say.

One cluster for the whole corpus: a redis-server every local user may reach, the real `labq
scheduler` and `labq worker` (root, jobs run as their submitter), every script submitted at once,
then each checked. A script's expectations are comment lines in it:
  # expect: STATE                 the job's (every array task's) end state
  # expect-out: TEXT              a line of its log contains TEXT (every task's, for arrays)
  # expect-log: PATTERN           the log's name (%j, %x, %A, %a), else SLURM's slurm-%j.out
  # expect-tasks: N               an array of N tasks
  # expect-children: S S …        the jobs it submitted (same workdir), in id order, end in these states
  # expect-needs: WHAT            known to need a fix outside the compat layer: xfail until it lands
"""
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
import uuid

import pytest

from labq.cli.embedded import Stack
from labq.scheduler.client import Client
from labq.scheduler.settings import config
from labq.worker import shimbin
from tests.harness import E2E_MARKS, ROOT, start_redis, wait_for

pytestmark = [*E2E_MARKS, pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("useradd"),
                                             reason="creating a user and running jobs as them need root")]
CORPORA = {fam: os.path.join(ROOT, "tests", f"{fam}_corpus") for fam in ("slurm", "pbs", "sge")}
SUBMIT = {"slurm": "sbatch", "pbs": "qsub", "sge": "qsub"}
ENDED = {"CD", "F", "CA", "TO", "OOM", "NF", "EX", "DL", "RJ"}
CONFIG = """
[scheduler]
tick = 0.2
kill_wait = "2s"
node_lease = "10s"
[redis]
url = "{url}"
[accounts.lab]
users = ["{user}"]
[worker]
name = "corpus-node"
gpus = 4
cpus = 16
mem = "64G"
slots = 8
spool = "{dir}/spool"
run_as = "submitter"
"""
# The lab's conda install, as far as `source …/conda.sh; conda activate ENV` needs one (conda itself
# is not on this machine): activate a venv under envs/ as conda would, CONDA_DEFAULT_ENV included.
CONDA_SH = """conda() {
    case "$1" in
        activate) source "$HOME/miniconda3/envs/$2/bin/activate" && export CONDA_DEFAULT_ENV="$2" ;;
        deactivate) deactivate; unset CONDA_DEFAULT_ENV ;;
        *) echo "conda $1: not in this install" >&2; return 1 ;;
    esac
}
"""


def scripts() -> list[tuple[str, str]]:
    return [(fam, os.path.join(d, f)) for fam, d in CORPORA.items() for f in sorted(os.listdir(d))
            if not f.startswith((".", "README"))]


def expectations(path: str) -> dict:
    out: dict = {"out": [], "err": [], "children": None, "tasks": None, "log": None, "err-log": None, "needs": None,
                 "state": None, "setup": None}
    for line in open(path):
        m = re.match(r"#\s*expect(-[a-z-]+)?:\s?(.*?)\n?$", line)
        if not m:
            continue
        key, value = (m.group(1) or "-state")[1:], m.group(2)
        if key in ("out", "err"):
            out[key].append(value)
        elif key == "children":
            out["children"] = value.split()
        elif key == "tasks":
            out["tasks"] = int(value)
        else:
            out[key] = value
    return out


class Lab:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="labq-corpus-", dir="/tmp")
        os.chmod(self.dir, 0o755)
        name = f"lqc{uuid.uuid4().hex[:8]}"
        home = os.path.join(self.dir, "home", name)
        os.makedirs(os.path.dirname(home))
        subprocess.run(["useradd", "--create-home", "--home-dir", home, "--shell", "/bin/bash", "--user-group", name],
                       check=True)
        self.pw = pwd.getpwnam(name)
        self.redis = start_redis(perm="777")
        self.cfg_path = os.path.join(self.dir, "labq.toml")
        with open(self.cfg_path, "w") as f:
            f.write(CONFIG.format(url=self.redis.url, user=name, dir=self.dir))
        os.chmod(self.cfg_path, 0o644)
        self.log = open(os.path.join(self.dir, "daemons.log"), "w")
        self.stack = Stack(self.dir, self.cfg_path, redis_url=self.redis.url, log=self.log)
        self.stack.start_all()
        self.client = Client(config.load(self.cfg_path), url=self.redis.url)
        wait_for(lambda: [n for n in self.client.nodes() if n.state == "up"], 120, 0.1,
                 what=f"the worker to register (see {self.log.name})")
        self.bin = os.path.join(self.dir, "bin")       # what `make install-slurm-compat` writes
        shimbin.write(self.bin, ("slurm", "pbs", "sge", "modules"), path="")
        self.env = {"PATH": f"{self.bin}:/usr/local/bin:/usr/bin:/bin", "HOME": home, "USER": name, "LOGNAME": name,
                    "SHELL": "/bin/bash", "LANG": "C.UTF-8", "LABQ_CONFIG": self.cfg_path, "LAB_DATA": "/srv/lab/data"}
        self.as_user(["/usr/bin/python3", "-m", "venv", "--without-pip", f"{home}/envs/lab"], cwd=home)
        self.as_user(["/usr/bin/python3", "-m", "venv", "--without-pip", f"{home}/miniconda3/envs/lab"], cwd=home)
        os.makedirs(f"{home}/miniconda3/etc/profile.d", exist_ok=True)
        with open(f"{home}/miniconda3/etc/profile.d/conda.sh", "w") as f:
            f.write(CONDA_SH)

    def as_user(self, argv, cwd, check=True):
        p = subprocess.run(argv, user=self.pw.pw_uid, group=self.pw.pw_gid, extra_groups=[], env=self.env, cwd=cwd,
                           capture_output=True, text=True, timeout=120)
        assert not check or p.returncode == 0, (argv, p.stdout, p.stderr)
        return p

    def submit(self, family: str, path: str) -> tuple[str, int, subprocess.CompletedProcess]:
        work = os.path.join(self.pw.pw_dir, "corpus", family, os.path.basename(path).rsplit(".", 1)[0])
        os.makedirs(work)
        shutil.copy(path, work)
        subprocess.run(["chown", "-R", f"{self.pw.pw_uid}:{self.pw.pw_gid}", self.pw.pw_dir], check=True)
        if expectations(path)["setup"]:
            self.as_user(["/bin/sh", "-c", expectations(path)["setup"]], cwd=work)
        p = self.as_user([SUBMIT[family], os.path.basename(path)], cwd=work, check=False)
        m = re.search(r"(\d+)", p.stdout)
        return work, int(m.group(1)) if m and p.returncode == 0 else 0, p

    def jobs(self):
        return self.client.read.active() + self.client.read.ended()

    def close(self):
        self.stack.stop_all()
        self.log.close()
        self.redis.proc.terminate()
        self.redis.proc.wait(10)
        subprocess.run(["userdel", "-r", self.pw.pw_name], check=False, capture_output=True)
        subprocess.run(["groupdel", self.pw.pw_name], check=False, capture_output=True)
        shutil.rmtree(self.redis.dir, ignore_errors=True)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def ran():
    """Every script submitted at once as the lab's user; {path: (workdir, job id, sbatch's result)} once
    no job is left active."""
    lab = Lab()
    try:
        got = {path: lab.submit(fam, path) for fam, path in scripts()}
        wait_for(lambda: not lab.client.read.active(), 300, 0.5, what="the corpus to finish")
        yield lab, got, {j.id: j for j in lab.jobs()}
    finally:
        lab.close()


def _log(work: str, pattern: str, job, array_id=None, index=None) -> str:
    name = (pattern.replace("%x", job.name).replace("%A", str(array_id)).replace("%a", str(index))
            .replace("%j", str(job.id)))
    try:
        return open(os.path.join(work, name)).read()
    except FileNotFoundError:
        return f"<no log {name}; the folder has {sorted(os.listdir(work))}>"


@pytest.mark.parametrize("family,path", [pytest.param(f, p, id=os.path.basename(p), marks=(
    [pytest.mark.xfail(reason=f"needs {expectations(p)['needs']}", strict=False)] if expectations(p)["needs"] else []))
    for f, p in scripts()])
def test_script_runs_unchanged(ran, family, path):
    lab, got, jobs = ran
    want = expectations(path)
    work, jid, sub = got[path]
    assert jid, f"submit failed: {sub.stdout} {sub.stderr}"
    assert "Traceback" not in sub.stderr, sub.stderr
    if want["tasks"]:
        tasks = sorted((j for j in jobs.values() if j.array_id == jid), key=lambda j: j.array_index)
        assert len(tasks) == want["tasks"], [t.display_id for t in tasks]
        pattern = want["log"] or "slurm-%A_%a.out"
        ended = [(t.display_id, t.state, _log(work, pattern, t, jid, t.array_index)) for t in tasks]
    else:
        job = jobs[jid]
        ended = [(str(jid), job.state, _log(work, want["log"] or "slurm-%j.out", job))]
        if want["err-log"]:
            err = _log(work, want["err-log"], job)
            assert all(needle in err for needle in want["err"]), (want["err"], err)
    for shown, state, text in ended:
        assert state == want["state"], (shown, state, text)
        for needle in want["out"]:
            assert needle in text, (shown, needle, text)
    if want["children"] is not None:
        kids = sorted((j for j in jobs.values() if j.workdir == work and j.id != jid and j.array_id is None),
                      key=lambda j: j.id)
        assert [k.state for k in kids] == want["children"], [(k.id, k.name, k.state) for k in kids]


def test_the_corpus_is_large_enough():
    count = {fam: len([p for f, p in scripts() if f == fam]) for fam in CORPORA}
    assert count["slurm"] >= 20 and count["pbs"] >= 10 and count["sge"] >= 6, count


ISSUE_PBS = """#!/bin/bash
#PBS -N sweep
#PBS -l nodes=1:ppn=4:gpus=1,walltime=02:00:00,mem=12gb
#PBS -t 0-11%4
#PBS -j oe -o logs/
cd $PBS_O_WORKDIR
python train.py --seed $PBS_ARRAYID
"""


def test_labq_sub_reads_the_issues_pbs_script(ran):
    """Issue 42's report: `labq sub script.pbs` ignored every #PBS line (default limits, no GPU)."""
    lab = ran[0]
    work = os.path.join(lab.pw.pw_dir, "issue42")
    os.makedirs(os.path.join(work, "logs"))
    with open(os.path.join(work, "script.pbs"), "w") as f:
        f.write(ISSUE_PBS)
    subprocess.run(["chown", "-R", f"{lab.pw.pw_uid}:{lab.pw.pw_gid}", work], check=True)
    labq = [sys.executable, "-m", "labq.cli.main"]       # the install's interpreter, as the wrappers use
    p = lab.as_user([*labq, "sub", "--parsable", "-H", "-t", "1h", "script.pbs"], cwd=work)
    assert p.stderr == "", p.stderr
    jid = int(p.stdout.strip())
    tasks = sorted((j for j in lab.jobs() if j.array_id == jid), key=lambda j: j.array_index)
    try:
        assert len(tasks) == 12 and tasks[0].array_throttle == 4
        t = tasks[0]
        assert (t.name, t.cpus, t.gpus, t.mem, t.time_limit) == ("sweep", 4, 1, 12 << 30, 3600), "the flag's -t wins"
        assert t.out == "logs/%x.o%A-%a"
    finally:
        lab.as_user([*labq, "del", str(jid)], cwd=work)
