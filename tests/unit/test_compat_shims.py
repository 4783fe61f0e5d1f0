"""The compat commands' translation (cli/shim.py, cli/srun.py) and where their wrappers go
(worker/shimbin.py): pure parts here; tests/e2e/test_compat_corpus.py runs them in real jobs."""
import os
import subprocess

import pytest

from labq.cli import shim, srun
from labq.worker import jobenv, shimbin

JOB = {"LABQ_JOB_ID": "7", "LABQ_CPUS": "4", "PATH": "/usr/bin:/bin", "HOME": "/h", "SECRET": "x"}


def test_sbatch_splits_options_from_the_script_and_its_arguments():
    assert shim.split_options(["--parsable", "-J", "x", "-d", "afterok:3", "run.sh", "-J", "arg"]) == (
        ["--parsable", "-J", "x", "-d", "afterok:3"], ["run.sh", "-J", "arg"])
    assert shim.split_options(["-H", "--hold", "--mem=1G", "a.sh"]) == (["-H", "--hold", "--mem=1G"], ["a.sh"])
    assert shim.split_options(["--wrap", "echo hi"]) == (["--wrap", "echo hi"], [])


def test_sbatch_gives_slurms_log_names_unless_one_is_named(tmp_path):
    plain, arr, named = tmp_path / "a.sh", tmp_path / "b.sh", tmp_path / "c.sh"
    plain.write_text("#!/bin/bash\n#SBATCH -t 5\necho\n")
    arr.write_text("#!/bin/bash\n#SBATCH --array=0-3%2\necho\n")
    named.write_text("#!/bin/bash\n#SBATCH -o logs/%j.txt\necho\n")
    assert shim.default_output([], [str(plain)]) == ["--output", "slurm-%j.out"]
    assert shim.default_output([], [str(arr)]) == ["--output", "slurm-%A_%a.out"]
    assert shim.default_output(["--array", "1-2"], [str(plain)]) == ["--output", "slurm-%A_%a.out"]
    assert shim.default_output([], [str(named)]) == []
    assert shim.default_output(["--output", "x"], [str(plain)]) == []


@pytest.mark.parametrize("argv,message", [
    (["--ntasks-per-node=4", "python"], "--ntasks-per-node=4: labq runs one task per node"),
    (["-n", "8", "python"], "-n 8: labq runs one task per node"),
    (["-N", "2", "python"], "-N 2: this job has 1 node"),
    (["--cpus-per-task=8", "python"], "--cpus-per-task=8: the job has 4 CPUs"),
    (["--pty", "bash"], "--pty"),
    (["--frobnicate", "x"], "does not take --frobnicate"),
    (["-l"], "no command given"),
])
def test_srun_refuses_what_it_cannot_do_in_one_line(argv, message, capsys):
    old = dict(os.environ)
    os.environ.clear()
    os.environ.update(JOB)
    try:
        assert srun.main(argv) == 2
    finally:
        os.environ.clear()
        os.environ.update(old)
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_srun_outside_a_job_says_what_to_write_instead(capsys, monkeypatch):
    monkeypatch.delenv("LABQ_JOB_ID", raising=False)
    assert srun.main(["hostname"]) == 2
    assert "sbatch --wrap" in capsys.readouterr().err


def test_srun_takes_the_common_forms_and_sets_the_step():
    opts, cmd = srun.parse(["-n1", "-lu", "--cpus-per-task", "2", "--mpi=pmix", "--export=NONE,A=1", "py", "-n", "3"])
    assert cmd == ["py", "-n", "3"] and opts["label"] and opts["unbuffered"] and opts["cpus"] == "2"
    assert srun.plan(opts, JOB) is True
    env = srun.environment(opts, JOB)
    assert env["A"] == "1" and "SECRET" not in env and env["PATH"] == "/usr/bin:/bin"
    assert env["SLURM_CPUS_PER_TASK"] == "2" and env["SLURM_PROCID"] == "0" and "SLURM_NTASKS" not in env
    gang = {**JOB, "LABQ_NUM_NODES": "2", "LABQ_NODEID": "1", "SLURM_NODEID": "1"}
    assert srun.plan(srun.parse(["-n", "2", "x"])[0], gang) is True
    assert srun.plan(srun.parse(["-n1", "x"])[0], gang) is False, "srun -n1 in a gang: rank 0's task only"


def test_srun_runs_the_command_with_labels(tmp_path):
    env = {**JOB, "PATH": os.environ["PATH"]}
    p = subprocess.run([shimbin.sys.executable, "-c", "from labq.cli.shim import main; main()", "srun", "-l", "sh",
                        "-c", "echo one; echo two >&2; exit 5"], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 5 and p.stdout == "0: one\n" and p.stderr == "0: two\n", p


def test_wrappers_are_written_for_everyone_and_never_over_a_real_install(tmp_path, capsys):
    d = tmp_path / "bin"
    written = shimbin.write(str(d), ("slurm", "modules"), path="")
    assert set(written) >= {"sbatch", "srun", "squeue", "scancel", "sacct"}
    for name in written:
        assert os.stat(d / name).st_mode & 0o755 == 0o755 and shimbin.ours(str(d / name))
    real = tmp_path / "slurm" / "bin"
    real.mkdir(parents=True)
    (real / "sbatch").write_text("#!/bin/sh\necho real slurm\n")
    (real / "sbatch").chmod(0o755)
    assert shimbin.real_install("slurm", f"{d}:{real}") == str(real / "sbatch")
    assert shimbin.write(str(tmp_path / "job-bin"), ("slurm",), path=str(real)) == []
    os.environ["PATH"], old = f"{real}:{os.environ['PATH']}", os.environ["PATH"]
    try:
        assert shimbin.install(str(tmp_path / "other"), ["slurm"]) == 3
    finally:
        os.environ["PATH"] = old
    assert "refusing" in capsys.readouterr().err and not (tmp_path / "other" / "sbatch").exists()


def test_jobs_get_the_folder_last_on_path_once():
    assert jobenv.with_last("/a:/usr/bin", "/spool/bin") == "/a:/usr/bin:/spool/bin"
    assert jobenv.with_last("/a:/spool/bin:/b", "/spool/bin") == "/a:/b:/spool/bin"


@pytest.fixture
def calls(monkeypatch):
    """The labq argv each command runs (shim.call), answering like `labq sub --parsable`."""
    seen = []

    def fake(argv, capture=False):
        seen.append(argv)
        return 0, "42\n"
    monkeypatch.setattr(shim, "call", fake)
    return seen


def test_squeue_scancel_sacct_speak_labqs_commands(calls):
    shim.squeue(["-u", "alice", "-h", "-tR", "--me"])
    shim.squeue(["-l", "-j", "5"])
    shim.squeue(["-o", "%i %T"])
    shim.scancel(["5", "6_[1-3]", "--quiet"])
    shim.scancel(["-u", "bob"])
    shim.sacct(["-j", "5", "-X", "-a"])
    shim.sacct(["-j", "5", "--format=JobID,State"])
    assert calls == [
        ["stat", "-u", "alice", "--noheader", "-t", "R", "--me", "-o", shim.SQUEUE_FORMAT],
        ["stat", "-j", "5", "-o", shim.SQUEUE_LONG], ["stat", "-o", "%i %T"],
        ["del", "5", "6_[1-3]"], ["del", "-u", "bob"],
        ["acct", "--format", shim._SACCT_DEFAULT, "-j", "5", "-X"], ["acct", "-j", "5", "--format=JobID,State"]]


def test_sbatch_prints_slurms_lines(calls, capsys, tmp_path):
    script = tmp_path / "a.sh"
    script.write_text("#!/bin/bash\n#SBATCH -t 5\necho\n")
    assert shim.sbatch(["-J", "x", "--mail-type=END", str(script), "arg"]) == 0
    assert shim.sbatch(["--parsable", "-d", "afterok:41", "--wrap", "echo hi"]) == 0
    out, err = capsys.readouterr()
    assert out == "Submitted batch job 42\n42\n" and err == "sbatch: warning: options labq ignores: --mail-type=END\n"
    assert calls[0] == ["sub", "--output", "slurm-%j.out", "--name", "x", "--parsable", str(script), "arg"]
    assert calls[1] == ["sub", "--output", "slurm-%j.out", "--name", "wrap", "--dependency", "afterok:41",
                        "--parsable", "--", "/bin/sh", "-c", "echo hi"]


def test_sbatch_reads_a_script_on_stdin_for_its_directives_and_hands_it_on(calls, monkeypatch):
    import io
    text = "#!/bin/bash\n#SBATCH --array=0-3\necho $SLURM_ARRAY_TASK_ID\n"
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    assert shim.sbatch(["-J", "x"]) == 0
    assert calls[0] == ["sub", "--output", "slurm-%A_%a.out", "--name", "x", "--parsable"]
    import sys
    assert sys.stdin.read() == text, "labq sub reads the same script"


@pytest.mark.parametrize("argv,message", [(["--frob"], "does not take --frob"), (["-i", "5"], "does not take -i")])
def test_squeue_refuses_in_one_line(argv, message, calls, capsys):
    with pytest.raises(SystemExit) as e:
        shim.squeue(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err and not calls


def test_the_worker_switch_leaves_jobs_without_the_folder(tmp_path, monkeypatch):
    # The folder leaves out a family whose real commands the node has: the agent's PATH and the jobs'
    # default PATH are this test's own folders, so a machine with SLURM installed sees the same.
    agent, default = tmp_path / "agent-bin", tmp_path / "default-bin"
    agent.mkdir()
    default.mkdir()
    monkeypatch.setenv("PATH", str(agent))
    monkeypatch.setattr(jobenv, "DEFAULT_PATH", str(default))
    spool = tmp_path / "spool"
    assert shimbin.for_jobs(str(spool), {"compat_commands": False}) == "" and not (spool / "bin").exists()
    d = shimbin.for_jobs(str(spool), {"compat_commands": True})
    assert d == str(spool / "bin") and shimbin.ours(os.path.join(d, "srun"))
    (default / shimbin.REAL["slurm"]).write_text("#!/bin/sh\necho real slurm\n")
    (default / shimbin.REAL["slurm"]).chmod(0o755)
    d = shimbin.for_jobs(str(tmp_path / "spool2"), {"compat_commands": True})
    assert not os.path.exists(os.path.join(d, "srun")), "a node with SLURM keeps its commands: none of ours"
