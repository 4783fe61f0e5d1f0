"""Every number a request or config carries is bounded: the CLI and `labq config check` answer
out-of-bound input with one line naming the flag or key and the bound (exit 2 or 3), never a
traceback. These run the real `labq` command, without any Redis (nothing is sent)."""
import json
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings, strategies as st

from labq.scheduler.errors import ConfigError, RefusedError, UsageError
from labq.scheduler.jobs import bounds
from labq.scheduler.jobs.jobspec import array_range, job_from_submit
from labq.scheduler.settings import config
from tests.harness import ROOT


def labq(*args):
    env = dict(os.environ, LABQ_REDIS_URL="unix:///nonexistent/labq.sock", PYTHONPATH=ROOT)
    env.pop("LABQ_CONFIG", None)
    return subprocess.run([sys.executable, "-m", "labq.cli.main", *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=60, stdin=subprocess.DEVNULL)

BIG = "9" * 400


@pytest.mark.parametrize("args,code,needles", [
    (["-a", "1-10000000000000000000"], 3, ["--array", "scheduler.max_array_size = 100000"]),
    (["-a", "0-100000"], 3, ["--array", "100001 tasks"]),
    (["-t", "1000000000000s"], 3, ["--time", "scheduler.max_time_limit"]),
    (["-t", "366d"], 3, ["--time", "scheduler.max_time_limit = 31536000s"]),
    (["-t", BIG], 2, ["--time"]),
    (["--mem", BIG], 2, ["--mem"]),
    (["--begin", BIG], 2, ["--begin"]),
    (["--begin", "now+" + "9" * 30 + "d"], 2, ["--begin"]),
    (["--deadline", "9999-12-31T00:00"], 2, ["--deadline"]),
    (["-c", BIG], 2, ["--cpus"]),
    (["-G", BIG], 2, ["--gpus"]),
    (["-G", "a100:" + "9" * 17], 2, ["--gpus"]),
    (["--retries", BIG], 2, ["--retries"]),
    (["--retry-on", BIG], 2, ["--retry-on"]),
    (["--checkpoint-exit-code", "300"], 2, ["--checkpoint-exit-code"]),
    (["--signal", "USR1@" + BIG], 2, ["--signal"]),
    (["--est", "400d"], 3, ["--est", "scheduler.max_time_limit"]),
])
def test_out_of_bound_flags_are_one_line(args, code, needles):
    p = labq("sub", *args, "--", "true")
    assert p.returncode == code, p.stderr
    assert "Traceback" not in p.stderr and p.stderr.count("\n") == 1, p.stderr
    assert all(n in p.stderr for n in needles), p.stderr


def test_a_script_over_max_request_bytes_is_refused_before_sending(tmp_path):
    script = tmp_path / "big.sh"
    script.write_text("#!/bin/sh\n#" + "x" * (1 << 20) + "\ntrue\n")
    p = labq("sub", str(script))
    assert p.returncode == 3 and "scheduler.max_request_bytes = 1048576" in p.stderr, p.stderr


def test_bad_script_text_is_one_line(tmp_path):
    (tmp_path / "bin.sh").write_bytes(b"#!/bin/sh\n\xff\xfe\ntrue\n")
    (tmp_path / "quote.sh").write_text("#!/bin/sh\n#LABQ -J 'unbalanced\ntrue\n")
    for name, needle in (("bin.sh", "UTF-8"), ("quote.sh", "#LABQ")):
        p = labq("sub", str(tmp_path / name))
        assert p.returncode == 2 and needle in p.stderr and "Traceback" not in p.stderr, p.stderr


@pytest.mark.parametrize("text,key", [
    ("[scheduler]\ntick = nan", "scheduler.tick"),
    ("[scheduler]\ntick = inf", "scheduler.tick"),
    ("[rates]\ngpu_hour = inf", "rates.gpu_hour"),
    ("[rates]\ngpu_hour = nan", "rates.gpu_hour"),
    ("[worker]\ngpus = 100000000000000000000", "worker.gpus"),
    ("[scheduler]\nnode_lease = 1000000000000", "scheduler.node_lease"),
    ("[scheduler]\nnode_lease = \"" + BIG + "s\"", "scheduler.node_lease"),
    ("[scheduler]\ndefault_time = \"" + BIG + "\"", "scheduler.default_time"),
    ("[scheduler]\nmax_array_size = 10000000000", "scheduler.max_array_size"),
    ("[scheduler]\nmax_time_limit = \"1h\"", "scheduler.default_time"),
    ("[[budgets]]\nname = \"b\"\nlimit = 1e300", "budgets.b.limit"),
    ("[accounts.a]\nmax_gpus = -100000000000000000000", "accounts.a.max_gpus"),
    ("[qos.normal]\npriority = 100000000000000000000", "qos.normal.priority"),
    ("[redis]\nallow_volatile = \"yes\"", "redis.allow_volatile"),
])
def test_config_check_bounds(tmp_path, text, key):
    path = tmp_path / "labq.toml"
    path.write_text(text + "\n")
    p = labq("config", "check", str(path))
    assert p.returncode == 2 and key in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and p.stderr.count("\n") == 1, p.stderr


def test_config_check_non_utf8_file(tmp_path):
    path = tmp_path / "labq.toml"
    path.write_bytes(b"[scheduler]\ntick = \"1s\" # \xff\xfe\n")
    p = labq("config", "check", str(path))
    assert p.returncode == 2 and "not UTF-8" in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_config_bounds_are_read():
    cfg = config.loads("[scheduler]\nmax_time_limit = \"30d\"\nmax_array_size = 10\nmax_request_bytes = 4096\n"
                       "[redis]\nallow_volatile = true\n")
    assert (cfg.max_time_limit, cfg.max_array_size, cfg.max_request_bytes, cfg.allow_volatile) == \
        (30 * 86400, 10, 4096, True)
    with pytest.raises(ConfigError, match="scheduler.max_request_bytes"):
        config.loads("[scheduler]\nmax_request_bytes = 0\n")


# -- the scheduler's own checks (the ones that count) -------------------------------------------
CFG = config.loads("[accounts.eta]\nusers=['alice']\n[[budgets]]\nname='b1'\naccount='eta'\nlimit=10.0\n")
BODY = {"argv": ["true"], "workdir": "/tmp"}


@pytest.mark.parametrize("extra,err,needle", [
    ({"time_limit": 10 ** 12}, RefusedError, "scheduler.max_time_limit"),
    ({"time_limit": 10 ** 400}, UsageError, "time_limit"),
    ({"gpus": 2 ** 53 + 1}, UsageError, "gpus"),
    ({"mem": 10 ** 30}, UsageError, "mem"),
    ({"cpus": 1.5}, UsageError, "cpus"),
    ({"begin": float("inf")}, UsageError, "begin"),
    ({"begin": float("nan")}, UsageError, "begin"),
    ({"deadline": 1e300}, UsageError, "deadline"),
    ({"max_wait": 10 ** 20}, UsageError, "max_wait"),
    ({"est": 10 ** 9}, RefusedError, "est"),
    ({"signal": ["USR1", 10 ** 20]}, UsageError, "signal"),
    ({"budget": "nope"}, UsageError, "unknown budget 'nope'"),
    ({"account": "nope"}, UsageError, "unknown account 'nope'"),
])
def test_the_scheduler_checks_each_number(extra, err, needle):
    with pytest.raises(err, match=needle):
        job_from_submit({**BODY, **extra}, "alice", CFG, 1000.0)


def test_an_array_is_counted_not_expanded():
    with pytest.raises(RefusedError, match="max_array_size"):
        array_range({"array": [0, 10 ** 19, 1]})
    with pytest.raises(RefusedError, match="array: 1000.*tasks is above"):
        array_range({"array": [0, 10 ** 400, 1]})
    assert array_range({"array": [1, 5, 2]}) == [1, 3, 5]
    with pytest.raises(RefusedError, match="= 3"):
        array_range({"array": [1, 5, 1]}, max_array=3)


def test_loads_bounds_size_depth_and_constants():
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(UsageError, match="nested 100000 deep, at most 32"):
        bounds.loads(deep, "body", 1 << 20)
    with pytest.raises(RefusedError, match="max_request_bytes = 1048576"):
        bounds.loads(json.dumps({"script": "x" * (2 << 20)}), "body", 1 << 20)
    for text in ('{"a": NaN}', '{"a": Infinity}', "[1e400]"):
        got = None
        try:
            got = bounds.loads(text, "body", 1 << 20)
        except UsageError:
            continue
        assert all(abs(v) != float("inf") for v in got), got
    # Brackets inside strings are not nesting: a script full of them is fine.
    assert bounds.loads(json.dumps({"script": "[[[[" * 1000}), "body", 1 << 20)["script"].startswith("[[[[")


def _depth_then(text: str) -> int:
    """bounds.depth as it was: strings by "(?:[^"\\\\]|\\\\.)*", the brackets counted one by one."""
    import re
    brackets = re.sub(r"[^\[\]{}]+", "", re.sub(r'"(?:[^"\\]|\\.)*"', "", text, flags=re.S))
    deepest = level = 0
    for c in brackets:
        level += 1 if c in "[{" else -1
        deepest = max(deepest, level)
    return deepest


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet='"\\[]{}ab é\n,:0', max_size=60)
       | st.recursive(st.none() | st.text(max_size=6) | st.integers(),
                      lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
                      max_leaves=40).map(json.dumps))
def test_depth_and_loads_answer_as_before(text):
    """The unrolled string pattern and the accumulate count give the depth they gave; loads skips the
    count only where the opening brackets alone are too few to pass the bound."""
    assert bounds.depth(text) == _depth_then(text)
    for bound in (0, 1, 2, 32):
        try:
            got = ("ok", bounds.loads(text, "x", 10_000, max_depth=bound))
        except UsageError as e:
            got = ("deep" if "deep" in str(e) else "bad", None)
        if _depth_then(text) > bound:
            assert got[0] == "deep"
        else:
            assert got[0] != "deep"
