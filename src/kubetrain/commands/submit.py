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
Exit codes: 0 submitted, 2 invalid input (nothing sent), 4 the KFP API could not be reached,
refused the credentials (HTTP 401/403), is not there (404) or failed.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from kubetrain.commands.run import add_pipeline_argument
from kubetrain.tooling.submit import TOKEN_ENV


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
    parser.add_argument("--json", action="store_true", help="end with one JSON object on stdout")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Submit and print the run URL."""
    from kubetrain.tooling.params import parse_params, pipeline_inputs
    from kubetrain.tooling.sources import load_pipeline
    from kubetrain.tooling.submit import SubmitRequest, submit

    loaded = load_pipeline(args.pipeline, pipeline_func=args.pipeline_func)
    params = parse_params(args.param, pipeline_inputs(loaded.pipeline))
    token = args.token or (os.environ.get(TOKEN_ENV) if not args.token_file else None) or None
    result = submit(
        SubmitRequest(
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
    )
    what = "uploaded" if result.uploaded == "pipeline" else "uploaded a new version of"
    print(f"{what} pipeline {result.pipeline_name} ({result.pipeline_id}, version {result.version_id})")
    print(f"run {result.run_id}: {result.run_url}")
    if args.json:
        print(json.dumps(result.to_json()))
    return 0
