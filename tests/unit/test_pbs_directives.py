"""#PBS and #$ directives (cli/pbsdirs.py), qstat's layouts and PBS/SGE job variables
(cli/pbsshim.py, worker/batchenv.py): the pure parts. tests/e2e/test_compat_corpus.py runs the
PBS and SGE corpora through real jobs."""
import os

import pytest

from labq.cli import pbsdirs, pbsshim, subcore
from labq.scheduler.errors import UsageError
from labq.scheduler.jobs.model import Job
from labq.worker import batchenv, jobenv

ISSUE_PBS = """#!/bin/bash
#PBS -N sweep
#PBS -l nodes=1:ppn=4:gpus=1,walltime=02:00:00,mem=12gb
#PBS -t 0-11%4
#PBS -j oe -o logs/
#PBS -W depend=afterok:1234
cd $PBS_O_WORKDIR
python train.py --seed $PBS_ARRAYID
"""
ISSUE_SGE = """#!/bin/bash
#$ -N sweep -cwd -j y
#$ -l h_rt=2:00:00,h_vmem=12G,gpu=1
#$ -pe smp 4
#$ -t 1-12 -tc 4
python train.py --seed $SGE_TASK_ID
"""


def merged(script: str, **flags) -> dict:
    opts = dict(flags)

    def merge(o, dirs, what):
        got = {dirs[i]: dirs[i + 1] if i + 1 < len(dirs) and not dirs[i + 1].startswith("--") else True
               for i in range(len(dirs)) if dirs[i].startswith("--")}
        for k, v in got.items():
            o.setdefault(k.lstrip("-").replace("-", "_"), v)
    subcore.script_directives(opts, script, merge)
    return opts


def test_the_issues_pbs_script_gets_its_limits_gpu_array_logs_and_dependency():
    fam, tokens = pbsdirs.directives(ISSUE_PBS)
    flags, ignored, r = pbsdirs.translate(tokens, fam)
    assert fam == "pbs" and ignored == [] and r.joined
    f = dict(zip(flags[::2], flags[1::2]))
    assert f == {"--name": "sweep", "--cpus": "4", "--gpus-per-node": "1", "--time": "02:00:00",
                 "--mem": f"{12 << 20}K", "--array": "0-11%4", "--output": "logs/%x.o%A-%a",
                 "--dependency": "afterok:1234"}


def test_the_issues_sge_script_counts_h_vmem_per_slot():
    fam, tokens = pbsdirs.directives(ISSUE_SGE)
    flags, ignored, r = pbsdirs.translate(tokens, fam)
    f = dict(zip(flags[::2], flags[1::2]))
    assert fam == "sge" and ignored == [] and r.joined
    assert f == {"--name": "sweep", "--time": "2:00:00", "--gpus": "1", "--cpus": "4", "--array": "1-12%4",
                 "--mem": f"{48 << 20}K"}


def test_labq_sub_reads_them_with_flags_first_and_names_what_it_ignores(capsys):
    got = merged(ISSUE_PBS.replace("#PBS -t", "#PBS -q gpu\n#PBS -m abe\n#PBS -t"), name="mine")
    assert got["name"] == "mine" and got["time"] == "02:00:00" and got["array"] == "0-11%4"
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "#PBS directives ignored: -q gpu -m abe" in err


@pytest.mark.parametrize("script,message", [
    ("#!/bin/bash\n#SBATCH -t 5\n#PBS -N x\necho\n", "#PBS and #SBATCH directives: keep one family"),
    ("#!/bin/bash\n#PBS -N x\n#$ -N y\necho\n", "#PBS and #$ directives"),
    ("#!/bin/bash\n#PBS -t 1,3,5\necho\n", "no index lists"),
    ("#!/bin/bash\n#$ -hold_jid prep\necho\n", "labq does not wait on job names"),
    ("#!/bin/bash\n#PBS -W depend=before:12\necho\n", "labq takes afterok, afternotok and afterany"),
    ("#!/bin/bash\n#PBS -I\necho\n", "no interactive jobs"),
    ("#!/bin/bash\n#PBS -l mem=lots\necho\n", "expected a size"),
])
def test_what_cannot_be_honoured_is_refused_in_one_line(script, message):
    with pytest.raises(UsageError) as e:
        merged(script)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_pbs_pro_select_and_torque_multi_node():
    f = pbsdirs.translate(["-l", "select=2:ncpus=8:ngpus=4:mem=32gb", "-J", "1-9:2"], "pbs")[0]
    assert f == ["--nodes", "2", "--cpus", "8", "--gpus-per-node", "4", "--mem", f"{32 << 20}K", "--array", "1-9:2"]
    f = pbsdirs.translate(["-l", "nodes=2:ppn=4,pmem=1gb", "-W", "depend=afterany:7.srv:8[]"], "pbs")[0]
    assert f == ["--nodes", "2", "--cpus", "4", "--dependency", "afterany:7:8", "--mem", f"{4 << 20}K"]


def test_qsub_waits_with_pbs_block_and_sge_sync():
    assert pbsdirs.translate(["-W", "block=true"], "pbs")[2].wait
    assert pbsdirs.translate(["-sync", "y", "-now", "n", "-b", "y"], "sge")[2].wait
    assert not pbsdirs.translate(["-sync", "n"], "sge")[2].wait


def test_qsub_splits_options_script_and_arguments():
    assert pbsshim._split(["-N", "x", "-cwd", "-pe", "smp", "4", "run.sh", "a", "-b"]) == (
        ["-N", "x", "-cwd", "-pe", "smp", "4"], "run.sh", ["a", "-b"])
    assert pbsshim._split(["-F", "1 2", "job.pbs"]) == ([], "job.pbs", ["1", "2"])
    assert pbsshim._split(["-h", "-N", "x"]) == (["-h", "-N", "x"], None, [])


def row(**kw) -> dict:
    d = {"job_id": 12, "array_job_id": None, "array_task_id": None, "name": "train", "user": "alice",
         "qos": "normal", "state": "R", "reason": None, "start_time": 100.0, "end_time": None,
         "request": {"mem": 2 << 30, "time_limit": 3600, "cpus": 4, "gpus": 1, "nodes": 1}, "account": "lab",
         "submit_time": 90.0, "nodelist": ["n1"], "workdir": "/w", "exit_code": None, "dependency": None}
    d.update(kw)
    return d


def test_qstat_prints_torques_layout_and_state_letters():
    rows = [row(), row(job_id=13, state="PD", reason="Held", start_time=None),
            row(job_id=14, state="PD", reason="Priority", start_time=None), row(job_id=15, state="CG"),
            row(job_id=16, state="CD", end_time=160.0), row(job_id=17, array_job_id=17, array_task_id=3)]
    out = pbsshim.default_layout(rows, 3723.0).splitlines()
    assert out[0] == "Job ID                    Name             User            Time Use S Queue"
    assert out[1] == "------------------------- ---------------- --------------- -------- - -----"
    assert out[2] == "12.labq                   train            alice           01:00:23 R normal"
    assert [line.split()[4] for line in out[2:]] == ["R", "H", "Q", "E", "C", "R"]
    assert out[7].startswith("17[3].labq ")
    wide = pbsshim.wide_layout(rows[:1], 3723.0).splitlines()[1:]
    assert wide[0] == "labq: " and wide[1].rstrip().endswith("Elap")
    for word, column in (("Req'd", "Memory"), ("Elap", "S")):     # the upper header ends where its column does
        assert wide[1].index(word) + len(word) == wide[2].index(column) + len(column) or word == "Elap"
    assert len(wide[1].rstrip()) == len(wide[3])
    assert wide[2].split() == ["Job", "ID", "Username", "Queue", "Jobname", "SessID", "NDS", "TSK", "Memory", "Time",
                               "S", "Time"]
    assert wide[4].split() == ["12.labq", "alice", "normal", "train", "--", "1", "4", "2048mb", "01:00:00", "R",
                               "01:00:23"]
    full = pbsshim.full(row(), 3723.0)
    assert full.startswith("Job Id: 12.labq\n    Job_Name = train\n") and "    job_state = R\n" in full
    assert "    Resource_List.nodes = 1:ppn=4:gpus=1\n" in full and "    exec_host = n1/0-3\n" in full


def test_qstat_prints_grid_engines_layout_when_asked():
    rows = [row(), row(job_id=13, state="PD", reason="Held", start_time=None),
            row(job_id=15, array_job_id=14, array_task_id=7, state="PD", reason="Priority", start_time=None),
            row(job_id=16, state="CD", end_time=160.0)]
    out = pbsshim.sge_layout(rows).splitlines()
    assert out[0].split() == ["job-ID", "prior", "name", "user", "state", "submit/start", "at", "queue", "slots",
                              "ja-task-ID"]
    assert [line.split()[4] for line in out[2:]] == ["r", "hqw", "qw"], "ended jobs are not listed"
    assert out[2].split()[:4] == ["12", "0.50000", "train", "alice"] and out[2].split()[-2:] == ["normal@n1", "4"]
    assert out[4].split()[0] == "14" and out[4].split()[-1] == "7"


def test_an_array_folds_to_one_line_running_while_a_task_runs():
    tasks = [row(job_id=20 + i, array_job_id=20, array_task_id=i, state=s, reason=r)
             for i, (s, r) in enumerate([("PD", "Priority"), ("R", None), ("PD", "Priority")])]
    folded = pbsshim._fold(tasks)
    assert len(folded) == 1 and pbsshim.pbs_id(folded[0]) == "20[].labq" and folded[0]["_letter"] == "R"


def test_pbs_and_sge_variables_as_those_systems_set_them():
    job = Job(id=41, user="alice", account="lab", name="sweep", workdir="/w", cpus=4, array_id=40, array_index=5, array_count=3,
              env=(("LABQ_SUB_ARRAY_STEP", "4"),))
    v = batchenv.vars(job, "alice", "/home/alice", "n1", None, "/spool/aux/41", "/spool/tmp/41", True, True)
    assert v["PBS_JOBID"] == "40[5].labq" and v["PBS_ARRAYID"] == v["PBS_ARRAY_INDEX"] == "5"
    assert v["PBS_O_WORKDIR"] == "/w" and v["PBS_NODEFILE"] == "/spool/aux/41" and v["PBS_NUM_PPN"] == "4"
    assert (v["JOB_ID"], v["SGE_TASK_ID"], v["SGE_TASK_FIRST"], v["SGE_TASK_LAST"], v["SGE_TASK_STEPSIZE"]) == (
        "40", "5", "1", "9", "4")
    assert v["NSLOTS"] == "4" and v["TMPDIR"] == "/spool/tmp/41"
    plain = batchenv.vars(Job(id=7, user="a", account="lab", cpus=1), "a", "/h", "n1", None, "", "", False, True)
    assert plain["SGE_TASK_ID"] == "undefined" and "PBS_JOBID" not in plain and "TMPDIR" not in plain


def test_the_node_file_has_a_line_per_slot_and_the_tmpdir_is_the_users(tmp_path):
    job = Job(id=9, user="a", account="lab", cpus=3)
    nodefile, tmpdir = batchenv.prepare(str(tmp_path), job, os.getuid(), os.getgid(), "n1", None)
    assert open(nodefile).read() == "n1\nn1\nn1\n" and os.path.isdir(tmpdir)
    assert os.stat(tmpdir).st_mode & 0o777 == 0o700
    assert tmpdir == os.path.join(str(tmp_path), "tmp", "9")
    batchenv.end(str(tmp_path), 9)
    assert os.path.exists(nodefile) and not os.path.exists(tmpdir), "TMPDIR goes when the attempt ends"
    batchenv.remove(str(tmp_path), 9)
    assert not os.path.exists(nodefile)


def test_a_job_submitted_from_a_job_gets_its_own_batch_variables():
    kept = jobenv.inherited({"PBS_JOBID": "1.labq", "JOB_ID": "1", "SGE_TASK_ID": "2", "NSLOTS": "4", "HOME": "/h"})
    assert kept == {"HOME": "/h"}
