"""`kubetrain submit PIPELINE --host URL [--experiment NAME] [--param KEY=VALUE ...]`: run on Kubeflow Pipelines.

PIPELINE is a shipped pipeline's name, your own .py file defining a @dsl.pipeline function
(--pipeline-func NAME picks one of several), or a compiled pipeline .yaml; `kubetrain run PIPELINE
--list-params` lists its parameters. Compiles the pipeline (a .yaml is uploaded as it is), uploads
it (the first time) or a new version of it, ensures the experiment exists and starts a run, then
prints the run's URL. Authentication: --token (or $KUBETRAIN_KFP_TOKEN), --token-file (a
service-account token, re-read on every request), or kfp.Client's defaults (KF_PIPELINES_*
variables, kube config). A token is stripped of surrounding whitespace (a trailing newline); one
with a line break inside is refused, without printing it; so is a host URL with USER:PASSWORD@.
A host that cannot be reached (connection refused, a name that does not resolve, an untrusted
TLS certificate) or that is not a KFP API (HTTP 404) ends in one line.
--wait follows the run to its end (as kfp's wait_for_run_completion) and exits with its outcome.
Exit codes: 0 submitted (with --wait: the run succeeded), 1 the run failed, 2 invalid input
(nothing sent), 3 --wait's seconds passed (the run goes on), 4 the KFP API could not be reached,
refused the credentials (HTTP 401/403), is not there (404) or failed, 5 the run was cancelled.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from typing import Any

from kubetrain.commands.run import add_pipeline_argument
from kubetrain.errors import InvalidInputError
from kubetrain.tooling.submit import TOKEN_ENV

DEFAULT_WAIT_SECONDS = 24 * 3600.0
WAIT_POLL_SECONDS = 5.0


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the `submit` subcommand."""
    parser = subparsers.add_parser(
        "submit",
        help="upload a pipeline (a shipped one or your own .py/.yaml) to Kubeflow Pipelines and start a run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_pipeline_argument(parser)
    parser.add_argument("--host", required=True, metavar="URL", help="KFP API endpoint, e.g. http://localhost:8080")
    parser.add_argument("--experiment", default="kubetrain", metavar="NAME", help="experiment (default kubetrain)")
    parser.add_argument("--param", action="append", default=[], metavar="KEY=VALUE", help="pipeline parameter")
    parser.add_argument("--token", default=None, help=f"bearer token (default ${TOKEN_ENV})")
    parser.add_argument("--token-file", default=None, metavar="PATH", help="file holding a bearer token")
    parser.add_argument("--ca-cert", default=None, metavar="PATH", help="CA certificates (PEM) for an https host")
    parser.add_argument("--namespace", default=None, help="profile namespace of a multi-user deployment")
    parser.add_argument("--run-name", default=None, metavar="NAME", help="display name of the run")
    parser.add_argument("--version-name", default=None, metavar="NAME", help="name of the new pipeline version")
    parser.add_argument(
        "--wait",
        nargs="?",
        type=float,
        const=DEFAULT_WAIT_SECONDS,
        default=None,
        metavar="SECONDS",
        help=f"follow the run to its end (at most SECONDS, default {DEFAULT_WAIT_SECONDS:g}); exit with its outcome",
    )
    parser.add_argument("--json", action="store_true", help="end with one JSON object on stdout")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Submit and print the run URL."""
    from kubetrain.presets import WORKSPACE_MOUNT
    from kubetrain.tooling.dry_run import unmounted_workspace
    from kubetrain.tooling.params import parse_params, pipeline_inputs
    from kubetrain.tooling.result_json import result_json
    from kubetrain.tooling.sources import load_pipeline
    from kubetrain.tooling.submit import SubmitRequest, SubmitResult, follow_run, submit

    # An error ends in the CLI, whose JSON object (with --json) has these keys, null until known.
    args.json_fields = dict.fromkeys(f.name for f in dataclasses.fields(SubmitResult))
    loaded = load_pipeline(args.pipeline, pipeline_func=args.pipeline_func)
    params = parse_params(args.param, pipeline_inputs(loaded.pipeline))
    token = args.token or (os.environ.get(TOKEN_ENV) if not args.token_file else None) or None
    if args.wait is not None and not args.wait > 0:
        raise InvalidInputError(f"--wait: got {args.wait:g}; expected a positive number of seconds")
    request = SubmitRequest(
        pipeline=loaded,
        host=args.host,
        experiment=args.experiment,
        params=params,
        token=token,
        token_file=args.token_file,
        namespace=args.namespace,
        run_name=args.run_name,
        version_name=args.version_name,
        ca_cert=args.ca_cert,
    )
    warnings = [
        f"step {step}: mounts no workspace claim at {WORKSPACE_MOUNT}; on the cluster it fails when it starts: "
        f"kfp.kubernetes.mount_pvc(task, pvc_name=CLAIM, mount_path={WORKSPACE_MOUNT!r})"
        for step in unmounted_workspace(loaded.compile_text())
    ]
    for warning in warnings:
        print(f"kubetrain submit: warning: {warning}", file=sys.stderr, flush=True)
    result = submit(request)
    what = "uploaded" if result.uploaded == "pipeline" else "uploaded a new version of"
    print(f"{what} pipeline {result.pipeline_name} ({result.pipeline_id}, version {result.version_id})")
    print(f"run {result.run_id}: {result.run_url}", flush=True)
    if args.wait is None:
        if args.json:
            print(json.dumps(result_json(state="SUBMITTED", exit_code=0, warnings=warnings, fields=result.to_json())))
        return 0
    end = follow_run(
        request,
        result.run_id,
        timeout_seconds=args.wait,
        poll_seconds=WAIT_POLL_SECONDS,
        on_state=lambda state: print(f"run {result.run_id}: {state or 'state unknown'}", file=sys.stderr, flush=True),
    )
    said = f": {end.error}" if end.error else ""
    print(f"run {result.run_id} ended {end.state}{said}", flush=True)
    if args.json:
        fields = result.to_json()
        ended = result_json(state=end.state, exit_code=end.exit_code, error=end.error, warnings=warnings, fields=fields)
        print(json.dumps(ended))
    return end.exit_code
