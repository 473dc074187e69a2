"""`kubetrain demo`: compare PyTorch DDP, ChainerMN and parameter servers on the built-in digits.

Runs the `compare_frameworks` pipeline on this machine (as `kubetrain run compare_frameworks`
would): one download, three distributed training jobs on the local backend, one comparison
table. Prints the table, each framework's test accuracy, the wall time and where the HTML
reports with the loss and accuracy curves are. Needs no network and no cluster.

Exit code: 0 when the pipeline succeeded; else the failed step's own (as `kubetrain run`); 5 when
SIGTERM or SIGINT (Ctrl-C) stopped it: the running step deleted its job, the interrupted task is
CANCELLED, and the outcome (with --json the JSON object) is still printed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from kubetrain.commands.run import add_run_options, prepare_runs_dir, single_threaded_defaults, with_signals_held
from kubetrain.launcher.signals import SignalEvent

PIPELINE = "compare_frameworks"
DEMO_ARGUMENTS = {"dataset": "builtin:digits"}
TARGET_ACCURACY = 0.95
FRAMEWORK_TASKS = (("pytorch", "pytorch-train"), ("chainermn", "chainermn-train"), ("ps", "ps-train"))


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the `demo` subcommand."""
    parser = subparsers.add_parser(
        "demo",
        help="try it: train with PyTorch DDP, ChainerMN and parameter servers here and compare them",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_run_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the demo pipeline; print the comparison and where the charts are."""
    return with_signals_held(_run, args)


def _run(args: argparse.Namespace, cancel: SignalEvent) -> int:
    from kubetrain.tooling.catalog import pipeline
    from kubetrain.tooling.local_run import describe, run_locally
    from kubetrain.tooling.outcome import run_fields

    args.json_fields = run_fields(PIPELINE, DEMO_ARGUMENTS)  # for an error's JSON object (kubetrain.cli)
    prepare_runs_dir(args.runs_dir)
    single_threaded_defaults()
    outcome = run_locally(
        pipeline(PIPELINE),
        DEMO_ARGUMENTS,
        runs_dir=args.runs_dir,
        logs_to_stderr=args.json,
        cancel=cancel,
        verbose=getattr(args, "verbose", False),
        command="demo",
    )
    out = sys.stderr if args.json else sys.stdout
    print(describe(outcome), file=out)
    if outcome.state != "SUCCEEDED":
        if outcome.state == "CANCELLED":
            print(f"\nkubetrain demo: cancelled; what ran so far is in {outcome.run_dir}", file=out)
        else:
            failed = next((t for t in outcome.tasks if t.state == "FAILED"), None)
            why = f"{failed.name}: {failed.error}" if failed and failed.error else "see the log"
            print(f"\ndemo: the pipeline FAILED ({why}); full log: {outcome.log_file}", file=out)
        if args.json:
            print(json.dumps(outcome.to_json()))
        return outcome.exit_code
    summary = outcome.task("compare-summary")
    table = summary.reports.get("summary")
    print("\n" + (Path(table).read_text(encoding="utf-8") if table else "(no summary table)"), file=out)
    for framework, task_name in FRAMEWORK_TASKS:
        accuracy = outcome.task(task_name).metrics.get("test_accuracy", float("nan"))
        mark = "ok" if accuracy >= TARGET_ACCURACY else f"below {TARGET_ACCURACY}"
        print(f"{framework:>10}: test accuracy {accuracy:.4f} ({mark})", file=out)
    print(f"\ndemo finished in {outcome.wall_seconds:.0f}s; charts (loss and accuracy curves):", file=out)
    for _, task_name in FRAMEWORK_TASKS:
        print(f"  {outcome.task(task_name).reports.get('report', '(missing)')}", file=out)
    if "summary_html" in summary.reports:
        print(f"  comparison: {summary.reports['summary_html']}", file=out)
    if args.json:
        print(json.dumps(outcome.to_json()))
    return 0
