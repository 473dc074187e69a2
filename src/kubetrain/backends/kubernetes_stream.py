"""Streams and errors of the Kubernetes backend: watch/log line framing, watch state, error mapping."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException

from kubetrain.backends.base import JobObject, JobRef
from kubetrain.backends.kubernetes_retry import api_message
from kubetrain.errors import BackendError, JobFailedError, ManifestError
from kubetrain.manifests.kinds import JobKind

OPERATORS = {"kubeflow.org": "the Kubeflow training-operator / mpi-operator", "jobset.x-k8s.io": "JobSet"}


@dataclass
class WatchState:
    """The last object a watch delivered and the resourceVersion to resume from."""

    obj: JobObject
    resource_version: str


def create_error(kind: JobKind, body: JobObject, e: ApiException) -> Exception:
    """The error for a failed create: bad manifest (exit 2), RBAC, missing CRD, or other."""
    meta = body["metadata"]
    label = f"{kind.kind} {meta['namespace']}/{meta['name']}"
    message = api_message(e)
    if e.status in (400, 422):
        return ManifestError(label, f"rejected by the API server (HTTP {e.status}): {message}")
    if e.status == 403:
        return BackendError(
            f"create {label}: forbidden: {message}; grant the launcher's service account the Role in deploy/rbac.yaml"
        )
    if e.status == 404:
        return BackendError(
            f"create {label}: the API server does not serve {kind.api_version} {kind.plural} "
            f"({message}); is {OPERATORS.get(kind.group, 'its operator')} installed?"
        )
    return BackendError(f"create {label}: HTTP {e.status}: {message}")


def api_error(what: str, e: ApiException) -> BackendError:
    """A non-transient API error as a BackendError naming the call."""
    hint = "; the launcher's service account needs the Role in deploy/rbac.yaml" if e.status == 403 else ""
    return BackendError(f"{what}: HTTP {e.status}: {api_message(e)}{hint}")


def deleted_error(ref: JobRef) -> JobFailedError:
    """The job vanished while the launcher waited for it."""
    return JobFailedError(
        f"{ref.kind.kind} {ref.namespace}/{ref.name} was deleted while the launcher waited for it "
        "(by a person, a controller or the garbage collector)",
        reason="Deleted",
    )


def stream_lines(response: Any) -> Iterator[bytes]:
    """Complete lines of a streamed HTTP body, as soon as each arrives."""
    buffer = b""
    for chunk in response.stream(amt=None, decode_content=False):
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        yield from complete
    if buffer:
        yield buffer


def json_lines(response: Any) -> Iterator[dict[str, Any]]:
    """Watch events: one JSON object per line."""
    for line in stream_lines(response):
        if line.strip():
            yield json.loads(line)
