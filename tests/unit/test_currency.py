"""Money is printed in rates.currency (units.fmt_money), set by the config."""
import pytest

from labq.scheduler import config, units


@pytest.fixture(autouse=True)
def back_to_usd():
    yield
    units.set_currency("USD")


@pytest.mark.parametrize("code, micro, text", [
    ("USD", 1_500_000, "$1.50"), ("EUR", 1_500_000, "€1.50"), ("EUR", 2500, "€0.0025"), ("GBP", -12_345_000_000, "-£12,345.00"),
    ("CHF", 1_500_000, "1.50 CHF"), ("eur", 0, "€0.00")])
def test_fmt_money(code, micro, text):
    units.set_currency(code)
    assert units.fmt_money(micro) == text


def test_the_config_sets_it_and_other_units_keep_theirs():
    config.loads('[rates]\ncurrency = "EUR"\n')
    assert units.fmt_money(2_000_000) == "€2.00" and units.fmt_money(2_000_000, "gpu_hours") == "2.000 gpu-hours"
    config.loads("")
    assert units.fmt_money(2_000_000) == "$2.00"
