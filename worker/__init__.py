"""labq's node side: the agent (agent.py), its persistent runners (slot.py), the per-attempt runner
(runner.py, launch.py) and what it knows about the machine (probe.py)."""
