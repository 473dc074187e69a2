"""`kubetrain compile [--check]`: regenerate the component and pipeline YAML, or check it is current.

Each component in components/ and each pipeline in pipelines/ compiles to a YAML file next to its
source. `--check` compiles afresh and fails (exit 1) when a committed file differs, ignoring the
SDK version line; it prints the differences and the command that fixes them.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kubetrain.tooling.catalog import COMPONENTS, PIPELINES, entries

# `--check` found stale files: the conventional "differences found" status of diff-like tools.
EXIT_STALE = 1
_DIFF_LINES = 60


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the `compile` subcommand."""
    parser = subparsers.add_parser(
        "compile",
        help="regenerate the YAML of kubetrain's own components and pipelines (for kubetrain's developers)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--check", action="store_true", help="fail when a committed YAML is not what a compile gives")
    parser.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help=f"only these (default all): {', '.join((*COMPONENTS, *PIPELINES))}",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Compile or check; returns 0, or 1 when --check found stale files."""
    from kubetrain.errors import InvalidInputError
    from kubetrain.tooling.compiling import check_all, compile_all

    selected = entries()
    if args.names:
        unknown = sorted(set(args.names) - {e.name for e in selected})
        if unknown:
            raise InvalidInputError(f"unknown names {unknown}; expected some of {[e.name for e in selected]}")
        selected = [e for e in selected if e.name in args.names]
    if not args.check:
        for path in compile_all(selected):
            print(f"wrote {path}")
        return 0
    stale = check_all(selected)
    for item in stale:
        lines = item.diff.splitlines()
        print(f"{item.entry.kind} {item.entry.name}: {item.path or item.entry.yaml_path} is stale", file=sys.stderr)
        print("\n".join(lines[:_DIFF_LINES]), file=sys.stderr)
        if len(lines) > _DIFF_LINES:
            print(f"... ({len(lines) - _DIFF_LINES} more diff lines)", file=sys.stderr)
    if stale:
        print(f"{len(stale)} stale file(s); run `kubetrain compile` (or `make compile`) and commit", file=sys.stderr)
        return EXIT_STALE
    print(f"all {len(selected)} compiled YAML files are current")
    return 0
