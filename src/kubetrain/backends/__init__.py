"""Where a job manifest runs: the `Backend` interface and its two implementations.

- `kubernetes`: the real API server (the only package that imports the Kubernetes client);
- `local`: processes on this machine, imitating the operators.

:func:`open_backend` is the one place that picks and builds one; both are imported only when
chosen, since each pulls in heavy dependencies the other does not need.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from kubetrain.backends.base import Backend
from kubetrain.errors import InvalidInputError
from kubetrain.names import is_dns1123_label

BackendKind = Literal["kubernetes", "local"]
BACKEND_KINDS: tuple[BackendKind, ...] = ("kubernetes", "local")


def check_namespace(namespace: str | None) -> str | None:
    """`namespace` if it is a valid namespace name (None: the backend's default)."""
    if namespace is None or namespace == "":
        return None
    if not is_dns1123_label(namespace):
        raise InvalidInputError(
            f"namespace: got {namespace!r}; expected a namespace name (lower-case letters, digits and '-', "
            "at most 63 characters, starting and ending with a letter or digit)"
        )
    return namespace


def open_backend(
    kind: str,
    *,
    namespace: str | None = None,
    local_root: Path | str | None = None,
    kubeconfig: str | None = None,
    context: str | None = None,
    owner_pod: bool = False,
) -> Backend:
    """A backend of `kind` ("kubernetes" or "local") for jobs in `namespace` (None: its default).

    The local backend's own log printing stays off: the launcher follows the primary pod's log as it
    does on a cluster, and both together would print every line twice.
    """
    if kind not in BACKEND_KINDS:
        raise InvalidInputError(f"backend: got {kind!r}; expected one of {', '.join(BACKEND_KINDS)}")
    namespace = check_namespace(namespace)
    if kind == "local":
        from kubetrain.backends.local.backend import LocalBackend

        return LocalBackend(root=local_root, stream_logs=False, namespace=namespace or "default")
    from kubetrain.backends.kubernetes import KubernetesBackend

    return KubernetesBackend(namespace=namespace, kubeconfig=kubeconfig, context=context, owner_pod=owner_pod)
