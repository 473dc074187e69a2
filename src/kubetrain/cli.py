"""The `kubetrain` command line.

Each subcommand module of `kubetrain.commands` exposes `register(subparsers)`, which adds its
parser and sets `func=run`; `run(args) -> int` returns the exit code
(kubetrain.errors.ExitCode). Errors of the project's hierarchy end in one message and their exit
code, never a traceback. :data:`DESCRIPTION` and :data:`EXAMPLES` are what `kubetrain --help`
tells a user.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Mapping
from typing import Any

from kubetrain import __version__
from kubetrain.commands import compile as compile_command
from kubetrain.commands import demo, download, launch, render, run, runs, submit
from kubetrain.errors import ExitCode, InvalidInputError, JobFailedError, KubetrainError
from kubetrain.urls import redact_text

# In the order `kubetrain --help` lists them: a user's path from trying it out to a cluster.
# Each imports its heavy dependencies when it runs.
SUBCOMMANDS = (demo, run, runs, submit, compile_command, render, launch, download)

DESCRIPTION = """\
Distributed training (PyTorch DDP, ChainerMN, parameter servers) as Kubeflow Pipelines steps.
Try a pipeline on this machine with no cluster (demo, run), send it to Kubeflow Pipelines
(submit), or look at and launch the training jobs the steps create (render, launch)."""

EXAMPLES = """\
examples:
  kubetrain demo                                    compare the three frameworks here (no network)
  kubetrain run mnist_pytorch --param epochs=3      a shipped pipeline, with a parameter
  kubetrain run my_pipeline.py --list-params        your own pipeline's parameters
  kubetrain run my_pipeline.py --json               your own pipeline; one JSON object at the end
  kubetrain list; kubetrain logs latest             the local runs; the newest one's log
  kubetrain submit my_pipeline.py --host URL        upload it to Kubeflow Pipelines and start a run

`kubetrain COMMAND --help` tells more. Exit codes: 0 success, 1 a job failed, 2 invalid input,
3 timeout, 4 API or infrastructure error, 5 cancelled."""


class UsageError(InvalidInputError):
    """A command line argparse refused (the message is argparse's, `PROG: error: ...`)."""


class _Parser(argparse.ArgumentParser):
    """argparse that ends with INVALID_INPUT (2) and a one-line message on bad flags."""

    def error(self, message: str) -> None:  # type: ignore[override]
        # Raised, not exited: main() prints it, and with --json ends stdout with the JSON object too.
        self.print_usage(sys.stderr)
        raise UsageError(f"{self.prog}: error: {message}")


def error_json(error: KubetrainError, fields: Mapping[str, Any] | None = None) -> str:
    """The one JSON object a `--json` command ends stdout with when an error ends it (:mod:`.tooling.result_json`).

    `fields`: the command's own keys, as far as it got (`args.json_fields`, set by the command).
    """
    from kubetrain.tooling.result_json import error_state, result_json

    text = error.headline() if isinstance(error, JobFailedError) else str(error)
    code = int(error.exit_code)
    return json.dumps(
        result_json(
            state=error_state(code),
            exit_code=code,
            error=redact_text(text),
            error_type=type(error).__name__,
            fields=fields,
        )
    )


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every available subcommand registered."""
    parser = _Parser(
        prog="kubetrain",
        description=DESCRIPTION,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"kubetrain {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging; run and demo print everything")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for module in SUBCOMMANDS:
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the kubetrain command line and return its exit code."""
    parser = build_parser()
    words = sys.argv[1:] if argv is None else argv
    try:
        args = parser.parse_args(argv)
    except UsageError as e:
        print(e, file=sys.stderr)
        if "--json" in words:
            print(error_json(e), flush=True)
        return int(e.exit_code)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return int(ExitCode.INVALID_INPUT)
    try:
        return int(func(args))
    except KubetrainError as e:
        # A failed job's log tails were printed as the launcher read them: its headline is enough here.
        # Messages name URLs; a presigned one's signature must not reach a terminal or a CI log.
        shown = e.headline() if isinstance(e, JobFailedError) and e.shown else str(e)
        print(f"kubetrain {args.command}: {redact_text(shown)}", file=sys.stderr)
        if getattr(args, "json", False):
            print(error_json(e, getattr(args, "json_fields", None)), flush=True)
        return int(e.exit_code)
    except BrokenPipeError:
        # The reader went away (`kubetrain render ... | head`): not an error of ours.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return int(ExitCode.SUCCESS)


if __name__ == "__main__":
    sys.exit(main())
