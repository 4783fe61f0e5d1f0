"""Requests come from an inbox anyone may write: any body is a job or a UsageError, never a crash."""
from hypothesis import given, settings, strategies as st

from labq.scheduler.errors import UsageError
from labq.scheduler.jobs.jobspec import array_range, job_from_submit
from labq.scheduler.settings import config

CFG = config.loads("[accounts.eta]\nusers=['alice']\n")
scalars = st.one_of(st.none(), st.booleans(), st.integers(-10, 10**6), st.floats(allow_nan=True),
                    st.text(max_size=8), st.lists(st.text(max_size=4), max_size=3))
KEYS = ["argv", "script", "workdir", "name", "account", "qos", "gpus", "cpus", "mem", "time_limit", "est",
        "max_wait", "tags", "array", "gpu_type", "out", "err"]


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.sampled_from(KEYS), scalars, max_size=10))
def test_any_body_is_a_job_or_a_usage_error(body):
    try:
        job = job_from_submit(body, "alice", CFG, 1000.0)
        array_range(body)
    except UsageError as e:
        assert str(e) and "\n" not in str(e)
        return
    assert job.user == "alice" and job.time_limit >= 1 and (job.argv or job.script)


def test_a_good_body():
    j = job_from_submit({"argv": ["true"], "workdir": "/tmp", "gpus": 2, "account": "eta",
                         "tags": [["model", "eta"]]}, "alice", CFG, 5.0)
    assert (j.gpus, j.account, j.tags, j.time_limit, j.submit_time) == (2, "eta", (("model", "eta"),), 86400, 5.0)
