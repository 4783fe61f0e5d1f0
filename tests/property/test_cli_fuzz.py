"""`labq sub` with random flag values and #LABQ lines, `labq config check` with random TOML (and
random bytes): every run ends with an exit code and at most a line or two on stderr, never a
traceback. The commands run in-process through labq's own entry point (both the fast path and the
click one), against a Redis socket that does not exist: what passes the checks ends with exit 4."""
import contextlib
import io
import math
import os
import sys

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from labq.cli.main import main

FLAGS = ["-t", "--mem", "--begin", "--deadline", "-a", "-c", "-G", "--retries", "--retry-on", "--signal",
         "--est", "--max-wait", "--mem-limit", "--checkpoint-exit-code", "-A", "--budget", "-q", "-d", "--tag",
         "-J", "-o", "--export", "--gres"]
NUMBERS = st.one_of(st.integers(-10, 10 ** 30).map(str), st.sampled_from(
    ["9" * 400, "1e400", "nan", "inf", "-1", "0", "1-10000000000000000000", "1000000000000s", "now+" + "9" * 40,
     "9999-12-31T00:00", "a100:" + "9" * 20, "1-10%0", "USR1@" + "9" * 30, "2-25:99", "\x00", "💥"]))
values = st.one_of(NUMBERS, st.text(max_size=20))
flag_sets = st.lists(st.tuples(st.sampled_from(FLAGS), values), max_size=5)
TRACEBACKS = []   # cases that raised past labq's guard: the tests fail on the first


def run_labq(argv, fast: bool, tmp: str) -> tuple[int, str]:
    """(exit code, stderr) of `labq ARGV`, in-process; an exception that escapes is a traceback."""
    env = {"LABQ_REDIS_URL": f"unix://{tmp}/nowhere.sock", "LABQ_FAST": "1" if fast else "0",
           "LABQ_CONFIG": "", "LABQ_TIMEOUT": "1"}
    old_env = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    err = io.StringIO()
    old_argv, sys.argv = sys.argv, ["labq", *argv]
    code = 0
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except Exception as e:   # noqa: BLE001 - what we count
        TRACEBACKS.append((argv, repr(e)))
        raise
    finally:
        sys.argv = old_argv
        for k, v in old_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return code, err.getvalue()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flags=flag_sets, fast=st.booleans(), directives=st.lists(st.tuples(st.sampled_from(FLAGS), values), max_size=3),
       raw=st.sampled_from([None, "'unbalanced", "-t \"" + "9" * 400 + "\"", "--nope"]))
def test_sub_never_traces_back(tmp_path, flags, fast, directives, raw):
    args = [x for f, v in flags for x in (f, v)]
    if directives or raw:
        lines = [f"#LABQ {f} '{v}'" if "'" not in v else f"#LABQ {f} x" for f, v in directives]
        if raw:
            lines.append(f"#LABQ {raw}")
        script = tmp_path / "job.sh"
        script.write_text("#!/bin/sh\n" + "\n".join(lines) + "\ntrue\n")
        argv = ["sub", *args, str(script)]
    else:
        argv = ["sub", *args, "--", "true"]
    code, err = run_labq(argv, fast, str(tmp_path))
    assert code in (2, 3, 4), (argv, code, err)
    assert one_error(err), (argv, err)


def one_error(err: str) -> bool:
    """No traceback, and one line that says what is wrong: labq's own, or click's usage error
    (`Error: Invalid value for '--checkpoint-exit-code': …` under its Usage/Try lines)."""
    said = [ln for ln in err.splitlines() if ln.startswith(("labq: ", "Error: "))]
    return "Traceback" not in err and len(said) == 1


SECTIONS = ["scheduler", "redis", "rates", "worker", "priority", "alerts", "security", "history", "qos.normal",
            "accounts.a", "users.u", "bogus"]
KEYS = ["tick", "node_lease", "max_pending", "max_time_limit", "max_array_size", "max_request_bytes", "gpu_hour",
        "gpus", "cpus", "mem", "slots", "url", "prefix", "allow_volatile", "default_time", "kill_wait", "priority",
        "share", "max_gpus", "timeout", "age_weight", "currency", "lease", "state_file", "admins", "x"]
toml_values = st.one_of(
    st.integers(-2 ** 63, 2 ** 63 - 1).map(str), st.sampled_from(["nan", "inf", "-inf", "1e308", "1e-400", "true",
                                                                  "100000000000000000000", "[]", "{}"]),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda f: repr(f) if math.isfinite(f) else "0.0"),
    st.text(max_size=12).map(lambda s: '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'),
    st.sampled_from(['"' + "9" * 400 + 's"', '"1000000000000"', '"1e400s"', '"-5m"', '"0.01s"', '["x", 1]']))
tables = st.dictionaries(st.sampled_from(SECTIONS), st.dictionaries(st.sampled_from(KEYS), toml_values, max_size=4),
                         max_size=4)


def to_toml(t: dict) -> str:
    return "".join(f"[{sec}]\n" + "".join(f"{k} = {v}\n" for k, v in kv.items()) for sec, kv in t.items())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=st.one_of(tables.map(lambda t: to_toml(t).encode()), st.binary(max_size=80)))
def test_config_check_never_traces_back(tmp_path, doc):
    path = tmp_path / "labq.toml"
    path.write_bytes(doc)
    code, err = run_labq(["config", "check", str(path)], False, str(tmp_path))
    assert code in (0, 2), (doc, code, err)
    assert code == 0 or one_error(err), (doc, err)


@pytest.fixture(autouse=True, scope="module")
def _report():
    yield
    assert TRACEBACKS == [], TRACEBACKS
