"""Money is printed in rates.currency (units.fmt_money), which whoever prints it passes: the
config's, or the client settings'. No process-wide currency (issue 40)."""
import dataclasses

import pytest

from labq.scheduler import units
from labq.scheduler.settings import config


@pytest.mark.parametrize("code, micro, text", [
    ("USD", 1_500_000, "$1.50"), ("EUR", 1_500_000, "€1.50"), ("GBP", -12_345_000_000, "-£12,345.00"),
    ("CHF", 1_500_000, "1.50 CHF"), ("eur", 0, "€0.00"), ("EUR", 96_033_300, "€96.03"),
    # one rule: to the cent; under half a cent but not zero, said so rather than 0.00 or 4 decimals
    ("EUR", 1300, "<€0.01"), ("EUR", 40, "<€0.01"), ("EUR", 5000, "€0.01"), ("EUR", 12_999, "€0.01"),
    ("EUR", -40, ">-€0.01"), ("CHF", 40, "<0.01 CHF"), ("USD", 1_234_567_890_000, "$1,234,567.89")])
def test_fmt_money(code, micro, text):
    assert units.fmt_money(micro, currency=code) == text


def test_every_amount_has_two_decimals():
    for micro in (0, 1, 49, 4_999, 5_000, 10_000, 99_999, 1_000_000, 123_456_789, 10 ** 13):
        text = units.fmt_money(micro, currency="EUR")
        assert text.split(".")[1].isdigit() and len(text.split(".")[1]) == 2, text


def test_the_unit_shown_is_the_currency():
    assert units.unit_name("usd", "EUR") == "eur" and units.unit_name("gpu_hours", "EUR") == "gpu_hours"


def test_the_config_names_it_and_other_units_keep_theirs():
    cur = config.loads('[rates]\ncurrency = "EUR"\n').rates.currency
    assert units.fmt_money(2_000_000, currency=cur) == "€2.00"
    assert units.fmt_money(2_000_000, "gpu_hours", currency=cur) == "2.000 gpu-hours"
    assert units.fmt_money(2_000_000, currency=config.loads("").rates.currency) == "$2.00"


def test_reading_a_config_changes_no_other_formatting():
    """Config writes no global (issue 40): reading one, building one or replacing one (the scheduler
    does each tick) leaves money printed in another currency as it was."""
    cfg = config.loads('[rates]\ncurrency = "EUR"\n')
    dataclasses.replace(cfg, budgets=())
    config.Config()
    assert units.fmt_money(2_000_000, currency="GBP") == "£2.00"
    assert not hasattr(units, "set_currency"), "no process-wide currency to set"


def test_the_cli_helpers_have_no_currency_of_their_own(capsys):
    """stat's rows (from records and from the kept index), squeue's %$ and `sub --test-only` print the
    currency they are handed, and must be handed one: no helper falls back to a default currency."""
    import inspect

    from labq.cli import render, slurmfmt, statview, subcore
    from labq.scheduler.jobs.model import Attempt, Job
    from labq.scheduler.store import statrows

    helpers = (render.stat_row, slurmfmt.squeue, statview.rows_table, statview.stat_text, subcore.print_test_only)
    for f in helpers:
        p = inspect.signature(f).parameters["currency"]
        assert p.default is inspect.Parameter.empty and p.kind is p.KEYWORD_ONLY, f"{f.__qualname__}: {p}"
    cur = config.loads('[rates]\ncurrency = "EUR"\n').rates.currency
    j = Job(id=7, user="ann", account="x", name="j",      # requeued after an attempt that cost 1.50
            attempts=(Attempt(1, "a", (), start_time=0.0, end_time=60.0, cost=1_500_000),))
    assert render.stat_row(j, 0.0, currency=cur)[8] == "€1.50"
    assert slurmfmt.squeue("%i %$", [("7", j)], 0.0, header=False, currency=cur) == "7 €1.50"
    rows = statrows.parse([statrows.dumps(j)])
    assert "€1.50" in statview.rows_table(statview.rows_cells(rows, 0.0), currency=cur)
    assert "€1.50" in statview.stat_text((), rows, 0.0, currency=cur)
    reply = {"cost_per_hour": 2.0, "forecast_text": "now", "budgets": [], "verdict": "would start", "starts_now": True}
    subcore.print_test_only(reply, {"as_json": False}, currency=cur)
    assert "at €2.00/h" in capsys.readouterr().out
