"""`kubetrain list`, `kubetrain logs RUN` and `kubetrain cancel RUN`: the local runs in a runs directory.

  kubetrain list                  every run in ./runs: its name and state (RUNNING, SUCCEEDED, ...)
  kubetrain logs latest           everything the newest run printed (its run.log)
  kubetrain cancel mnist_ps-2026  stop a running run (as Ctrl-C would): its job is deleted, exit 5

RUN is a run directory's name, a unique beginning of one, or `latest`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from kubetrain.commands.run import DEFAULT_RUNS_DIR
from kubetrain.errors import ExitCode


def _runs_dir_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--runs-dir",
        type=Path,
        default=DEFAULT_RUNS_DIR,
        metavar="DIR",
        help=f"where the runs are (default ./{DEFAULT_RUNS_DIR})",
    )


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add `list`, `logs` and `cancel`."""
    raw = argparse.RawDescriptionHelpFormatter
    listing = subparsers.add_parser(
        "list", help="list the local runs and their states", description=__doc__, formatter_class=raw
    )
    _runs_dir_option(listing)
    listing.add_argument("--json", action="store_true", help="one JSON object on stdout")
    listing.set_defaults(func=list_command)
    logs = subparsers.add_parser(
        "logs", help="print a local run's log (run.log)", description=__doc__, formatter_class=raw
    )
    logs.add_argument("run", metavar="RUN", help="a run's name, a unique beginning of one, or latest")
    _runs_dir_option(logs)
    logs.set_defaults(func=logs_command)
    cancel = subparsers.add_parser(
        "cancel", help="stop a running local run (its jobs are deleted)", description=__doc__, formatter_class=raw
    )
    cancel.add_argument("run", metavar="RUN", help="a run's name, a unique beginning of one, or latest")
    _runs_dir_option(cancel)
    cancel.set_defaults(func=cancel_command)


def list_command(args: argparse.Namespace) -> int:
    """Print every run and its state."""
    from kubetrain.tooling.local_runs import list_runs

    runs = list_runs(args.runs_dir)
    if args.json:
        from kubetrain.tooling.result_json import result_json

        fields = {"runs_dir": str(args.runs_dir), "runs": {r.name: r.state for r in runs}}
        print(json.dumps(result_json(state="SUCCEEDED", exit_code=ExitCode.SUCCESS, fields=fields)))
        return int(ExitCode.SUCCESS)
    if not runs:
        print(f"no runs in {args.runs_dir}")
    for run in runs:
        print(f"{run.name}  {run.state}")
    return int(ExitCode.SUCCESS)


def logs_command(args: argparse.Namespace) -> int:
    """Copy the run's log to stdout."""
    from kubetrain.tooling.local_runs import find_run

    run = find_run(args.runs_dir, args.run)
    with run.log.open(encoding="utf-8", errors="replace") as log:
        shutil.copyfileobj(log, sys.stdout)
    return int(ExitCode.SUCCESS)


def cancel_command(args: argparse.Namespace) -> int:
    """Signal the run's `kubetrain run`; it cancels itself as on Ctrl-C."""
    from kubetrain.tooling.local_runs import cancel_run, find_run

    run = find_run(args.runs_dir, args.run)
    cancel_run(run)
    print(f"kubetrain cancel: asked {run.name} (pid {run.pid}) to stop; its running step deletes its job")
    return int(ExitCode.SUCCESS)
