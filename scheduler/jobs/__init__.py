"""The job model: records, states, their transitions, submit validation, plans."""
