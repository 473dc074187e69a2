"""`kubetrain run PIPELINE [--param KEY=VALUE ...] [--json]`: a pipeline end to end on this machine.

Runs through kfp.local's SubprocessRunner with the local backend: each step is a subprocess of
this Python, each training job a set of local processes imitating the operator. Prints the
steps' progress, then where every output is and the final metrics. With --json, the progress
goes to stderr and stdout ends with one JSON object: the pipeline's state and, per task, its
state, metrics, output parameters and artifact paths. Exit code 0 when every task succeeded,
1 when one failed, 5 when SIGTERM or SIGINT stopped the run (its running step deleted its job,
and the outcome, with --json the JSON object, is still printed, however many signals come).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from kubetrain.errors import ExitCode
from kubetrain.launcher.signals import SignalEvent, hold_signals, ignore_signals
from kubetrain.tooling.catalog import PIPELINES

DEFAULT_RUNS_DIR = Path("runs")


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """The options `run` and `demo` share."""
    parser.add_argument(
        "--runs-dir",
        type=Path,
        default=DEFAULT_RUNS_DIR,
        metavar="DIR",
        help=f"where each run gets its directory (default ./{DEFAULT_RUNS_DIR})",
    )
    parser.add_argument("--json", action="store_true", help="progress to stderr; end stdout with one JSON object")


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the `run` subcommand."""
    parser = subparsers.add_parser(
        "run",
        help="run a pipeline end to end on this machine (kfp.local + the local backend)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("pipeline", metavar="PIPELINE", help=f"one of {', '.join(PIPELINES)}")
    parser.add_argument("--param", action="append", default=[], metavar="KEY=VALUE", help="pipeline parameter")
    add_run_options(parser)
    parser.set_defaults(func=run)


def single_threaded_defaults() -> None:
    """One compute thread per process unless the user chose otherwise: every replica is a process here."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")


def run(args: argparse.Namespace) -> int:
    """Run the pipeline locally; print the outcome."""
    # Stop means stop from the first line on: a signal while kfp and the pipeline load is recorded
    # (no step then starts), one while the outcome is collected and printed changes nothing;
    # without this, either ended the run with 143 and no report.
    cancel = hold_signals()
    try:
        return _run(args, cancel)
    finally:
        # Decided and printed: the interpreter's shutdown must not turn a late signal into 143.
        ignore_signals()


def _run(args: argparse.Namespace, cancel: SignalEvent) -> int:
    from kubetrain.tooling.catalog import pipeline
    from kubetrain.tooling.local_run import describe, run_locally
    from kubetrain.tooling.params import parse_params, pipeline_inputs

    entry = pipeline(args.pipeline)
    arguments = parse_params(args.param, pipeline_inputs(entry.load()))
    single_threaded_defaults()
    outcome = run_locally(entry, arguments, runs_dir=args.runs_dir, logs_to_stderr=args.json, cancel=cancel)
    print(describe(outcome), file=sys.stderr if args.json else sys.stdout, flush=True)
    if args.json:
        print(json.dumps(outcome.to_json()), flush=True)
    if outcome.state == "CANCELLED":
        return int(ExitCode.CANCELLED)
    return 0 if outcome.state == "SUCCEEDED" else int(ExitCode.JOB_FAILED)
