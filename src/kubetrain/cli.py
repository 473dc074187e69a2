"""The `kubetrain` command line (filled in as the subcommands land)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Run the kubetrain command line and return its exit code."""
    del argv
    print("kubetrain: no subcommands yet", file=sys.stderr)
    return 2
