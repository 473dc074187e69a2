"""Which backend a launcher step uses, and where it finds the workspace claim.

In a cluster the launcher pod has the workspace PVC mounted at :data:`WORKSPACE_MOUNT` (the
pipelines mount it with `kfp.kubernetes.mount_pvc`), and every job pod mounts the same claim at
the same path. On this machine (`kubetrain run`) the claim is the local backend's directory for
that claim, and the local backend rewrites the pods' mount paths to it; the launcher maps a
pod-side path to its local directory with :meth:`WorkspaceView.local`.

A step of the user's own (a plain `@dsl.component` taking the Dataset, or a Model's files that
name workspace paths) reaches the same data through :func:`resolve_workspace_path` (or
:func:`dataset_dir` for a Dataset artifact): the one rule that maps a pod-side path to where it
lies in this environment, the rule kubetrain's own steps use (:meth:`WorkspaceView.local`).

The backend comes from the environment: ``KUBETRAIN_BACKEND=local|kubernetes``; unset, it is
kubernetes inside a cluster (an in-cluster service account) and local anywhere else, so a
component run from its YAML under `kfp.local` trains on this machine. `kubetrain run` sets local
and ``KUBETRAIN_LOCAL_ROOT`` for every step it runs.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from kubetrain.backends import BACKEND_KINDS, BackendKind
from kubetrain.errors import InvalidInputError, SpecError
from kubetrain.kfp_runtime.artifacts import ArtifactLike
from kubetrain.presets import WORKSPACE_MOUNT
from kubetrain.specs import Workspace

BACKEND_ENV = "KUBETRAIN_BACKEND"
LOCAL_ROOT_ENV = "KUBETRAIN_LOCAL_ROOT"
# What the kubelet gives every pod with an automounted service account (client-go's InClusterConfig).
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
SERVICE_HOST_ENV = "KUBERNETES_SERVICE_HOST"
DEFAULT_CLAIM = "kubetrain-workspace"


def in_cluster(environ: Mapping[str, str] | None = None, *, service_account_dir: Path = SERVICE_ACCOUNT_DIR) -> bool:
    """True inside a pod that can reach its API server: the service host is set and a token is mounted."""
    env = os.environ if environ is None else environ
    return bool(env.get(SERVICE_HOST_ENV)) and (service_account_dir / "token").is_file()


def backend_kind(
    environ: Mapping[str, str] | None = None, *, service_account_dir: Path = SERVICE_ACCOUNT_DIR
) -> BackendKind:
    """The backend named by ``KUBETRAIN_BACKEND``; unset: kubernetes in a cluster, local elsewhere."""
    env = os.environ if environ is None else environ
    default = "kubernetes" if in_cluster(env, service_account_dir=service_account_dir) else "local"
    value = env.get(BACKEND_ENV, "").strip().lower() or default
    if value not in BACKEND_KINDS:
        raise InvalidInputError(f"{BACKEND_ENV}: got {value!r}; expected one of {', '.join(BACKEND_KINDS)}")
    return value


def local_root(environ: Mapping[str, str] | None = None) -> Path | None:
    """The local backend's root directory from ``KUBETRAIN_LOCAL_ROOT`` (None: the backend's default)."""
    env = os.environ if environ is None else environ
    value = env.get(LOCAL_ROOT_ENV, "").strip()
    return Path(value) if value else None


@dataclass(frozen=True, kw_only=True)
class WorkspaceView:
    """The workspace claim as the pods see it (`mount_path`) and as this process sees it (`local_dir`)."""

    claim: str
    local_dir: Path
    mount_path: str = WORKSPACE_MOUNT

    def pod(self, *parts: str) -> str:
        """A path inside the pods, under the mount path."""
        return posixpath.join(self.mount_path, *parts)

    def local(self, pod_path: str) -> Path:
        """Where a pod-side path under the mount path lies for this process."""
        normalized = posixpath.normpath(pod_path)
        if normalized == self.mount_path:
            return self.local_dir
        prefix = self.mount_path.rstrip("/") + "/"
        if not normalized.startswith(prefix):
            raise InvalidInputError(
                f"{pod_path!r} is not on the workspace volume; expected a path under {self.mount_path}"
            )
        return self.local_dir.joinpath(*normalized[len(prefix) :].split("/"))


def local_claim_dir(root: Path | None, claim: str) -> Path:
    """The local backend's directory for a PVC claim."""
    from kubetrain.backends.local.backend import claim_directory

    return claim_directory(root, claim)


def open_workspace(claim: str, *, kind: BackendKind, environ: Mapping[str, str] | None = None) -> WorkspaceView:
    """The workspace view for `claim` on backend `kind`; refuses a cluster pod without the claim mounted."""
    try:
        Workspace(claim_name=claim, mount_path=WORKSPACE_MOUNT)
    except SpecError as e:
        raise InvalidInputError(f"workspace_pvc: got {claim!r}; expected the name of a PersistentVolumeClaim") from e
    if kind == "local":
        directory = local_claim_dir(local_root(environ), claim)
        directory.mkdir(parents=True, exist_ok=True)
        return WorkspaceView(claim=claim, local_dir=directory)
    mount = Path(WORKSPACE_MOUNT)
    if not os.path.ismount(mount):
        raise InvalidInputError(
            f"the workspace claim {claim!r} is not mounted at {WORKSPACE_MOUNT} in this launcher pod; mount it on "
            f"the task: kfp.kubernetes.mount_pvc(task, pvc_name=..., mount_path={WORKSPACE_MOUNT!r}) "
            "(the kubetrain pipelines do this), or run with KUBETRAIN_BACKEND=local"
        )
    return WorkspaceView(claim=claim, local_dir=mount)


def resolve_workspace_path(path: str, *, claim: str = DEFAULT_CLAIM, environ: Mapping[str, str] | None = None) -> Path:
    """Where `path`, a path on the workspace volume as the pods see it (`/workspace/...`), lies here.

    In a cluster that is `path` itself, provided the claim is mounted at /workspace on this step
    (`kfp.kubernetes.mount_pvc(task, pvc_name=claim, mount_path="/workspace")`); on this machine
    (`kubetrain run`, `kfp.local`) it is the local backend's directory of `claim` (under
    ``$KUBETRAIN_LOCAL_ROOT``). The backend is chosen as for kubetrain's own steps
    (``KUBETRAIN_BACKEND``, else in a cluster or not). Raises InvalidInputError for a path outside
    /workspace or, in a cluster, when the claim is not mounted.
    """
    if not isinstance(path, str) or not path.startswith("/"):
        raise InvalidInputError(f"path: got {path!r}; expected an absolute path under {WORKSPACE_MOUNT}")
    return open_workspace(claim, kind=backend_kind(environ), environ=environ).local(path)


def dataset_dir(dataset: ArtifactLike, *, environ: Mapping[str, str] | None = None) -> Path:
    """The data set directory of a `download_dataset` Dataset artifact, where it lies in this environment.

    Reads the artifact's metadata (`path` on claim `workspace_pvc`) and resolves it with
    :func:`resolve_workspace_path`; the directory holds `dataset.json` and the shards
    (:mod:`kubetrain.data.dataset_format` reads them).
    """
    meta = dataset.metadata or {}
    path, claim = meta.get("path"), meta.get("workspace_pvc") or DEFAULT_CLAIM
    if not isinstance(path, str) or not path:
        raise InvalidInputError(
            f"dataset: the artifact's metadata has no 'path' (got {sorted(meta)}); pass the Dataset output of "
            "download_dataset"
        )
    return resolve_workspace_path(path, claim=str(claim), environ=environ)
