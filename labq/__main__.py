"""`python -m labq` is the `labq` command."""
from labq.cli.main import main

main()
