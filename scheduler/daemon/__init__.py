"""The scheduler daemon's loop: read requests and events, decide, commit (loop.py holds the tick)."""
