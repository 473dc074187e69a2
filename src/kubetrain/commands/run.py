"""Run a pipeline end to end on this machine: no cluster and no container needed.

  kubetrain run mnist_pytorch --param epochs=3     a shipped pipeline
  kubetrain run my_pipeline.py --list-params       your own pipeline's parameters
  kubetrain run my_pipeline.py --json              your own; progress on stderr, JSON on stdout
  kubetrain run my_pipeline.py --dry-run           compile it and check its inputs; run nothing

PIPELINE is one of the shipped pipelines (mnist_pytorch, mnist_chainermn, mnist_ps,
compare_frameworks), or your own: a .py file defining a @dsl.pipeline function (--pipeline-func
NAME picks one when it defines several; importing the file is all kubetrain does with it), or a
compiled pipeline .yaml. `kubetrain run PIPELINE --list-params` lists its parameters.

Before any step starts, the inputs of every kubetrain step known up front (constants, the
parameters, a ParallelFor's items; inside control flow too) are checked as --dry-run checks them: a
bad one ends the run at once with exit 2, nothing run. Each step runs as a process here and each
training job as local processes behaving like the operator's pods; no cluster, no container. It
prints each step's progress, then the outcome: every task's state, where its outputs and HTML
reports are, its final metrics, and for a failed task its error and exit code. Everything, kfp's
own output included, is kept in the run directory's run.log (--verbose prints it all). With --json,
the progress goes to stderr and stdout ends with one JSON object: the pipeline's state and, per
task, its state, error, exit code, metrics, output parameters and artifact paths.

Exit code: 0 when every step succeeded; else the failed step's own (1 the job failed, 2 invalid
input, 3 timed out, 4 API errors); 5 when SIGTERM or SIGINT (Ctrl-C) stopped the run (its running
step deleted its job; the outcome, with --json the JSON object, is still printed).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubetrain.errors import ExitCode, InvalidInputError
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
    parser.add_argument(
        "--verbose",
        action="store_true",
        # SUPPRESS: not given here, the global `kubetrain -v` stays as it was.
        default=argparse.SUPPRESS,
        help="print everything the steps and kfp.local print (always kept in the run directory's run.log)",
    )


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the `run` subcommand."""
    parser = subparsers.add_parser(
        "run",
        help="run a pipeline (a shipped one or your own .py/.yaml) on this machine, no cluster needed",
        usage="kubetrain run PIPELINE [--param KEY=VALUE ...] [--json] [--list-params] [--dry-run] [options]",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_pipeline_argument(parser)
    parser.add_argument("--param", action="append", default=[], metavar="KEY=VALUE", help="pipeline parameter")
    parser.add_argument(
        "--list-params",
        action="store_true",
        help="list the pipeline's parameters (name, type, default, description) and exit",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="compile the pipeline and check its inputs (its training steps' too); run nothing",
    )
    add_run_options(parser)
    parser.set_defaults(func=run)


def add_pipeline_argument(parser: argparse.ArgumentParser) -> None:
    """PIPELINE and --pipeline-func, as `run` and `submit` take them."""
    parser.add_argument(
        "pipeline",
        metavar="PIPELINE",
        help=f"one of {', '.join(PIPELINES)}, or your own pipeline: a .py file or a compiled .yaml",
    )
    parser.add_argument(
        "--pipeline-func",
        default=None,
        metavar="NAME",
        help="the @dsl.pipeline function to take from a .py file that defines several",
    )


def prepare_runs_dir(runs_dir: Path) -> None:
    """Make `--runs-dir` (and its parents), or fail in one line saying why it cannot be one."""
    prepare_directory(runs_dir, "--runs-dir")


def prepare_directory(path: Path, flag: str) -> None:
    """Make the directory a user named with `flag` (and its parents), or fail in one line saying why it cannot."""
    blocker = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise InvalidInputError(f"{flag} {path}: {blocker} is a file, not a directory; choose another")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InvalidInputError(f"{flag} {path}: cannot be made ({e.strerror}); choose another") from e


def single_threaded_defaults() -> None:
    """One compute thread per process unless the user chose otherwise: every replica is a process here."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")


def with_signals_held(body: Callable[[argparse.Namespace, SignalEvent], int], args: argparse.Namespace) -> int:
    """`body(args, cancel)` with SIGTERM/SIGINT held from the first line on (`run` and `demo`).

    Stop means stop from the first line on: a signal while kfp and the pipeline load is recorded in
    `cancel` (no step then starts), one while the outcome is collected and printed changes nothing;
    without this, either ended the run with 143 and no report.
    """
    cancel = hold_signals()
    try:
        return body(args, cancel)
    finally:
        # Decided and printed: the interpreter's shutdown must not turn a late signal into 143.
        ignore_signals()


def run(args: argparse.Namespace) -> int:
    """Run the pipeline locally; print the outcome."""
    return with_signals_held(_run, args)


def _run(args: argparse.Namespace, cancel: SignalEvent) -> int:
    from kubetrain.tooling.dry_run import dry_run
    from kubetrain.tooling.local_run import describe, run_pipeline_locally
    from kubetrain.tooling.outcome import run_fields
    from kubetrain.tooling.params import describe_inputs, parse_params, pipeline_inputs
    from kubetrain.tooling.result_json import result_json
    from kubetrain.tooling.sources import load_pipeline

    # An error ends in the CLI, whose JSON object (with --json) has the run's keys as far as they are known.
    args.json_fields = run_fields()
    loaded = load_pipeline(args.pipeline, pipeline_func=args.pipeline_func)
    args.json_fields = run_fields(loaded.name)
    inputs = pipeline_inputs(loaded.pipeline)
    if args.list_params:
        print(describe_inputs(inputs), file=sys.stderr if args.json else sys.stdout, flush=True)
        if args.json:
            listed = {name: dataclasses.asdict(item) for name, item in inputs.items()}
            fields = {**run_fields(loaded.name), "parameters": listed}
            print(json.dumps(result_json(state="SUCCEEDED", exit_code=ExitCode.SUCCESS, fields=fields)), flush=True)
        return int(ExitCode.SUCCESS)
    arguments = parse_params(args.param, inputs)
    args.json_fields = run_fields(loaded.name, arguments)
    prepare_runs_dir(args.runs_dir)
    # A bad input of a later step fails now, not after the steps before it have run (a download first).
    checked = dry_run(loaded.pipeline, name=loaded.name, arguments=arguments)
    if args.dry_run:
        print(checked.describe(), file=sys.stderr if args.json else sys.stdout, flush=True)
        if args.json:
            print(json.dumps(checked.to_json()), flush=True)
        return int(ExitCode.SUCCESS)
    single_threaded_defaults()
    outcome = run_pipeline_locally(
        loaded.pipeline,
        name=loaded.name,
        arguments=arguments,
        runs_dir=args.runs_dir,
        logs_to_stderr=args.json,
        cancel=cancel,
        verbose=getattr(args, "verbose", False),
        # The file's modules import in its steps and pods as they did when it was loaded here.
        python_path=(str(loaded.source_dir),) if loaded.source_dir is not None else (),
    )
    print(describe(outcome), file=sys.stderr if args.json else sys.stdout, flush=True)
    if args.json:
        print(json.dumps(outcome.to_json()), flush=True)
    return outcome.exit_code
