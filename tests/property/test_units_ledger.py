"""Durations, sizes, money, rates, forecasts and charges — exact integer arithmetic."""
import pytest
from hypothesis import given, settings, strategies as st

from labq.scheduler import units
from labq.scheduler.errors import UsageError
from labq.scheduler.jobs.model import Job
from labq.scheduler.money import pricing
from tests.harness import cfg


@pytest.mark.parametrize("text,secs", [("90", 5400), (90, 5400), ("1:30:00", 5400), ("2-0", 172800),
                                       ("2-12", 216000), ("2h30m", 9000), ("45s", 45), ("7d", 604800),
                                       ("10:00", 600), ("1.5h", 5400)])
def test_durations(text, secs):
    assert units.parse_duration(text) == secs


@pytest.mark.parametrize("bad", ["", "abc", "2x", "-5", "1:2:3:4", True])
def test_bad_durations_name_the_flag(bad):
    with pytest.raises(UsageError, match="--time"):
        units.parse_duration(bad, "--time")


@pytest.mark.parametrize("text,n", [("12G", 12 << 30), ("512M", 512 << 20), ("64GiB", 64 << 30), ("1.5T", int(1.5 * (1 << 40))),
                                    ("1024", 1024), ("4k", 4096)])
def test_sizes(text, n):
    assert units.parse_size(text) == n


def test_bad_size():
    with pytest.raises(UsageError, match="--mem: expected a size"):
        units.parse_size("lots", "--mem")


def test_rates_per_unit_and_model():
    c = cfg("[rates]\ngpu_hour = 2.0\ncpu_hour = 0.1\nmem_gib_hour = 0.01\n"
            "gpu_hour_by_model = { 'H100' = 4.5 }\n[qos.normal]\npriority=100\n[qos.low]\nrate_factor = 0.5\n")
    j = Job(id=1, user="a", account="x", gpus=2, cpus=4, mem=10 << 30, time_limit=3600)
    assert pricing.rate(j, "usd", "fake", c) == 2 * 2_000_000 + 400_000 + 100_000
    assert pricing.rate(j, "usd", "H100", c) == 9_000_000 + 400_000 + 100_000
    assert pricing.rate(j, "gpu_hours", "H100", c) == 2_000_000
    assert pricing.rate(j, "cpu_hours", "H100", c) == 4_000_000
    low = Job(id=1, user="a", account="x", gpus=1, qos="low", time_limit=3600)
    assert pricing.rate(low, "usd", "fake", c) == (2_000_000 + 100_000) // 2   # 1 GPU + 1 CPU, half price


def test_a_kept_rate_is_the_config_s_own():
    """pricing.rate keeps each request's money rate on the config: asked again it is the same, a
    config with other QoS factors (sharing the same [rates]) has its own, and the memo stays bounded."""
    from dataclasses import replace

    from labq.scheduler.settings.config import Qos
    c = cfg("[qos.normal]\npriority=100\n[qos.low]\nrate_factor = 0.5\n")
    low = Job(id=1, user="a", account="x", gpus=1, qos="low", time_limit=3600)
    assert pricing.rate(low, "usd", "fake", c) == pricing.rate(low, "usd", "fake", c) == 1_000_000
    dear = replace(c, qos=tuple(replace(q, rate_factor=2.0) if q.name == "low" else q for q in c.qos))
    assert dear.rates is c.rates and dear.qos != c.qos and isinstance(dear.qos[0], Qos)
    assert pricing.rate(low, "usd", "fake", dear) == 4_000_000
    for n in range(5000):
        pricing.rate(Job(id=1, user="a", account="x", gpus=1, mem=n, time_limit=60), "usd", "fake", c)
    assert len(c.rate_memo) <= 4096


def test_safe_and_forecast_modes():
    j = Job(id=1, user="a", account="x", gpus=1, time_limit=7200, est=1800)
    assert pricing.forecast(j, "usd", "fake", cfg()) == 4_016_666   # 2 h + kill_wait 30 s at $2/h
    f = cfg("[scheduler]\nbudget_mode = 'forecast'\n[rates]\nforecast_margin = 0.2\noverhead_per_attempt = 0.05\n")
    assert pricing.forecast(j, "usd", "fake", f) == 1_200_000 + 50_000


@given(st.integers(0, 10**9), st.floats(0, 10**6, allow_nan=False), st.floats(0, 10**6, allow_nan=False))
def test_accrual_is_monotone_and_additive_within_rounding(rate, a, b):
    lo, hi = sorted((a, b))
    assert units.accrue(rate, lo) <= units.accrue(rate, hi)
    whole = units.accrue(rate, lo + hi)
    assert units.accrue(rate, lo) + units.accrue(rate, hi) <= whole + 1 + rate // 1_000_000


def test_money_formatting():
    assert units.fmt_money(4_000_000, currency="USD") == "$4.00"
    assert units.fmt_money(2222, currency="USD") == "<$0.01"
    assert units.fmt_money(1_500_000, "gpu_hours", currency="USD") == "1.500 gpu-hours"


def test_job_records_round_trip_through_json():
    import json
    from dataclasses import asdict

    from labq.scheduler.jobs.model import Attempt
    from labq.scheduler.store import codec
    j = Job(id=7, user="a", account="b", argv=("python", "x.py"), tags=(("k", "v"),), commit=(("b", 5),),
            attempts=(Attempt(1, "n", ("GPU-1",), charges=(("b", 3),), usage={"cpu_s": 1.5}),))
    assert codec.loads(codec.dumps(j)) == j
    # Every field but the exported environment and the script, kept apart (keys.job_env, keys.script), and those at their
    # default, which loads() gives back (a pending job's record is a quarter of the text: issue 13).
    full = {k: v for k, v in json.loads(json.dumps(asdict(j))).items() if k not in ("env", "script")}
    defaults = json.loads(json.dumps(asdict(Job(id=0, user="", account=""))))
    assert json.loads(codec.dumps(j)) == {k: v for k, v in full.items()
                                          if k in ("id", "user", "account", "attempts") or v != defaults[k]}


def test_record_fields_at_and_off_their_default_round_trip():
    """Records leave out the fields at their default (codec.dumps): each comes back, at its default
    or changed, and the record of a job at every default holds only what identifies it."""
    import json
    from dataclasses import MISSING, fields, replace

    from labq.scheduler.store import codec
    base = Job(id=1, user="u", account="a")
    assert codec.loads(codec.dumps(base)) == base
    assert set(json.loads(codec.dumps(base))) <= {"id", "user", "account", "attempts", "usage"}
    change = {bool: lambda d: not d, int: lambda d: d + 1, float: lambda d: d + 1.5, str: lambda d: d + "x"}
    tried = 0
    for f in fields(Job):
        if f.name in ("id", "env", "script", "attempts") or f.default is MISSING or type(f.default) not in change:
            continue
        j = replace(base, **{f.name: change[type(f.default)](f.default)})
        assert codec.loads(codec.dumps(j)) == j, f.name
        tried += 1
    assert tried >= 20


def _dumps_field_by_field(job) -> str:
    """codec.dumps as it was written before its values came from one attrgetter (the reference)."""
    from labq.scheduler.store import codec
    d = {}
    for k in codec._RECORD_NAMES:
        v, dv = getattr(job, k), codec._DEFAULTS.get(k, codec._NONE)
        if v is not dv and (type(v) is not type(dv) or v != dv):
            d[k] = v
    d["attempts"] = [{k: getattr(a, k) for k in codec._ATTEMPT_NAMES} for a in job.attempts]
    if job.script:      # never its text (keys.script, issue 34): only that it has one
        d["scripted"] = True
    if codec.shares_spec(job):
        d.update(argv=[], spec=job.array_id)
    return codec._ENCODER.encode(d)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_records_are_the_text_they_were(data):
    from dataclasses import MISSING, fields, replace

    from labq.scheduler.store import codec
    j = Job(id=data.draw(st.integers(1, 10**9)), user="u", account="a")
    for f in fields(Job):
        if f.default is MISSING or f.name in ("id", "env") or not data.draw(st.booleans()):
            continue
        d = f.default
        alt = {bool: st.booleans(), int: st.integers(-3, 3) | st.booleans(), float: st.floats(-2, 2) | st.integers(0, 2),
               str: st.text(max_size=3), type(None): st.none() | st.text(max_size=2)}.get(type(d))
        if alt is not None:
            j = replace(j, **{f.name: data.draw(alt)})
    assert codec.dumps(j) == _dumps_field_by_field(j)
