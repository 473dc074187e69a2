"""The real Kubeflow Pipelines 2.17 backend on the e2e cluster's real node: `make cluster-up` with KUBETRAIN_KFP=1.

Servers run as host processes, as the findings allowed: MariaDB (tools/cluster/kfp/mariadb.py),
the S3 store (SeaweedFS as KFP ships it, or moto: tools/cluster/kfp/object_store.py), ML Metadata
(tools/cluster/kfp/mlmd_server.py over the real MLMD library, also serving gRPC-web for the UI),
KFP's API server and Argo's workflow-controller, built from the pinned sources by
tools/kfp/build.sh, and KFP's web UI server (tools/cluster/kfp/ui.py; KUBETRAIN_KFP_UI=0 leaves it
out). What runs in pods in a cluster runs in pods here, on the real node: the
persistence agent (it needs its projected token), and every run's steps — Argo's executor, KFP's
driver and launcher, kubetrain's launcher image — from one-layer images of the static binaries
pushed to the node's registry under their upstream names. Pods reach the servers by their usual
names (`ml-pipeline.kubeflow`, `metadata-grpc-service.kubeflow:8080`, `seaweedfs.kubeflow:9000`)
through Services whose endpoints are the host as pods see it (tools/cluster/kfp/manifests.py).

The API server and the workflow-controller reach Kubernetes as their service accounts would
(`system:serviceaccount:kubeflow:ml-pipeline`, `...:argo`): client certificates for those names,
so the RBAC of KFP's and Argo's own manifests is what authorizes them. kubetrain's reaper runs the
same way, as `system:serviceaccount:kubeflow:kubetrain-reaper` under deploy/reaper.yaml's Role.
"""

from __future__ import annotations

import dataclasses
import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from tools.cluster import build_script, node_config, oci, operators, processes
from tools.cluster import manifests as cluster_manifests
from tools.cluster.kfp import (
    accounts,
    api_server,
    http_probe,
    manifests,
    mariadb,
    multiuser,
    object_store,
    services_venv,
    ui,
)
from tools.cluster.kfp.accounts import Control, reaper_identity
from tools.cluster.kfp.manifests import NAMESPACE, HostService, ServicePort

REPO_ROOT = Path(__file__).resolve().parents[3]
BUILD_SCRIPT = REPO_ROOT / "tools" / "kfp" / "build.sh"
STANDALONE = api_server.ApiServerPorts(grpc=18887, http=18888, webhook=18443)
API_GRPC_PORT = STANDALONE.grpc
API_HTTP_PORT = STANDALONE.http
MLMD_PORT = 18080
S3_PORT = 19000
# SeaweedFS's other listeners (each with its gRPC port 10000 above): none of the defaults is free here.
WEED_PORTS = object_store.WeedPorts(s3=S3_PORT, master=19333, volume=19080, filer=19888)
# The multi-user tier's SeaweedFS also serves its IAM API (each profile's keys are minted there).
MULTI_USER_WEED_PORTS = dataclasses.replace(WEED_PORTS, iam=18111)
ARGO_HEALTH_PORT = 6060  # hard-coded in workflow-controller v4.0.5
WORKSPACE_CLAIM = "kubetrain-workspace"


class BackendError(RuntimeError):
    """The KFP backend could not be built or started; the message says which piece and where its log is."""


@dataclass(frozen=True)
class Backend:
    """A running backend: where `kfp.Client` reaches it and where its logs are."""

    host: str
    run_dir: Path

    @property
    def logs(self) -> Path:
        """The servers' logs (one per process)."""
        return self.run_dir


def ports(store: str = object_store.DEFAULT, *, with_ui: bool = True, multi_user: bool = True) -> dict[int, str]:
    """Every host port the backend's processes bind, and which binds it."""
    bound = {
        **STANDALONE.described("standalone"), MLMD_PORT: "ML Metadata (gRPC)",
        ARGO_HEALTH_PORT: "Argo's workflow-controller (health)", mariadb.PORT: "MariaDB",
    }  # fmt: skip
    weed = MULTI_USER_WEED_PORTS if multi_user else WEED_PORTS
    bound.update(weed.described() if store == object_store.SEAWEEDFS else {S3_PORT: "the S3 store (moto)"})
    if multi_user:
        bound.update(multiuser.ports())
    if with_ui:
        bound.update({ui.UI_PORT: "the KFP UI server", ui.GRPC_WEB_PORT: "ML Metadata (gRPC-web, for the UI)"})
    return bound


def build(log: Path | None = None) -> Path:
    """The directory of the KFP and Argo binaries, built first if missing (tools/kfp/build.sh)."""
    try:
        return build_script.build(BUILD_SCRIPT, log)
    except build_script.BuildScriptError as e:
        raise BackendError(str(e)) from e


def running(state: Path) -> bool:
    """Whether this cluster's KFP API server is running."""
    return any(r.name == "kfp-apiserver" and processes.running(r) for r in processes.records(state / "kfp"))


def up(cluster: Control, state: Path) -> Backend:
    """Start every piece of the backend (on a cluster whose real node is up); wait until it serves."""
    run = state / "kfp"
    run.mkdir(parents=True, exist_ok=True)
    try:
        store, with_ui = object_store.choice(), ui.enabled()
        bins = build(run / "build.log")
        weed = object_store.build_weed(run / "seaweedfs-build.log") if store == object_store.SEAWEEDFS else None
        app = ui.build(run / "ui-build.log") if with_ui else None
    except (object_store.ObjectStoreError, ui.UIError) as e:
        raise BackendError(str(e)) from e
    venv = services_venv.ensure(run / "services-venv.log")
    multi_user = multiuser.enabled(store)
    processes.require_free(ports(store, with_ui=with_ui, multi_user=multi_user))
    mariadb.start(run)
    gateway = node_config.GATEWAY
    env = services_venv.environment()
    weed_ports = MULTI_USER_WEED_PORTS if multi_user else WEED_PORTS
    _start_store(run, venv, weed, env, weed_ports)
    mlmd = mlmd_argv(services_venv.python(venv), run, with_ui=with_ui)
    processes.start(run, "mlmd", mlmd, env=env, log=run / "mlmd.log", cwd=run)
    operators.wait_for("ML Metadata", lambda: http_probe.tcp_open(gateway, MLMD_PORT), 60, run / "mlmd.log")
    _apply_objects(cluster, bins, state)
    _push_images(bins)
    _start_workflow_controller(cluster, bins, run)
    _start_api_server(cluster, bins, run)
    accounts.start_reaper(cluster, run)
    cluster.kubectl("apply", "--server-side", "-f", "-", stdin=manifests.persistence_agent())
    cluster.kubectl("rollout", "status", "-n", NAMESPACE, "deployment/ml-pipeline-persistenceagent", "--timeout=180s")
    if multi_user:
        store_at = api_server.ObjectStore(gateway, S3_PORT)
        multiuser.up(cluster, bins, run, state, store=store_at, iam_url=f"http://{gateway}:{weed_ports.iam}", app=app)
    if app is not None:
        _start_ui(cluster, bins, run, app, state)
    return Backend(host=f"http://127.0.0.1:{API_HTTP_PORT}", run_dir=run)


def mlmd_argv(python: Path, run: Path, *, with_ui: bool) -> list[str]:
    """The MLMD server on the gateway (for the steps), with the UI's gRPC-web listener on loopback when the UI runs."""
    argv = [str(python), str(Path(__file__).with_name("mlmd_server.py")), "--host", node_config.GATEWAY,
            "--port", str(MLMD_PORT), "--sqlite", str(run / "mlmd.sqlite")]  # fmt: skip
    if with_ui:  # where Envoy answers them in a cluster
        argv += ["--grpc-web", f"127.0.0.1:{ui.GRPC_WEB_PORT}"]
    return argv


def _start_store(run: Path, venv: Path, weed: Path | None, env: dict[str, str],
                 weed_ports: object_store.WeedPorts) -> None:  # fmt: skip
    """SeaweedFS (`weed` given) or moto on the gateway's S3_PORT; wait until it serves S3 (and, with
    an IAM port, until the filer holds the admin identity that port's API checks)."""
    gateway = node_config.GATEWAY
    if weed is not None:
        keys = {"access_key": manifests.S3_ACCESS_KEY, "secret_key": manifests.S3_SECRET_KEY}
        argv = object_store.prepare_seaweedfs(run, weed, ip=gateway, ports=weed_ports, **keys)
        processes.start(
            run, "s3", argv, env=env, log=run / "s3.log", cwd=run, stop_grace_seconds=object_store.STOP_GRACE_S
        )
        ready = object_store.wait_ready_url(gateway, weed_ports)
        operators.wait_for(
            "the S3 store (SeaweedFS)", lambda: http_probe.answers(ready, ok_only=True), 120, run / "s3.log"
        )
        if weed_ports.iam is not None:
            object_store.put_admin_identity(gateway, weed_ports, **keys)
        return
    # Every client here addresses buckets by path; without this moto would read "seaweedfs" in
    # the Host header `seaweedfs.kubeflow.svc:9000` as a bucket name.
    moto_env = {**env, "S3_IGNORE_SUBDOMAIN_BUCKETNAME": "true"}
    processes.start(run, "s3", [str(services_venv.moto_server(venv)), "-H", gateway, "-p", str(S3_PORT)],
                    env=moto_env, log=run / "s3.log", cwd=run)  # fmt: skip
    operators.wait_for(
        "the S3 store (moto)", lambda: http_probe.answers(f"http://{gateway}:{S3_PORT}/"), 60, run / "s3.log"
    )


def _start_ui(cluster: Control, bins: Path, run: Path, app: Path, state: Path) -> None:
    at = ui.Addresses(api_host="127.0.0.1", api_port=API_HTTP_PORT, grpc_web_host="127.0.0.1",
                      grpc_web_port=ui.GRPC_WEB_PORT, s3_host=node_config.GATEWAY, s3_port=S3_PORT)  # fmt: skip

    def apply(path: Path) -> None:
        cluster.kubectl("apply", "--server-side", "-n", NAMESPACE, "-f", str(path))

    try:
        ui.start(run, app, manifests.kfp_tree(bins), apply=apply,
                 kubeconfig_for=lambda account: accounts.service_account_kubeconfig(cluster, run, account), at=at,
                 namespace=NAMESPACE, bucket=manifests.BUCKET, access_key=manifests.S3_ACCESS_KEY,
                 secret_key=manifests.S3_SECRET_KEY, state=state)  # fmt: skip
    except ui.UIError as e:
        raise BackendError(str(e)) from e


def _apply_objects(cluster: Control, bins: Path, state: Path) -> None:
    crds, files = manifests.upstream_files(manifests.kfp_tree(bins), manifests.argo_tree(bins))
    # A field manager of its own: the control plane applies a bare `kubeflow` (for the operators) as
    # "kubectl" on every `up`, which would otherwise take these labels and annotations away again.
    cluster.kubectl("apply", "--server-side", "--field-manager", "kubetrain-kfp-backend", "-f", "-", stdin=_namespace())
    for crd in crds:
        cluster.kubectl("apply", "--server-side", "-f", str(crd))
    for path in files:
        cluster.kubectl("apply", "--server-side", "-n", NAMESPACE, "-f", str(path))
    cluster.kubectl("apply", "--server-side", "-f", "-", stdin=manifests.argo_cluster_rbac(manifests.argo_tree(bins)))
    s3 = (ServicePort("s3", 9000, S3_PORT),)
    api = (ServicePort("grpc", 8887, API_GRPC_PORT), ServicePort("http", 8888, API_HTTP_PORT))
    services = [
        HostService("ml-pipeline", api),
        HostService("metadata-grpc-service", (ServicePort("grpc-api", 8080, MLMD_PORT),)),
        HostService("seaweedfs", s3),
        HostService("minio-service", s3),
    ]
    objects = [manifests.host_services(services, node_config.GATEWAY), manifests.object_store_secret(),
               manifests.launcher_config(), manifests.workflow_controller_config()]  # fmt: skip
    for text in objects:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=text)
    cluster.kubectl("apply", "--server-side", "-n", NAMESPACE, "-f", str(REPO_ROOT / "deploy" / "rbac.yaml"))
    cluster.kubectl("apply", "--server-side", "-n", NAMESPACE, "-f", "-", stdin=reaper_identity())
    workspace = state / "node" / "workspace-kubeflow"
    workspace.mkdir(parents=True, exist_ok=True)
    workspace.chmod(0o1777)  # steps run as several uids; a hostPath volume ignores fsGroup
    claim = cluster_manifests.workspace_claim(NAMESPACE, WORKSPACE_CLAIM, host_path=str(workspace), size="10Gi",
                                              storage_class="kubetrain-kfp", path_must_exist=True)  # fmt: skip
    cluster.kubectl("apply", "--server-side", "-f", "-", stdin=claim)


def _namespace() -> str:
    """`kubeflow`, whose pods run on the real node; "restricted" is warned and audited, "baseline" enforced.

    Tried with "restricted" enforced: the API server refuses every step's pod ("runAsNonRoot !=
    true (pod or container "main" must set securityContext.runAsNonRoot=true)", in the
    workflow-controller's log). The compiled Workflow sets it at pod level, but the step's pod
    as the backend makes it does not. KFP's own install does not label the namespace.
    """
    return yaml.safe_dump(manifests.node_namespace(NAMESPACE))


def _push_images(bins: Path) -> None:
    registry = f"127.0.0.1:{node_config.REGISTRY_PORT}"
    images = {
        manifests.DRIVER_IMAGE: oci.ImageSpec({"/bin/driver": bins / "driver"}, ["/bin/driver"],
                                              user="65532:65532", dirs=("/tmp",), workdir="/bin"),
        manifests.LAUNCHER_IMAGE: oci.ImageSpec({"/bin/launcher-v2": bins / "launcher-v2"}, ["/bin/launcher-v2"],
                                                user="65532:65532", dirs=("/tmp",), workdir="/bin"),
        manifests.PERSISTENCE_AGENT_IMAGE: oci.ImageSpec(
            {"/bin/persistence_agent": bins / "persistence-agent"}, ["/bin/persistence_agent"], user="1000:0",
            dirs=("/tmp",), workdir="/bin"),
        manifests.EXECUTOR_IMAGE: oci.ImageSpec({"/bin/argoexec": bins / "argoexec"}, ["/bin/argoexec"],
                                                user="8737:8737", dirs=("/tmp",)),
    }  # fmt: skip
    for name, spec in images.items():
        host, _, rest = name.partition("/")
        repository, _, tag = rest.partition(":")
        if host not in node_config.MIRRORED_REGISTRIES:
            raise BackendError(f"{name}: the node mirrors only {node_config.MIRRORED_REGISTRIES}")
        oci.push_image(registry, repository, tag, spec)


# Argo's requeue of a workflow after its pod ends, 10 s as shipped, is most of the gap between one
# step's pod and the next (docs/platform-knobs.md: a run of mnist_pytorch 86 s shipped, 61 s with
# these; Argo's own e2e suite runs at 1 s). The harness runs dozens of runs, so it takes the values
# docs/platform-knobs.md advises platform teams; KUBETRAIN_ARGO_SHIPPED=1 keeps KFP's.
HARNESS_ARGO_KNOBS: Mapping[str, str] = {"DEFAULT_REQUEUE_TIME": "2s", "RECENTLY_STARTED_POD_DURATION": "2s"}


def harness_argo_knobs(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The workflow-controller's environment in the harness: HARNESS_ARGO_KNOBS, or none when
    `KUBETRAIN_ARGO_SHIPPED=1` asks for KFP's shipped values."""
    shipped = (os.environ if env is None else env).get("KUBETRAIN_ARGO_SHIPPED", "0") == "1"
    return {} if shipped else dict(HARNESS_ARGO_KNOBS)


def _start_workflow_controller(cluster: Control, bins: Path, run: Path, knobs: Mapping[str, str] | None = None) -> None:
    kubeconfig = accounts.service_account_kubeconfig(cluster, run, "argo")
    argv = [str(bins / "workflow-controller"), "--kubeconfig", str(kubeconfig), "--namespace", NAMESPACE,
            "--executor-image", manifests.EXECUTOR_IMAGE, "--executor-image-pull-policy",
            "IfNotPresent", "--loglevel", "info"]  # fmt: skip
    chosen = harness_argo_knobs() if knobs is None else knobs
    env = {**os.environ, **chosen, "LEADER_ELECTION_DISABLE": "true"}
    processes.start(run, "workflow-controller", argv, env=env, log=run / "workflow-controller.log", cwd=run)
    health = f"http://127.0.0.1:{ARGO_HEALTH_PORT}/healthz"
    operators.wait_for("Argo's workflow-controller", lambda: http_probe.answers(health, ok_only=True), 120,
                       run / "workflow-controller.log")  # fmt: skip


def set_argo_knobs(cluster: Control, state: Path, controller: Mapping[str, str], executor: Mapping[str, str]) -> None:
    """Restart the workflow-controller with `controller` in its environment and give the executor
    `executor` (both empty: KFP's shipped settings). For bench/platform_knobs.py: runs in flight carry on."""
    run = state / "kfp"
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                    stdin=manifests.workflow_controller_config(dict(executor)))  # fmt: skip
    for record in processes.records(run):
        if record.name == "workflow-controller" and processes.running(record):
            # v4.0.5 keeps running after SIGTERM while its informers drain: it holds nothing a
            # SIGKILL could lose (the workflows' state is in their objects).
            os.killpg(record.pgid, signal.SIGKILL)

            def stopped(old: processes.ProcessRecord = record) -> bool:
                return not processes.running(old)

            operators.wait_for("the old workflow-controller to stop", stopped, 30, run / "workflow-controller.log")
    _start_workflow_controller(cluster, build(run / "build.log"), run, controller)


def _start_api_server(cluster: Control, bins: Path, run: Path) -> None:
    kubeconfig = accounts.service_account_kubeconfig(cluster, run, "ml-pipeline")
    store = api_server.ObjectStore(node_config.GATEWAY, S3_PORT)
    api_server.start(bins, run, kubeconfig, STANDALONE, name="kfp-apiserver", store=store)
