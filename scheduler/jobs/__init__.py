"""The job model: records, states, submit validation, plans (their transitions: daemon/transitions.py)."""
