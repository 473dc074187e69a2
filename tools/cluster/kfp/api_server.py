"""KFP's API server as a host process: its configuration, environment and start, for either tier.

The standalone backend runs one (tools/cluster/kfp/backend.py); the multi-user tier runs a second
from the same binary with `MULTIUSER=true` (tools/cluster/kfp/multiuser.py). Each has its own host
ports and its own Service name, which the server compiles into every step's driver and launcher.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tools.cluster import operators, processes
from tools.cluster.kfp import http_probe, manifests, mariadb

KFP_PINS = Path(__file__).resolve().parents[2] / "kfp" / "pins.env"


@dataclass(frozen=True)
class ApiServerPorts:
    """Where one API server listens (host ports, all interfaces) and the Service its steps call it by."""

    grpc: int
    http: int
    webhook: int
    service: str = "ml-pipeline"

    def described(self, tier: str) -> dict[int, str]:
        """Each host port and what binds it, for the free-port check."""
        return {self.grpc: f"the {tier} KFP API server (gRPC)", self.http: f"the {tier} KFP API server (HTTP)",
                self.webhook: f"the {tier} KFP API server (webhook)"}  # fmt: skip


@dataclass(frozen=True)
class ObjectStore:
    """The S3 store the server writes pipeline packages to."""

    host: str
    port: int


def config(upstream: Path) -> str:
    """KFP's config.json without its default mlflow plugin (no mlflow here: it warns on every run)."""
    loaded = json.loads(upstream.read_text())
    loaded.pop("plugins", None)
    return json.dumps(loaded, indent=2)


def kfp_version() -> str:
    """The KFP release the backend is built from (KFP_VERSION in tools/kfp/pins.env)."""
    for line in KFP_PINS.read_text().splitlines():
        if line.startswith("KFP_VERSION="):
            return line.split("=", 1)[1].strip()
    raise KeyError(f"KFP_VERSION in {KFP_PINS}")


def environment(kubeconfig: Path, store: ObjectStore, at: ApiServerPorts, extra: Mapping[str, str]) -> dict[str, str]:
    """The server's environment (without the process's own): KFP's deployment's, for this host."""
    env = {
        "KUBECONFIG": str(kubeconfig), "POD_NAMESPACE": manifests.NAMESPACE, "CLUSTER_DOMAIN": "cluster.local",
        "DB_DRIVER_NAME": "mysql", "DBCONFIG_MYSQLCONFIG_HOST": "127.0.0.1",
        "DBCONFIG_MYSQLCONFIG_PORT": str(mariadb.PORT), "DBCONFIG_MYSQLCONFIG_USER": mariadb.USER,
        "DBCONFIG_MYSQLCONFIG_PASSWORD": mariadb.PASSWORD,
        "OBJECTSTORECONFIG_HOST": store.host, "OBJECTSTORECONFIG_PORT": str(store.port),
        "OBJECTSTORECONFIG_SECURE": "false", "OBJECTSTORECONFIG_BUCKETNAME": manifests.BUCKET,
        "OBJECTSTORECONFIG_ACCESSKEY": manifests.S3_ACCESS_KEY,
        "OBJECTSTORECONFIG_SECRETACCESSKEY": manifests.S3_SECRET_KEY,
        "V2_DRIVER_IMAGE": manifests.DRIVER_IMAGE, "V2_LAUNCHER_IMAGE": manifests.LAUNCHER_IMAGE,
        "ML_PIPELINE_SERVICE_NAME": at.service,
        # Required at start although no visualization server is deployed (nothing here calls it).
        "ML_PIPELINE_VISUALIZATIONSERVER_SERVICE_HOST": "ml-pipeline-visualizationserver",
        "ML_PIPELINE_VISUALIZATIONSERVER_SERVICE_PORT": "8888",
        "LOG_LEVEL": "info", "PIPELINE_LOG_LEVEL": "1", "PUBLISH_LOGS": "true", "INITCONNECTIONTIMEOUT": "60s",
        # What /apis/v1beta1/healthz reports and the UI's sidebar shows as "Version" (upstream's
        # image sets it at build time; unset, the sidebar reads "Version: unknown").
        "TAG_NAME": kfp_version(),
    }  # fmt: skip
    return {**env, **extra}


def argv(binary: Path, config_dir: Path, at: ApiServerPorts) -> list[str]:
    """The server's command line. Its HTTP gateway dials "localhost" + the gRPC flag, so the flags
    are ":PORT" (all interfaces)."""
    return [str(binary), f"--config={config_dir}", f"--rpcPortFlag=:{at.grpc}", f"--httpPortFlag=:{at.http}",
            f"--webhookPortFlag=:{at.webhook}", "--logtostderr=true"]  # fmt: skip


def start(bins: Path, run: Path, kubeconfig: Path, at: ApiServerPorts, *, name: str, store: ObjectStore,
          extra_env: Mapping[str, str] | None = None) -> None:  # fmt: skip
    """Start one API server as `name` (its log: run/<name>.log) and wait until it serves."""
    config_dir = run / f"{name}-config"
    config_dir.mkdir(exist_ok=True)
    upstream = manifests.kfp_tree(bins) / "backend" / "src" / "apiserver" / "config" / "config.json"
    (config_dir / "config.json").write_text(config(upstream))
    env = {**os.environ, **environment(kubeconfig, store, at, extra_env or {})}
    log = run / f"{name}.log"
    processes.start(run, name, argv(bins / "apiserver", config_dir, at), env=env, log=log, cwd=run)
    healthz = f"http://127.0.0.1:{at.http}/apis/v2beta1/healthz"
    operators.wait_for(f"the KFP API server ({name})", lambda: http_probe.answers(healthz, ok_only=True), 180, log)
