"""`kubetrain list`, `logs RUN`, `cancel RUN` and `clean`: the local runs in a runs directory.

  kubetrain list                  every run in ./runs: its name and state (RUNNING, SUCCEEDED, ...)
  kubetrain logs latest           the newest run's log, as its console showed it (--raw: run.log)
  kubetrain logs -f latest        ... and more as it comes, until the run ends
  kubetrain cancel mnist_ps-2026  stop a running run (as Ctrl-C would): its job is deleted, exit 5
  kubetrain clean                 remove the ended runs but the newest 3 (--keep N, --dry-run)

RUN is a run directory's name, a unique beginning of one, or `latest`. A run whose `kubetrain run`
was killed (SIGKILL) or crashed before it could record how it ended is ABORTED.
"""

from __future__ import annotations

import argparse
import json
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
    """Add `list`, `logs`, `cancel` and `clean`."""
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
    logs.add_argument("-f", "--follow", action="store_true", help="while the run goes on, print more as it comes")
    logs.add_argument("--raw", action="store_true", help="run.log as it is (kfp.local's executor inputs, colours)")
    _runs_dir_option(logs)
    logs.set_defaults(func=logs_command)
    cancel = subparsers.add_parser(
        "cancel", help="stop a running local run (its jobs are deleted)", description=__doc__, formatter_class=raw
    )
    cancel.add_argument("run", metavar="RUN", help="a run's name, a unique beginning of one, or latest")
    _runs_dir_option(cancel)
    cancel.set_defaults(func=cancel_command)
    clean = subparsers.add_parser(
        "clean", help="remove ended local runs but the newest few", description=__doc__, formatter_class=raw
    )
    clean.add_argument("--keep", type=int, default=3, metavar="N", help="ended runs to keep, newest first (default 3)")
    clean.add_argument("--dry-run", action="store_true", help="say what would be removed; remove nothing")
    _runs_dir_option(clean)
    clean.set_defaults(func=clean_command)


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
    """Print the run's log (as its console showed it, or raw), following it if asked."""
    from kubetrain.tooling.local_runs import find_run, log_lines

    run = find_run(args.runs_dir, args.run)
    try:
        for line in log_lines(run, raw=args.raw, follow=args.follow):
            sys.stdout.write(line)
            if args.follow:
                sys.stdout.flush()
    except KeyboardInterrupt:  # Ctrl-C ends a follow; the run itself goes on
        return int(ExitCode.SUCCESS)
    return int(ExitCode.SUCCESS)


def cancel_command(args: argparse.Namespace) -> int:
    """Signal the run's `kubetrain run`; it cancels itself as on Ctrl-C."""
    from kubetrain.tooling.local_runs import cancel_run, find_run

    run = find_run(args.runs_dir, args.run)
    cancel_run(run)
    print(f"kubetrain cancel: asked {run.name} (pid {run.pid}) to stop; its running step deletes its job")
    return int(ExitCode.SUCCESS)


def clean_command(args: argparse.Namespace) -> int:
    """Remove the ended runs but the newest `--keep`; say what went and how much it freed."""
    from kubetrain.tooling.local_runs import clean_runs

    removed = clean_runs(args.runs_dir, keep=args.keep, dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    for run, size in removed:
        print(f"{verb} {run.name}  {run.state}  {_mib(size)}")
    total = sum(size for _, size in removed)
    kept = f"the newest {args.keep} ended and every running one kept"
    print(f"kubetrain clean: {verb} {len(removed)} run(s), {_mib(total)}, in {args.runs_dir}; {kept}")
    return int(ExitCode.SUCCESS)


def _mib(size: int) -> str:
    return f"{size / 1024 / 1024:.1f} MiB"
