"""The multi-user KFP tier (issue 47): a second API server in KFP's multi-user mode, beside the standalone one.

A real multi-user Kubeflow has one API server, with `MULTIUSER=true`. The e2e cluster keeps its
standalone server (every scenario of test_kfp_*.py talks to it, in namespace `kubeflow`) and runs
a second one from the same binary, so both tiers share one cluster and their scenarios run side
by side:

- its own database (`DB_NAME`) in the same MariaDB, its own host ports, and its own Service name
  (`ml-pipeline-mu.kubeflow`): the server compiles that name into every step's driver and
  launcher, so a profile's pods call this server, never the standalone one;
- `MULTIUSER=true`, `DEFAULTPIPELINERUNNERSERVICEACCOUNT=default-editor`, the user from the
  `kubeflow-userid` header with an empty prefix, or from a service-account token (TokenReview,
  audience `pipelines.kubeflow.org`), each call checked by a SubjectAccessReview: upstream's
  `multi-user/params.env`, its ClusterRoles applied as they are (tools/cluster/kfp/cluster_rbac.py);
- pods reach it only through a proxy that deletes `kubeflow-userid` (tools/hdrproxy; its own ports
  are dropped for pods by nftables), and people only through the identity front (oauth2-proxy,
  tools/cluster/kfp/identity.py) before the UI server in KUBEFLOW mode;
- each profile's object store keys, minted by KFP's own namespace hook through SeaweedFS's IAM API
  (tools/cluster/kfp/profile_hook.py), reach only that profile's prefixes;
- one persistence agent per profile namespace (upstream runs one over every namespace; here that
  one would also report the standalone server's runs in `kubeflow` to this server);
- Argo's workflow-controller is cluster-wide for both tiers (tools/cluster/kfp/backend.py).

The profiles, the roles they bind and their KFP objects: tools/cluster/kfp/profiles.py. ML Metadata
and the object store are shared, as in a real install.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml

from tools.cluster import header_proxy, netfilter, node_config, operators, processes
from tools.cluster import manifests as cluster_manifests
from tools.cluster.kfp import (
    accounts,
    api_server,
    cluster_rbac,
    http_probe,
    identity,
    manifests,
    object_store,
    profile_hook,
    profiles,
    services_venv,
    ui,
)
from tools.cluster.kfp.accounts import Control
from tools.cluster.kfp.api_server import ApiServerPorts
from tools.cluster.kfp.manifests import NAMESPACE
from tools.cluster.node import WORKSPACE_CLAIM  # the shipped pipelines' workspace_pvc default

PROCESS = "kfp-apiserver-mu"
DB_NAME = "mlpipeline_multiuser"
PORTS = ApiServerPorts(grpc=28887, http=28888, webhook=28443, service="ml-pipeline-mu")
# The pod-facing listener (tools/hdrproxy): Service ml-pipeline-mu points here, never at PORTS.
GUARD_PROCESS = "kfp-mu-header-proxy"
GUARD_HTTP_PORT = 28898
GUARD_GRPC_PORT = 28897
UI_PROCESS = "kfp-ui-mu"
UI_PORT = 28390
FRONT_URL_FILE = "kfp-ui-mu-front"
USERID_HEADER = identity.USERID_HEADER  # what the front sets and both servers read
RUNNER_ACCOUNT = "default-editor"
TOKEN_AUDIENCE = "pipelines.kubeflow.org"
# KFP's namespace hook (upstream's sync.py), on loopback: it answers any POST with fresh keys.
HOOK_PROCESS = "kfp-profile-hook"
HOOK_PORT = 28080
REPO_ROOT = Path(__file__).resolve().parents[3]
# What kubetrain's docs/cluster.md has a platform admin apply in each profile namespace.
KUBETRAIN_PER_PROFILE = ("deploy/rbac.yaml", "deploy/launcher-limitrange.yaml")
# bob's profile has a quota, as a platform admin sets one (the quota scenario runs there); alice's none.
BOB_QUOTA = {"requests.cpu": "4", "requests.memory": "12Gi"}
PROFILES = (profiles.Profile("alice", "alice@example.com"), profiles.Profile("bob", "bob@example.com", BOB_QUOTA))


def enabled(store: str = object_store.DEFAULT) -> bool:
    """Whether the KFP backend starts the multi-user tier too: on unless KUBETRAIN_KFP_MULTIUSER=0,
    and only over SeaweedFS (each profile's keys are minted through its IAM API; moto has none)."""
    return os.environ.get("KUBETRAIN_KFP_MULTIUSER", "1") != "0" and store == object_store.SEAWEEDFS


def ports() -> dict[int, str]:
    """The host ports the tier binds, and what binds each."""
    return {**PORTS.described("multi-user"), HOOK_PORT: "KFP's namespace hook (sync.py)",
            GUARD_HTTP_PORT: "the multi-user server's pod-facing proxy (HTTP)",
            GUARD_GRPC_PORT: "the multi-user server's pod-facing proxy (gRPC)",
            UI_PORT: "the multi-user KFP UI server", **identity.Ports().described()}  # fmt: skip


def guard_argv(binary: Path, host_ip: str) -> list[str]:
    """The pod-facing proxy: pods reach the multi-user server only through it, and it deletes any
    `kubeflow-userid` they send, so a pod can authenticate only with a service-account token."""
    return header_proxy.argv(binary, listen_http=f"{host_ip}:{GUARD_HTTP_PORT}",
                             upstream_http=f"127.0.0.1:{PORTS.http}", listen_grpc=f"{host_ip}:{GUARD_GRPC_PORT}",
                             upstream_grpc=f"127.0.0.1:{PORTS.grpc}")  # fmt: skip


def pod_guard() -> str:
    """The nftables script that drops pods' connections to the server's own ports (they must take
    the proxy: a direct connection could send any `kubeflow-userid`)."""
    return netfilter.drop_from_bridge([PORTS.grpc, PORTS.http, PORTS.webhook, UI_PORT, *identity.Ports().described()])


def api_server_env() -> dict[str, str]:
    """What the multi-user server sets beyond the standalone server's environment (upstream's params.env)."""
    return {
        "MULTIUSER": "true",
        "DEFAULTPIPELINERUNNERSERVICEACCOUNT": RUNNER_ACCOUNT,
        "KUBEFLOW_USERID_HEADER": USERID_HEADER,
        # Empty: the header is the email itself, as oauth2-proxy sets it. The server keeps an
        # empty value (its viper config allows empty environment values).
        "KUBEFLOW_USERID_PREFIX": "",
        "DBCONFIG_MYSQLCONFIG_DBNAME": DB_NAME,
    }


def running(state: Path) -> bool:
    """Whether this cluster's multi-user API server is running."""
    return any(r.name == PROCESS and processes.running(r) for r in processes.records(state / "kfp"))


def workspace_dir(state: Path, namespace: str) -> Path:
    """The host directory behind a profile's workspace claim (what a storage class provides in a cluster)."""
    return state / "node" / f"workspace-{namespace}"


def kubetrain_objects(profile: profiles.Profile, workspace: Path) -> list[str]:
    """What docs/cluster.md has an admin apply in a profile (deploy/: the LimitRange only under a
    quota, which refuses pods without requests), and the workspace claim the shipped pipelines
    mount, bound to `workspace`.

    Without a quota the LimitRange would give every container of every step pod a request (Argo's
    too), and a profile's six runs side by side would hold the 2-core node's whole CPU with step
    pods waiting on their jobs, whose pods could then never be placed.
    """
    files = [f for f in KUBETRAIN_PER_PROFILE if profile.quota or not f.endswith("limitrange.yaml")]
    texts = []
    for relative in files:
        docs = [d for d in yaml.safe_load_all((REPO_ROOT / relative).read_text()) if d]
        for doc in docs:
            doc.setdefault("metadata", {})["namespace"] = profile.name
        texts.append(yaml.safe_dump_all(docs))
    texts.append(cluster_manifests.workspace_claim(profile.name, WORKSPACE_CLAIM, host_path=str(workspace),
                                                   size="10Gi", storage_class="kubetrain-kfp",
                                                   path_must_exist=True))  # fmt: skip
    return texts


def persistence_agent(namespace: str) -> str:
    """The persistence agent reporting `namespace`'s workflows to the multi-user server."""
    return manifests.persistence_agent(
        watch=namespace, api_service=PORTS.service, name=f"ml-pipeline-persistenceagent-{namespace}"
    )


def service(host_ip: str, *, grpc_port: int = GUARD_GRPC_PORT, http_port: int = GUARD_HTTP_PORT) -> str:
    """Service `ml-pipeline-mu` (8887 gRPC, 8888 HTTP, as `ml-pipeline`), answered by the pod-facing proxy."""
    api = (manifests.ServicePort("grpc", 8887, grpc_port), manifests.ServicePort("http", 8888, http_port))
    return manifests.host_services([manifests.HostService(PORTS.service, api)], host_ip)


def up(cluster: Control, bins: Path, run: Path, state: Path, *, store: api_server.ObjectStore, iam_url: str,
       app: Path | None) -> None:  # fmt: skip
    """Start the tier on a running standalone backend: cluster RBAC, the profiles with their objects,
    the multi-user API server behind its pod-facing proxy, a persistence agent and a reaper per
    profile, and, with the built UI `app`, the UI in KUBEFLOW mode behind the identity front."""

    def apply(text: str) -> None:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=text)

    kfp_src = manifests.kfp_tree(bins)
    for rbac in cluster_rbac.cluster_rbac(kfp_src, cluster_rbac.go_mod_cache()):
        apply(rbac.text)
    hook = _start_hook(run, kfp_src, store, iam_url)
    for profile in PROFILES:
        workspace = workspace_dir(state, profile.name)
        workspace.mkdir(parents=True, exist_ok=True)
        workspace.chmod(0o1777)  # as the kubeflow workspace: steps run as several uids
        apply(profiles.profile_objects(profile))
        for text in kubetrain_objects(profile, workspace):
            apply(text)
        apply(accounts.reaper_identity(profile.name))
        _sync_profile(cluster, hook, profile.name)
    kubeconfig = accounts.service_account_kubeconfig(cluster, run, "ml-pipeline")
    api_server.start(bins, run, kubeconfig, PORTS, name=PROCESS, store=store, extra_env=api_server_env())
    _start_guard(run, node_config.GATEWAY)
    apply(service(node_config.GATEWAY))
    for profile in PROFILES:
        apply(persistence_agent(profile.name))
        accounts.start_reaper(cluster, run, profile.name)
    if app is not None:
        _start_ui(cluster, run, app, kfp_src, store)


def _start_hook(run: Path, kfp_src: Path, store: api_server.ObjectStore, iam_url: str) -> str:
    """KFP's namespace hook, serving on loopback; its URL."""
    settings = profile_hook.HookSettings(kfp_version=api_server.kfp_version(), iam_url=iam_url,
                                         s3_url=f"http://{store.host}:{store.port}",
                                         access_key=manifests.S3_ACCESS_KEY, secret_key=manifests.S3_SECRET_KEY,
                                         port=HOOK_PORT)  # fmt: skip
    venv = services_venv.ensure(run / "services-venv.log")
    argv = profile_hook.hook_argv(services_venv.python(venv), profile_hook.hook_script(kfp_src))
    log = run / f"{HOOK_PROCESS}.log"
    processes.start(run, HOOK_PROCESS, argv, env={**services_venv.environment(), **settings.environment()},
                    log=log, cwd=run)  # fmt: skip
    url = profile_hook.hook_url(HOOK_PORT)
    operators.wait_for("KFP's namespace hook (sync.py)", lambda: http_probe.tcp_open("127.0.0.1", HOOK_PORT), 60, log)
    return url


def _sync_profile(cluster: Control, hook: str, namespace: str) -> None:
    """What metacontroller does for KFP's DecoratorController: the hook's objects for the namespace,
    created once (never updated: upstream's OnDelete strategy). They hold a Secret: nothing is logged."""
    namespace_object = json.loads(cluster.kubectl("get", "namespace", namespace, "-o", "json"))
    observed = json.loads(cluster.kubectl("get", "secrets,configmaps", "-n", namespace, "-o", "json"))["items"]
    desired = profile_hook.sync_namespace(hook, namespace_object, observed)
    missing = profile_hook.to_create(desired, observed)
    if missing:
        cluster.kubectl("create", "-f", "-", stdin=profile_hook.manifest(missing))


def _start_guard(run: Path, host_ip: str) -> None:
    netfilter.load(pod_guard())
    log = run / f"{GUARD_PROCESS}.log"
    guard = processes.start(run, GUARD_PROCESS, guard_argv(header_proxy.build(), host_ip), env=dict(os.environ),
                            log=log, cwd=run)  # fmt: skip

    def listening() -> bool:
        if not processes.running(guard):
            raise processes.ProcessError(f"{GUARD_PROCESS} exited; its log ({log}):\n{log.read_text()[-2000:]}")
        text = log.read_text() if log.exists() else ""
        return "hdrproxy: http" in text and "hdrproxy: grpc" in text

    operators.wait_for("the multi-user server's pod-facing proxy", listening, 30, log)


def ui_env() -> dict[str, str]:
    """The UI server's settings in a multi-user Kubeflow (upstream's multi-user/pipelines-ui patch)."""
    return {"DEPLOYMENT": "KUBEFLOW", "ENABLE_AUTHZ": "true", "KUBEFLOW_USERID_HEADER": USERID_HEADER,
            "KUBEFLOW_USERID_PREFIX": "", "HIDE_SIDENAV": "false",
            "ARTIFACTS_SERVICE_PROXY_ENABLED": "false"}  # fmt: skip


def _start_ui(cluster: Control, run: Path, app: Path, kfp_src: Path, store: api_server.ObjectStore) -> None:
    """The UI server in KUBEFLOW mode on loopback (it trusts the header), and the identity front,
    the only way a person reaches it: oauth2-proxy, which sets the header from the login."""
    at = ui.Addresses(api_host="127.0.0.1", api_port=PORTS.http, grpc_web_host="127.0.0.1",
                      grpc_web_port=ui.GRPC_WEB_PORT, s3_host=store.host, s3_port=store.port)  # fmt: skip

    def apply_file(path: Path) -> None:
        cluster.kubectl("apply", "--server-side", "-n", NAMESPACE, "-f", str(path))

    ui.start(run, app, kfp_src, apply=apply_file,
             kubeconfig_for=lambda account: accounts.service_account_kubeconfig(cluster, run, account), at=at,
             namespace=NAMESPACE, bucket=manifests.BUCKET, access_key=manifests.S3_ACCESS_KEY,
             secret_key=manifests.S3_SECRET_KEY, port=UI_PORT, state=None, process=UI_PROCESS,
             extra_env=ui_env())  # fmt: skip
    front = identity.start(run, upstream=ui.url(UI_PORT))
    (run / FRONT_URL_FILE).write_text(front.url + "\n")


def front_url(state: Path) -> str | None:
    """Where a person opens the multi-user UI (the identity front), None when the tier runs without a UI."""
    path = state / "kfp" / FRONT_URL_FILE
    return path.read_text().strip() if path.exists() else None
