"""The job environment as a pure function (worker/jobenv.py) and `--export` capture and checks
(scheduler/jobs/exportenv.py); the end-to-end half is tests/e2e/test_e2e_env.py."""
import pytest
from hypothesis import given, settings, strategies as st

from labq.scheduler.errors import UsageError
from labq.scheduler.jobs import exportenv
from labq.scheduler.jobs.model import Job
from labq.worker import jobenv

WHERE = jobenv.Place(node="n1", user="alice", home="/home/alice", shell="/bin/bash", gpus=("GPU-a", "GPU-b"),
                     start=1000.0, checkpoint_dir="/spool/ck/5", redis_url="unix:///r.sock")


def job(**kw):
    base = dict(id=5, user="alice", account="ml", name="train", workdir="/home/alice/proj", cpus=4,
                mem=12 << 30, time_limit=3600)
    return Job(**{**base, **kw})


def test_export_all_keeps_the_submitters_variables_but_not_their_job_variables():
    env = jobenv.build(job(export="ALL", env=(("PATH", "/venv/bin:/usr/bin"), ("FOO", "1"), ("SLURM_NTASKS", "8"),
                                              ("LABQ_ARRAY_TASK_ID", "3"), ("LABQ_CONFIG", "/c.toml"),
                                              ("HOME", "/elsewhere"), ("CUDA_VISIBLE_DEVICES", "0"))), WHERE)
    assert env["PATH"] == "/venv/bin:/usr/bin" and env["FOO"] == "1" and env["LABQ_CONFIG"] == "/c.toml"
    assert "SLURM_NTASKS" not in env and "LABQ_ARRAY_TASK_ID" not in env
    assert env["HOME"] == "/home/alice" and env["PWD"] == "/home/alice/proj"
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-a,GPU-b"


def test_export_none_starts_clean_and_a_cpu_job_sees_no_gpu():
    env = jobenv.build(job(export="NONE", env=()), jobenv.Place(**{**WHERE.__dict__, "gpus": ()}))
    assert env["PATH"] == jobenv.DEFAULT_PATH and env["CUDA_VISIBLE_DEVICES"] == ""
    assert env["LABQ_GPUS"] == "0" and env["SLURM_GPUS_ON_NODE"] == "0"


def test_slurm_aliases_match_labq_and_can_be_turned_off():
    j = job(array_id=5, array_index=7, array_count=10, id=12)
    env = jobenv.build(j, WHERE)
    assert env["SLURM_JOB_ID"] == env["LABQ_JOB_ID"] == "12"
    assert (env["SLURM_ARRAY_JOB_ID"], env["SLURM_ARRAY_TASK_ID"], env["SLURM_ARRAY_TASK_COUNT"]) == ("5", "7", "10")
    assert env["SLURM_CPUS_PER_TASK"] == "4" and env["SLURM_MEM_PER_NODE"] == "12288"
    assert env["SLURM_JOB_END_TIME"] == "4600" and env["SLURM_JOB_NODELIST"] == "n1"
    off = jobenv.build(j, jobenv.Place(**{**WHERE.__dict__, "slurm_env": False}))
    assert not [k for k in off if k.startswith("SLURM")] and off["LABQ_ARRAY_TASK_ID"] == "7"


@pytest.mark.parametrize("spec, mode, env", [
    (None, "ALL", {"A": "1", "B": "2"}),
    ("ALL", "ALL", {"A": "1", "B": "2"}),
    ("all,A=9", "ALL", {"A": "9", "B": "2"}),
    ("NONE", "NONE", {}),
    ("A", "NONE", {"A": "1"}),
    ("A,C=x=y", "NONE", {"A": "1", "C": "x=y"}),
    ("MISSING", "NONE", {}),
])
def test_capture(spec, mode, env):
    assert exportenv.capture(spec, {"A": "1", "B": "2"}) == {"export": mode, "env": env}


@pytest.mark.parametrize("spec, needle", [("NONE,A=1", "NONE takes no variables"), ("", "expected ALL, NONE"),
                                          ("=x", "not a variable name")])
def test_capture_refuses(spec, needle):
    with pytest.raises(UsageError, match=needle):
        exportenv.capture(spec, {})


@pytest.mark.parametrize("body, needle", [({"export": "SOME"}, "export: expected"), ({"env": []}, "env: expected"),
                                          ({"env": {"A": 1}}, "must be a string"), ({"env": {"A=B": "1"}}, "not a variable"),
                                          ({"env": {"A": "x" * exportenv.MAX_ENV_BYTES}}, "more than")])
def test_validate_refuses_bad_requests(body, needle):
    with pytest.raises(UsageError, match=needle):
        exportenv.validate(body)


def test_an_old_client_without_export_gets_the_clean_environment():
    assert exportenv.validate({}) == ("NONE", ())


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=6) | st.integers(), st.text(max_size=6) | st.none(), max_size=6))
def test_validate_judges_joined_texts_as_it_judges_each_variable(env):
    """exportenv._plain (the checks on joined texts) passes exactly what the one-by-one checks pass."""
    slow_ok = all(isinstance(k, str) and k and "=" not in k and "\0" not in k for k in env) and \
        all(isinstance(v, str) and "\0" not in v for v in env.values())
    assert exportenv._plain(env) == slow_ok
    if slow_ok:
        assert exportenv.validate({"export": "ALL", "env": env}) == ("ALL", tuple(sorted(env.items())))
    else:
        with pytest.raises(UsageError):
            exportenv.validate({"export": "ALL", "env": env})
