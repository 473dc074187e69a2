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
  `multi-user/params.env`, its ClusterRoles applied as they are (`UPSTREAM_RBAC`);
- one persistence agent per profile namespace (upstream runs one over every namespace; here that
  one would also report the standalone server's runs in `kubeflow` to this server);
- Argo's workflow-controller is cluster-wide for both tiers (tools/cluster/kfp/backend.py).

The profiles, the roles they bind and their KFP objects: tools/cluster/kfp/profiles.py. ML Metadata
and the object store are shared, as in a real install.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import yaml

from tools.cluster import manifests as cluster_manifests
from tools.cluster import processes
from tools.cluster.kfp import api_server, manifests
from tools.cluster.kfp.api_server import ApiServerPorts
from tools.cluster.kfp.manifests import NAMESPACE

PROCESS = "kfp-apiserver-mu"
DB_NAME = "mlpipeline_multiuser"
PORTS = ApiServerPorts(grpc=28887, http=28888, webhook=28443, service="ml-pipeline-mu")
USERID_HEADER = "kubeflow-userid"
RUNNER_ACCOUNT = "default-editor"
TOKEN_AUDIENCE = "pipelines.kubeflow.org"
# upstream's multi-user overlay, relative to the KFP source tree: what the servers need beyond the
# standalone install (SubjectAccessReview, TokenReview, every namespace's workflows) and the
# `kubeflow-pipelines-edit`/`-view` roles aggregated into `kubeflow-edit`/`-view`.
UPSTREAM_RBAC = tuple(
    f"manifests/kustomize/base/installs/multi-user/{name}"
    for name in ("api-service/cluster-role.yaml", "api-service/cluster-role-binding.yaml",
                 "persistence-agent/cluster-role.yaml", "persistence-agent/cluster-role-binding.yaml",
                 "view-edit-cluster-roles.yaml")
)  # fmt: skip


REPO_ROOT = Path(__file__).resolve().parents[3]
# What kubetrain's docs/cluster.md has a platform admin apply in each profile namespace.
KUBETRAIN_PER_PROFILE = ("deploy/rbac.yaml", "deploy/launcher-limitrange.yaml")
WORKSPACE_CLAIM = "kubetrain-workspace"


def enabled() -> bool:
    """Whether the KFP backend starts the multi-user tier too: on unless KUBETRAIN_KFP_MULTIUSER=0."""
    return os.environ.get("KUBETRAIN_KFP_MULTIUSER", "1") != "0"


def ports() -> dict[int, str]:
    """The host ports the tier binds, and what binds each."""
    return PORTS.described("multi-user")


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


def upstream_rbac(kfp_src: Path) -> list[str]:
    """upstream's multi-user RBAC files, with the namespace kustomize would give their subjects."""
    texts = []
    for relative in UPSTREAM_RBAC:
        docs = [d for d in yaml.safe_load_all((kfp_src / relative).read_text()) if d]
        for doc in docs:
            for subject in doc.get("subjects", []):
                if subject.get("kind") == "ServiceAccount":
                    subject.setdefault("namespace", NAMESPACE)
        texts.append(yaml.safe_dump_all(docs))
    return texts


def running(state: Path) -> bool:
    """Whether this cluster's multi-user API server is running."""
    return any(r.name == PROCESS and processes.running(r) for r in processes.records(state / "kfp"))


def workspace_dir(state: Path, namespace: str) -> Path:
    """The host directory behind a profile's workspace claim (what a storage class provides in a cluster)."""
    return state / "node" / f"workspace-{namespace}"


def kubetrain_objects(namespace: str, workspace: Path) -> list[str]:
    """What docs/cluster.md has an admin apply in a profile (deploy/), and the workspace claim the
    shipped pipelines mount, bound to `workspace`."""
    texts = []
    for relative in KUBETRAIN_PER_PROFILE:
        docs = [d for d in yaml.safe_load_all((REPO_ROOT / relative).read_text()) if d]
        for doc in docs:
            doc.setdefault("metadata", {})["namespace"] = namespace
        texts.append(yaml.safe_dump_all(docs))
    texts.append(cluster_manifests.workspace_claim(namespace, WORKSPACE_CLAIM, host_path=str(workspace), size="10Gi",
                                                   storage_class="kubetrain-kfp", path_must_exist=True))  # fmt: skip
    return texts


def persistence_agent(namespace: str) -> str:
    """The persistence agent reporting `namespace`'s workflows to the multi-user server."""
    return manifests.persistence_agent(
        watch=namespace, api_service=PORTS.service, name=f"ml-pipeline-persistenceagent-{namespace}"
    )


def service(host_ip: str, *, grpc_port: int = PORTS.grpc, http_port: int = PORTS.http) -> str:
    """Service `ml-pipeline-mu` (8887 gRPC, 8888 HTTP, as `ml-pipeline`) answered on the host."""
    api = (manifests.ServicePort("grpc", 8887, grpc_port), manifests.ServicePort("http", 8888, http_port))
    return manifests.host_services([manifests.HostService(PORTS.service, api)], host_ip)


def up(apply: Callable[[str], None], bins: Path, run: Path, *, kubeconfig: Path, store: api_server.ObjectStore,
       host_ip: str, profile_objects: list[str], namespaces: list[str]) -> None:  # fmt: skip
    """Apply the tier's RBAC, profiles and Service, start its API server and its persistence agents.

    `apply` applies one YAML text as the cluster's admin (server-side); `profile_objects` are the
    profiles' YAML texts (tools/cluster/kfp/profiles.py), applied before the server starts so its
    first SubjectAccessReviews find their bindings.
    """
    for text in upstream_rbac(bins.parent / "src" / "pipelines"):
        apply(text)
    for text in profile_objects:
        apply(text)
    apply(service(host_ip))
    api_server.start(bins, run, kubeconfig, PORTS, name=PROCESS, store=store, extra_env=api_server_env())
    for namespace in namespaces:
        apply(persistence_agent(namespace))
