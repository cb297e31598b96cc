"""Subcommands of the `dispatcher` command line, one module each (thin shells over the cores)."""
