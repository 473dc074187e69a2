"""The Kubeflow Pipelines 2.17 web UI beside the e2e tier's backend: KFP's own Node server, as a host process.

tools/ui/build.sh builds the frontend of the pinned KFP archive (cached by its pins); the server
(`node server/dist/server.js <static dir> <port>`) serves the page and proxies what the page asks
for, as `ml-pipeline-ui` does in a cluster:
- `/apis/v1beta1/*` and `/apis/v2beta1/*` to the API server's HTTP port;
- `/ml_metadata.*` (gRPC-web) to the MLMD server's gRPC-web listener (mlmd_server.py --grpc-web),
  which stands where Envoy stands in a cluster;
- artifacts from the S3 store: the endpoint inside an artifact's provider info
  (`seaweedfs.kubeflow:9000`, the launcher's default) and in Argo's log archive
  (`seaweedfs.kubeflow.svc:9000`) is rewritten to the store's host address;
- pod logs, the artifact Secret and Argo Workflows through Kubernetes, as KFP's `ml-pipeline-ui`
  service account with upstream's Role (applied from the archive's manifests, not retyped), so a
  permission the UI lacks shows up here as it would on a cluster.

Its URL is written alone on one line to `<state>/kfp-ui` (`.cluster/kfp-ui`).
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tools.cluster import build_script, operators, processes

REPO_ROOT = Path(__file__).resolve().parents[3]
BUILD_SCRIPT = REPO_ROOT / "tools" / "ui" / "build.sh"
UI_PORT = 18390
GRPC_WEB_PORT = 18391  # MLMD's gRPC-web listener, on loopback: only the UI server calls it
ACCOUNT = "ml-pipeline-ui"
URL_FILE = "kfp-ui"
PROCESS = "kfp-ui"
# Relative to the KFP source tree (tools/kfp/build.sh extracts it).
UI_FILES = tuple(
    f"manifests/kustomize/base/pipeline/ml-pipeline-ui-{part}.yaml" for part in ("sa", "role", "rolebinding")
)
# Where the project's Argo configmap puts step logs (manifests.workflow_controller_config's keyFormat).
ARGO_KEYFORMAT = "private-artifacts/{{workflow.namespace}}/{{workflow.name}}/{{pod.name}}"
# The store's names inside a run's records: the launcher's default provider info and Argo's repository.
STORE_NAMES = ("seaweedfs.kubeflow:9000", "seaweedfs.kubeflow.svc:9000", "seaweedfs.kubeflow.svc.cluster.local:9000")


class UIError(RuntimeError):
    """The UI could not be built or started; the message says which step and where its log is."""


@dataclass(frozen=True)
class Addresses:
    """Where the UI server finds the backend's pieces (host:port each, as the host reaches them)."""

    api_host: str
    api_port: int
    grpc_web_host: str
    grpc_web_port: int
    s3_host: str
    s3_port: int

    def __post_init__(self) -> None:
        for field in ("api_port", "grpc_web_port", "s3_port"):
            port = getattr(self, field)
            if not 0 < port < 65536:
                raise UIError(f"Addresses.{field}={port} is not a TCP port; give one in 1..65535")
        for field in ("api_host", "grpc_web_host", "s3_host"):
            if not getattr(self, field) or ":" in getattr(self, field):
                raise UIError(f"Addresses.{field}={getattr(self, field)!r}: give a host name or IPv4 address, "
                              "without a port")  # fmt: skip


def server_env(base: Mapping[str, str], at: Addresses, *, kubeconfig: Path, namespace: str, bucket: str,
               access_key: str, secret_key: str) -> dict[str, str]:  # fmt: skip
    """The UI server's environment: `base` plus every variable of frontend/server/configs.ts it needs here."""
    store = f"{at.s3_host}:{at.s3_port}"
    return {
        **base,
        "ML_PIPELINE_SERVICE_HOST": at.api_host, "ML_PIPELINE_SERVICE_PORT": str(at.api_port),
        "ML_PIPELINE_SERVICE_SCHEME": "http",
        "METADATA_ENVOY_SERVICE_SERVICE_HOST": at.grpc_web_host,
        "METADATA_ENVOY_SERVICE_SERVICE_PORT": str(at.grpc_web_port),
        "METADATA_ENVOY_SERVICE_SERVICE_SCHEME": "http",
        # The server dials `${MINIO_HOST}.${MINIO_NAMESPACE}`: an empty namespace keeps the address as is.
        "MINIO_HOST": at.s3_host, "MINIO_PORT": str(at.s3_port), "MINIO_NAMESPACE": "", "MINIO_SSL": "false",
        "MINIO_ACCESS_KEY": access_key, "MINIO_SECRET_KEY": secret_key,
        "MINIO_ENDPOINT_REWRITE": ",".join(f"{name}={store}" for name in STORE_NAMES),
        # The only namespace whose Secrets (the artifact keys) it reads; in a pod it is its own.
        "FRONTEND_SERVER_NAMESPACE": namespace,
        "KUBECONFIG": str(kubeconfig),
        "ARGO_ARCHIVE_LOGS": "true", "ARGO_ARCHIVE_ARTIFACTORY": "minio", "ARGO_ARCHIVE_BUCKETNAME": bucket,
        "ARGO_KEYFORMAT": ARGO_KEYFORMAT,
        "DISABLE_GKE_METADATA": "true", "ENABLE_AUTHZ": "false",
    }  # fmt: skip


def server_argv(node: Path, app: Path, port: int) -> list[str]:
    """`node server/dist/server.js <static dir> <port>` of the built app."""
    return [str(node), str(app / "server" / "dist" / "server.js"), str(app / "build"), str(port)]


def url(port: int = UI_PORT) -> str:
    """The page's address on this machine."""
    return f"http://127.0.0.1:{port}"


def node_binary() -> Path:
    """Node.js on PATH (the build needs it too)."""
    found = shutil.which("node")
    if found is None:
        raise UIError("the KFP UI server needs Node.js (20.19 or later) on PATH: apt-get install nodejs npm")
    return Path(found)


def build(log: Path | None = None) -> Path:
    """The built app (build/ and server/), built first if missing (tools/ui/build.sh, minutes cold)."""
    try:
        return build_script.build(BUILD_SCRIPT, log)
    except build_script.BuildScriptError as e:
        raise UIError(str(e)) from e


def built() -> Path | None:
    """The cached app if it is built (for tests that must not build it), else None."""
    app = build_script.printed_folder(BUILD_SCRIPT, "--print-dir")
    return app if app is not None and (app / ".ready").exists() else None


def upstream_files(kfp_src: Path) -> list[Path]:
    """KFP's `ml-pipeline-ui` ServiceAccount, Role and RoleBinding, as the archive ships them."""
    files = [kfp_src / f for f in UI_FILES]
    missing = [str(f) for f in files if not f.exists()]
    if missing:
        raise UIError(f"KFP's UI RBAC manifests are missing from the source tree: {missing}")
    return files


def write_url(state: Path, port: int = UI_PORT) -> Path:
    """`<state>/kfp-ui`: the UI's URL alone on one line."""
    path = state / URL_FILE
    path.write_text(url(port) + "\n")
    return path


def read_url(state: Path) -> str | None:
    """The URL `up` wrote, or None when the UI is not part of this cluster."""
    path = state / URL_FILE
    return path.read_text().strip() if path.exists() else None


def enabled(env: Mapping[str, str] | None = None) -> bool:
    """Whether the KFP tier starts the UI (`KUBETRAIN_KFP_UI`, on unless "0")."""
    return (os.environ if env is None else env).get("KUBETRAIN_KFP_UI", "1") != "0"


def healthy(port: int = UI_PORT) -> bool:
    """Whether the UI server answers and reaches the API server (its /apis/v2beta1/healthz says so)."""
    try:
        with urllib.request.urlopen(f"{url(port)}/apis/v2beta1/healthz", timeout=3) as reply:
            return bool(json.loads(reply.read()).get("apiServerReady"))
    except (urllib.error.URLError, OSError, ValueError):
        return False


def start(run: Path, app: Path, kfp_src: Path, *, apply: Callable[[Path], None],
          kubeconfig_for: Callable[[str], Path], at: Addresses, namespace: str, bucket: str, access_key: str,
          secret_key: str, port: int = UI_PORT, state: Path | None, process: str = PROCESS,
          extra_env: Mapping[str, str] | None = None) -> str:  # fmt: skip
    """Apply KFP's UI RBAC, start the UI server as `ml-pipeline-ui`, wait until it reaches the API; its URL.

    `apply` applies one manifest file in the namespace; `kubeconfig_for` makes a service account's
    kubeconfig. With `state`, the URL is also written to `<state>/kfp-ui`. A second server (the
    multi-user tier's) runs as another `process` with its `extra_env` and no URL file.
    """
    for path in upstream_files(kfp_src):
        apply(path)
    env = server_env(os.environ, at, kubeconfig=kubeconfig_for(ACCOUNT), namespace=namespace, bucket=bucket,
                     access_key=access_key, secret_key=secret_key)  # fmt: skip
    env.update(extra_env or {})
    log = run / ("ui.log" if process == PROCESS else f"{process}.log")
    processes.start(run, process, server_argv(node_binary(), app, port), env=env, log=log, cwd=run)
    operators.wait_for(f"the KFP UI server ({process})", lambda: healthy(port), 120, log)
    if state is not None:
        write_url(state, port)
    return url(port)
