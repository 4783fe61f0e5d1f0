"""Multifactor priority: the order in which pending jobs are considered (scheduler/multifactor.py:
the formulas live there, outside policy/, so that `labq prio` reads them without the planner)."""
from ..multifactor import Factors, Score, burst_tail, expected_runtime, factors, ordered, scorer, short_factor

__all__ = ["Factors", "Score", "burst_tail", "expected_runtime", "factors", "ordered", "scorer", "short_factor"]
