"""`kubetrain demo`: compare PyTorch DDP, ChainerMN and parameter servers on the built-in digits.

Runs the `compare_frameworks` pipeline on this machine (as `kubetrain run compare_frameworks`
would): one download, three distributed training jobs on the local backend, one comparison
table. Prints the table, each framework's test accuracy, the wall time and where the HTML
reports with the loss and accuracy curves are. Needs no network and no cluster.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from kubetrain.commands.run import add_run_options, single_threaded_defaults
from kubetrain.errors import ExitCode

PIPELINE = "compare_frameworks"
TARGET_ACCURACY = 0.95
FRAMEWORK_TASKS = (("pytorch", "pytorch-train"), ("chainermn", "chainermn-train"), ("ps", "ps-train"))


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the `demo` subcommand."""
    parser = subparsers.add_parser(
        "demo",
        help="run compare_frameworks on builtin:digits on this machine and print the comparison",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_run_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the demo pipeline; print the comparison and where the charts are."""
    from kubetrain.tooling.catalog import pipeline
    from kubetrain.tooling.local_run import describe, run_locally

    single_threaded_defaults()
    outcome = run_locally(
        pipeline(PIPELINE), {"dataset": "builtin:digits"}, runs_dir=args.runs_dir, logs_to_stderr=args.json
    )
    out = sys.stderr if args.json else sys.stdout
    print(describe(outcome), file=out)
    if outcome.state != "SUCCEEDED":
        print(f"\ndemo: the pipeline FAILED; the logs above and {outcome.run_dir} say why", file=out)
        if args.json:
            print(json.dumps(outcome.to_json()))
        return int(ExitCode.JOB_FAILED)
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
