"""`kubetrain launch -f MANIFEST`: submit a job manifest and follow it to its end.

Runs on the Kubernetes API by default (in-cluster config, else kubeconfig), or with `--local` on
this machine. The exit code says how it ended (kubetrain.errors.ExitCode): 0 succeeded, 1 failed,
2 invalid input (nothing submitted), 3 timed out (job deleted or suspended), 4 API errors after
retries, 5 cancelled by SIGTERM/SIGINT (job deleted).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from pathlib import Path
from typing import Any, cast

import yaml

from kubetrain.backends import open_backend
from kubetrain.backends.base import Backend
from kubetrain.errors import ExitCode, InvalidInputError, JobFailedError, ManifestError
from kubetrain.launcher import DELETE_AFTER_CHOICES, ON_TIMEOUT_CHOICES, AwaitOptions, DeleteAfter, OnTimeout, run_job
from kubetrain.launcher.signals import hold_signals, ignore_signals
from kubetrain.manifests.kinds import kind_of
from kubetrain.status import JobPhase
from kubetrain.tooling.result_json import result_json

DEFAULT_TIMEOUT_SECONDS = 24 * 3600
# What `launch --json` reports of the job after the head: a JobResult's keys.
_JOB_KEYS = ("name", "namespace", "kind", "uid", "phase", "reason", "message", "start_time", "completion_time",
             "duration_seconds", "restarts", "backend")  # fmt: skip


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the `launch` subcommand."""
    parser = subparsers.add_parser(
        "launch",
        help="submit a job manifest and follow it to its end",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-f", "--filename", required=True, metavar="MANIFEST", help="YAML or JSON file, '-' for stdin")
    parser.add_argument("--local", action="store_true", help="run on this machine instead of a cluster")
    parser.add_argument("--local-root", type=Path, default=None, metavar="DIR", help="working directory of --local")
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_SECONDS,
        metavar="SECONDS",
        help=f"overall limit; then the job is deleted or suspended (default {DEFAULT_TIMEOUT_SECONDS})",
    )
    parser.add_argument(
        "--start-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="limit on reaching Running (an image that never pulls, a pod that never schedules); "
        "then the job is deleted or suspended as for --timeout. 0: no limit, as the components' "
        "start_timeout_seconds=0 (a job a queue such as Kueue holds suspended has no pods until admitted)",
    )
    parser.add_argument(
        "--delete-after",
        choices=DELETE_AFTER_CHOICES,
        default="success",
        help="delete the job when it ends: never, success (default; failed jobs stay), always",
    )
    parser.add_argument(
        "--on-timeout",
        choices=ON_TIMEOUT_CHOICES,
        default="delete",
        help="what to do with a job that hits --timeout (default delete)",
    )
    parser.add_argument("--namespace", "-n", default=None, help="namespace (default: the manifest's, else the pod's)")
    parser.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: in-cluster, else ~/.kube/config)")
    parser.add_argument("--context", default=None, help="kubeconfig context")
    parser.add_argument("--owner-pod", action="store_true",
                        help="make the launcher pod (POD_NAME/POD_UID from the downward API) own the job")  # fmt: skip
    parser.add_argument("--no-logs", action="store_true", help="do not follow the primary pod's log")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="server-side dry run (Strict field validation, webhooks, defaults): print the object, create nothing",
    )
    parser.add_argument("--json", action="store_true", help="end with one JSON object on stdout")
    parser.set_defaults(func=run)


def load_manifest(source: str) -> dict[str, Any]:
    """The one job manifest in a YAML/JSON file (or stdin for '-')."""
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    except OSError as e:
        raise InvalidInputError(f"cannot read manifest {source}: {e}") from e
    except UnicodeDecodeError as e:
        raise ManifestError(source, f"not UTF-8 text (byte {e.start}: {e.reason}); save the manifest as UTF-8") from e
    try:
        documents = [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as e:
        raise ManifestError(source, f"not valid YAML/JSON: {e}") from e
    if len(documents) != 1:
        raise ManifestError(source, f"expected exactly one job object, found {len(documents)} YAML documents")
    if not isinstance(documents[0], dict):
        found = "a list" if isinstance(documents[0], list) else type(documents[0]).__name__
        raise ManifestError(source, f"expected one job object (a mapping with apiVersion, kind, ...), found {found}")
    return cast(dict[str, Any], documents[0])


def apply_namespace(manifest: dict[str, Any], namespace: str | None) -> dict[str, Any]:
    """The manifest with `--namespace` applied; a different namespace in the manifest is an error."""
    if namespace is None:
        return manifest
    metadata = dict(manifest.get("metadata") or {})
    current = metadata.get("namespace")
    if current and current != namespace:
        raise ManifestError(
            "metadata.namespace", f"the manifest says {current!r} but --namespace says {namespace!r}; drop one"
        )
    metadata["namespace"] = namespace
    return {**manifest, "metadata": metadata}


def make_backend(args: argparse.Namespace) -> Backend:
    """The backend the flags ask for."""
    return open_backend(
        "local" if args.local else "kubernetes",
        namespace=args.namespace,
        local_root=args.local_root,
        kubeconfig=args.kubeconfig,
        context=args.context,
        owner_pod=args.owner_pod,
    )


def say_missing_data(manifest: dict[str, Any], backend: Backend) -> None:
    """Locally, name the directory of a data set the job would find missing or empty, before it starts."""
    from kubetrain.backends.local.backend import LocalBackend  # only --local needs the local backend
    from kubetrain.backends.local.data_notice import missing_data_notice

    if isinstance(backend, LocalBackend) and (notice := missing_data_notice(manifest, backend.claim_dir)):
        print(notice, file=sys.stderr, flush=True)


def dry_run(args: argparse.Namespace, manifest: dict[str, Any]) -> int:
    """Print what the API server would store for `manifest`; nothing is created."""
    if args.local:
        raise InvalidInputError("--dry-run asks the API server; it cannot be combined with --local")
    # No owner reference: a dry run creates nothing for the launcher pod to own.
    backend = open_backend("kubernetes", namespace=args.namespace, kubeconfig=args.kubeconfig, context=args.context)
    try:
        obj = backend.dry_run(manifest)
    finally:
        backend.close()
    print(
        json.dumps(obj, indent=2) if args.json else yaml.safe_dump(obj, sort_keys=False), end="\n" if args.json else ""
    )
    return 0


def run(args: argparse.Namespace) -> int:
    """Launch the manifest and return the exit code."""
    cancel = hold_signals()
    try:
        # An error ends in the CLI, which prints its JSON object with --json (kubetrain.cli.error_json).
        return _launch(args, cancel)
    finally:
        # The outcome is decided; the CLI prints it next and exits. A late signal must not turn it into 143.
        ignore_signals()


def job_fields(manifest: dict[str, Any] | None = None, **known: Any) -> dict[str, Any]:
    """The keys of `launch --json` after the head (a JobResult's), null unless known: the manifest's names first."""
    metadata = (manifest or {}).get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    fields: dict[str, Any] = dict.fromkeys(_JOB_KEYS)
    fields.update(name=metadata.get("name"), namespace=metadata.get("namespace"), kind=(manifest or {}).get("kind"))
    return {**fields, **known}


def await_options(args: argparse.Namespace) -> AwaitOptions:
    """How `launch` awaits its job, from its flags (`--start-timeout 0`: no limit on starting)."""
    return AwaitOptions(
        timeout_seconds=args.timeout,
        delete_after=cast(DeleteAfter, args.delete_after),
        on_timeout=cast(OnTimeout, args.on_timeout),
        stream_logs=not args.no_logs,
        start_timeout_seconds=args.start_timeout if args.start_timeout != 0 else None,
    )


def _launch(args: argparse.Namespace, cancel: threading.Event) -> int:
    # An error ends in the CLI, whose JSON object (with --json) has the job's keys as far as they are known.
    args.json_fields = job_fields(backend="local" if args.local else "kubernetes")
    manifest = apply_namespace(load_manifest(args.filename), args.namespace)
    args.json_fields = job_fields(manifest, backend=args.json_fields["backend"])
    kind_of(manifest)
    if args.dry_run:
        return dry_run(args, manifest)
    backend = make_backend(args)
    try:
        say_missing_data(manifest, backend)
        result = run_job(
            manifest,
            backend=backend,
            options=await_options(args),
            cancel=cancel,
        )
    except JobFailedError as e:
        args.json_fields = {**args.json_fields, "phase": JobPhase.FAILED.value, "reason": e.reason or None}
        raise
    finally:
        backend.close()
    if args.json:
        print(json.dumps(result_json(state="SUCCEEDED", exit_code=ExitCode.SUCCESS, fields=result.to_json())))
    return 0
