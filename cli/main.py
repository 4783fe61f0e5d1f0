"""`labq`: the hot commands by the fast path (fast.py), everything else by the click group (group.py).

Nothing here imports click: `labq sub` must not pay for it. LABQ_FAST=0 sends every command through
click (to compare the two paths, or to rule the fast one out)."""
import os
import sys


def main():
    from .fast import run
    if os.environ.get("LABQ_FAST") == "0" or not run(sys.argv[1:]):
        from .group import main as click_main
        click_main()


if __name__ == "__main__":
    main()
