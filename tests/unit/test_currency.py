"""Money is printed in rates.currency (units.fmt_money), set by the config."""
import pytest

from labq.scheduler import units
from labq.scheduler.settings import config


@pytest.fixture(autouse=True)
def back_to_usd():
    yield
    units.set_currency("USD")


@pytest.mark.parametrize("code, micro, text", [
    ("USD", 1_500_000, "$1.50"), ("EUR", 1_500_000, "€1.50"), ("GBP", -12_345_000_000, "-£12,345.00"),
    ("CHF", 1_500_000, "1.50 CHF"), ("eur", 0, "€0.00"), ("EUR", 96_033_300, "€96.03"),
    # one rule: to the cent; under half a cent but not zero, said so rather than 0.00 or 4 decimals
    ("EUR", 1300, "<€0.01"), ("EUR", 40, "<€0.01"), ("EUR", 5000, "€0.01"), ("EUR", 12_999, "€0.01"),
    ("EUR", -40, ">-€0.01"), ("CHF", 40, "<0.01 CHF"), ("USD", 1_234_567_890_000, "$1,234,567.89")])
def test_fmt_money(code, micro, text):
    units.set_currency(code)
    assert units.fmt_money(micro) == text


def test_every_amount_has_two_decimals():
    units.set_currency("EUR")
    for micro in (0, 1, 49, 4_999, 5_000, 10_000, 99_999, 1_000_000, 123_456_789, 10 ** 13):
        text = units.fmt_money(micro)
        assert text.split(".")[1].isdigit() and len(text.split(".")[1]) == 2, text


def test_the_unit_shown_is_the_currency():
    units.set_currency("EUR")
    assert units.unit_name("usd") == "eur" and units.unit_name("gpu_hours") == "gpu_hours"


def test_the_config_sets_it_and_other_units_keep_theirs():
    config.loads('[rates]\ncurrency = "EUR"\n')
    assert units.fmt_money(2_000_000) == "€2.00" and units.fmt_money(2_000_000, "gpu_hours") == "2.000 gpu-hours"
    config.loads("")
    assert units.fmt_money(2_000_000) == "$2.00"


def test_a_config_built_or_replaced_leaves_the_currency_alone():
    """Config writes no global (issue 40): the scheduler's replace() of its config every tick, or a
    Config built in code, leaves the process's currency as reading a config in set it."""
    import dataclasses
    cfg = config.loads('[rates]\ncurrency = "EUR"\n')
    units.set_currency("GBP")
    dataclasses.replace(cfg, budgets=())
    config.Config()
    assert units.fmt_money(2_000_000) == "£2.00"
