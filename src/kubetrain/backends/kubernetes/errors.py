"""How the API server's answers become kubetrain errors: HTTP status → error class and message.

One place decides which statuses mean a bad manifest (exit 2), missing RBAC, a missing CRD or an
infrastructure failure, so every call of the backend words them alike.
"""

from __future__ import annotations

import json

from kubernetes.client.exceptions import ApiException

from kubetrain.backends.base import JobObject, JobRef
from kubetrain.errors import BackendError, JobFailedError, ManifestError
from kubetrain.manifests.kinds import JobKind
from kubetrain.urls import redact_credentials

OPERATORS = {"kubeflow.org": "the Kubeflow training-operator / mpi-operator", "jobset.x-k8s.io": "JobSet"}


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


def api_message(error: ApiException) -> str:
    """The `message` of the Status object in an error response, else its reason; credentials redacted.

    A proxy or webhook in front of the API server may answer with the request's headers (the
    kubeconfig's bearer token) in its body, and every error of the backend quotes this text.
    """
    # Redacted before it is cut (a cut could leave a credential too short to be recognised), and on
    # one line: a proxy's page would otherwise spread an error over many.
    return " ".join(redact_credentials(_message(error)).split())[:500]


def _message(error: ApiException) -> str:
    body = error.body
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if isinstance(body, str) and body:
        try:
            status = json.loads(body)
        except ValueError:
            return body.strip()
        if isinstance(status, dict) and status.get("message"):
            return str(status["message"])
    return str(error.reason or f"HTTP {error.status}")
