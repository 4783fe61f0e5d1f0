"""`labq acct` prices COMMITTED from the client settings cache (clientconf.books_of's "pricing":
money/pricing.Prices), not from config.Config (issue 39 item 1): every forecast is the very one the
config gives, under each rate, QoS factor, billing granularity and budget mode, for every GPU model
(priced, unpriced, none) and job shape."""
import json

from hypothesis import given, settings, strategies as st

from labq.scheduler.jobs.model import Job
from labq.scheduler.money import pricing
from labq.scheduler.settings.clientconf import books_of
from tests.harness import cfg

CONFIGS = [
    "",
    """[rates]
gpu_hour = 2.5
gpu_hour_by_model = { a100 = 3.75, h100 = 6 }
cpu_hour = 0.013
mem_gib_hour = 0.002
overhead_per_attempt = 0.05
forecast_margin = 0.35
[qos.normal]
rate_factor = 1.0
[qos.low]
rate_factor = 0.4
[qos.gold]
rate_factor = 2
""",
    """[scheduler]
budget_mode = "forecast"
kill_wait = "45s"
[estimate]
forecast = true
[rates]
currency = "EUR"
gpu_hour = 3
billing = "started_hour"
node_hour = { n1 = 12.5 }
[qos.normal]
rate_factor = 1.5
[qos.low]
rate_factor = 0.25
""",
]

CONFIGS_LOADED = [cfg(text) for text in CONFIGS]
shapes = st.tuples(st.sampled_from([0, 1, 2, 8]), st.integers(1, 64), st.sampled_from([0, 1 << 30, 123_456_789]),
                   st.sampled_from([1, 1, 3]), st.sampled_from(["normal", "low", "gold", "gone"]),
                   st.sampled_from([0, 60, 3600, 86_400]), st.sampled_from([None, 1, 600, 100_000]),
                   st.sampled_from([None, 30, 1200]), st.sampled_from(["", "a100", "h100", "mystery"]))


@settings(max_examples=150, deadline=None)
@given(st.lists(shapes, min_size=1, max_size=20))
def test_the_cached_prices_forecast_what_the_config_forecasts(jobs):
    for c in CONFIGS_LOADED:
        prices = pricing.Prices(json.loads(json.dumps(books_of(c)))["pricing"])      # as the cache file keeps them
        for gpus, cpus, mem, nodes, qos, limit, est, learned, model in jobs:
            j = Job(id=1, user="u", account="a", gpus=gpus, cpus=cpus, mem=mem, nodes=nodes, qos=qos, time_limit=limit,
                    est=est, learned_est=learned)
            for unit in ("usd", "gpu_hours", "cpu_hours"):
                want = pricing.forecast(j, unit, model, c)
                got = pricing.forecast(j, unit, model, prices)
                assert got == want and type(got) is type(want), (c.source, unit, model)
