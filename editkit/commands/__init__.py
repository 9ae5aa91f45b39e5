"""One module per CLI command (see editkit/cli.py)."""
