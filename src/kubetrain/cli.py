"""The `kubetrain` command line.

Each subcommand module of `kubetrain.commands` exposes `register(subparsers)`, which adds its
parser and sets `func=run`; `run(args) -> int` returns the exit code
(kubetrain.errors.ExitCode). Errors of the project's hierarchy end in one message and their exit
code, never a traceback. :data:`DESCRIPTION` and :data:`EXAMPLES` are what `kubetrain --help`
tells a user.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from kubetrain import __version__
from kubetrain.commands import compile as compile_command
from kubetrain.commands import demo, download, launch, render, run, submit
from kubetrain.errors import ExitCode, KubetrainError
from kubetrain.urls import redact_text

# In the order `kubetrain --help` lists them: a user's path from trying it out to a cluster.
# Each imports its heavy dependencies when it runs.
SUBCOMMANDS = (demo, run, submit, compile_command, render, launch, download)

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
  kubetrain submit my_pipeline.py --host URL        upload it to Kubeflow Pipelines and start a run

`kubetrain COMMAND --help` tells more. Exit codes: 0 success, 1 a job failed, 2 invalid input,
3 timeout, 4 API or infrastructure error, 5 cancelled."""


class _Parser(argparse.ArgumentParser):
    """argparse that exits with INVALID_INPUT (2) and a one-line message on bad flags."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(int(ExitCode.INVALID_INPUT), f"{self.prog}: error: {message}\n")


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
    args = parser.parse_args(argv)
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
        # Messages name URLs; a presigned one's signature must not reach a terminal or a CI log.
        print(f"kubetrain {args.command}: {redact_text(str(e))}", file=sys.stderr)
        return int(e.exit_code)
    except BrokenPipeError:
        # The reader went away (`kubetrain render ... | head`): not an error of ours.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return int(ExitCode.SUCCESS)


if __name__ == "__main__":
    sys.exit(main())
