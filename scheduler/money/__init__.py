"""Budgets and cost: the ledger, periods, alerts, the stop policy, reports, fair-share usage."""
