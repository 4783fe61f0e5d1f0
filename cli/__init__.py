"""labq's command line: one click group, one module per command family."""
