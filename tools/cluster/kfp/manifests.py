"""The Kubernetes objects of the KFP backend in namespace `kubeflow`, as pure builders.

What KFP's own `manifests/kustomize` (and Argo's namespace install) ship as plain files —
service accounts, Roles, RoleBindings, CRDs — is applied from the built source tree as it is
(`upstream_files`). What kustomize would generate or patch there is built here with the same
names and keys: the workflow-controller ConfigMap with KFP's patch, the `kfp-launcher`
ConfigMap, the object store Secret, and the Services the steps reach by name. The servers run as
host processes, so each Service has no selector and one EndpointSlice naming the pod bridge's
gateway (the host, as pods see it) and the host port.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tools.cluster import node_config

NAMESPACE = "kubeflow"
BUCKET = "mlpipeline"
# KFP's defaults (the `mlpipeline-minio-artifact` Secret of its manifests): test credentials.
S3_ACCESS_KEY = "minio"
S3_SECRET_KEY = "minio123"
PIPELINE_ROOT = f"minio://{BUCKET}/v2/artifacts"
DRIVER_IMAGE = "ghcr.io/kubeflow/kfp-driver:2.17.0"
LAUNCHER_IMAGE = "ghcr.io/kubeflow/kfp-launcher:2.17.0"
PERSISTENCE_AGENT_IMAGE = "ghcr.io/kubeflow/kfp-persistence-agent:2.17.0"
EXECUTOR_IMAGE = "quay.io/argoproj/argoexec:v4.0.5"
PERSISTENCE_AGENT_TOKEN_AUDIENCE = "pipelines.kubeflow.org"

# Relative to the KFP and Argo source trees (tools/kfp/build.sh extracts them).
KFP_FILES = tuple(
    f"manifests/kustomize/base/pipeline/{name}.yaml"
    for name in (
        "ml-pipeline-apiserver-sa", "ml-pipeline-apiserver-role", "ml-pipeline-apiserver-rolebinding",
        "ml-pipeline-persistenceagent-sa", "ml-pipeline-persistenceagent-role",
        "ml-pipeline-persistenceagent-rolebinding",
        "pipeline-runner-sa", "pipeline-runner-role", "pipeline-runner-rolebinding",
    )
)  # fmt: skip
KFP_CRDS = ("manifests/kustomize/base/pipeline/cluster-scoped/scheduled-workflow-crd.yaml",)
ARGO_FILES = ("manifests/base/workflow-controller/workflow-controller-sa.yaml",)
# The controller watches every namespace (the multi-user tier's profiles too): Argo's cluster
# install. Its RBAC (`manifests/cluster-install-no-crds/`) is not in the release archive, so
# argo_cluster_rbac() makes it from the namespace install's Role, whose rules are the same.
ARGO_NAMESPACE_ROLE = "manifests/namespace-install/workflow-controller-rbac/workflow-controller-role.yaml"
ARGO_CRD_DIR = "manifests/base/crds/minimal"


def argo_cluster_rbac(argo_src: Path) -> str:
    """ClusterRole `argo-cluster-role` (the namespace Role's rules, plus reading
    ClusterWorkflowTemplates as upstream's cluster role does) and ClusterRoleBinding `argo-binding`
    for the controller's `argo` ServiceAccount in `kubeflow`."""
    role = yaml.safe_load((argo_src / ARGO_NAMESPACE_ROLE).read_text())
    rules = [*role["rules"], {"apiGroups": ["argoproj.io"], "resources": ["clusterworkflowtemplates"],
                              "verbs": ["get", "list", "watch"]}]  # fmt: skip
    cluster_role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                    "metadata": {"name": "argo-cluster-role"}, "rules": rules}  # fmt: skip
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": "argo-binding"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "argo-cluster-role"},
               "subjects": [{"kind": "ServiceAccount", "name": "argo", "namespace": NAMESPACE}]}  # fmt: skip
    return yaml.safe_dump_all([cluster_role, binding])


@dataclass(frozen=True)
class ServicePort:
    """One port of a HostService: the Service's port and the host port that answers it."""

    name: str
    port: int
    host_port: int


@dataclass(frozen=True)
class HostService:
    """A Service the steps reach by name, answered by host processes."""

    name: str
    ports: tuple[ServicePort, ...]


def kfp_tree(bins: Path) -> Path:
    """The KFP source tree tools/kfp/build.sh extracts beside its binaries' folder `bins`."""
    return bins.parent / "src" / "pipelines"


def argo_tree(bins: Path) -> Path:
    """The Argo Workflows source tree tools/kfp/build.sh extracts beside its binaries' folder `bins`."""
    return bins.parent / "src" / "argo-workflows"


def upstream_files(kfp_src: Path, argo_src: Path) -> tuple[list[Path], list[Path]]:
    """(CRD files, namespaced files) of KFP's and Argo's manifests applied as they are."""
    crds = [kfp_src / f for f in KFP_CRDS] + sorted((argo_src / ARGO_CRD_DIR).glob("argoproj.io_*.yaml"))
    return crds, [kfp_src / f for f in KFP_FILES] + [argo_src / f for f in ARGO_FILES]


def node_namespace(name: str, *, labels: Mapping[str, str] | None = None,
                   annotations: Mapping[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    """A Namespace whose pods land on the real node: "restricted" warned and audited, "baseline" enforced.

    The node selector and the toleration of the node's taint are the namespace's defaults (the
    PodNodeSelector and PodTolerationRestriction admission plugins), so no pod spec needs them.
    "restricted" is not enforced: the API server refuses every KFP step's pod under it (the pod as
    the backend makes it lacks runAsNonRoot, though the compiled Workflow sets it). KFP's own
    install does not label the namespace. `labels`/`annotations` are added to these.
    """
    key, value = node_config.NODE_LABEL
    toleration = [{"key": node_config.NODE_TAINT, "operator": "Exists", "effect": "NoSchedule"}]
    pod_security = {"pod-security.kubernetes.io/enforce": "baseline", "pod-security.kubernetes.io/warn": "restricted",
                    "pod-security.kubernetes.io/audit": "restricted"}  # fmt: skip
    placement = {"scheduler.alpha.kubernetes.io/node-selector": f"{key}={value}",
                 "scheduler.alpha.kubernetes.io/defaultTolerations": json.dumps(toleration)}  # fmt: skip
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {**pod_security, **(labels or {})},
                         "annotations": {**placement, **(annotations or {})}}}  # fmt: skip


def host_services(services: list[HostService], host_ip: str) -> str:
    """Selector-less Services plus one EndpointSlice each, pointing at `host_ip`."""
    docs: list[dict[str, Any]] = []
    for svc in services:
        ports = [{"name": p.name, "port": p.port, "targetPort": p.host_port, "protocol": "TCP"} for p in svc.ports]
        docs.append({"apiVersion": "v1", "kind": "Service",
                     "metadata": {"name": svc.name, "namespace": NAMESPACE, "labels": {"app": svc.name}},
                     "spec": {"ports": ports}})  # fmt: skip
        docs.append({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": f"{svc.name}-host", "namespace": NAMESPACE,
                         "labels": {"kubernetes.io/service-name": svc.name,
                                    "endpointslice.kubernetes.io/managed-by": "kubetrain.dev-harness"}},
            "addressType": "IPv4",
            "ports": [{"name": p.name, "port": p.host_port, "protocol": "TCP"} for p in svc.ports],
            "endpoints": [{"addresses": [host_ip], "conditions": {"ready": True}}],
        })  # fmt: skip
    return yaml.safe_dump_all(docs)


def object_store_secret() -> str:
    """`mlpipeline-minio-artifact`: the object store keys the launcher, Argo and the API server use."""
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": "mlpipeline-minio-artifact", "namespace": NAMESPACE},
        "stringData": {"accesskey": S3_ACCESS_KEY, "secretkey": S3_SECRET_KEY},
    })  # fmt: skip


def launcher_config() -> str:
    """`kfp-launcher`: the default pipeline root (KFP's kustomize fills the same key)."""
    return yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": "kfp-launcher", "namespace": NAMESPACE},
                           "data": {"defaultPipelineRoot": PIPELINE_ROOT}})  # fmt: skip


def workflow_controller_config(executor_env: dict[str, str] | None = None) -> str:
    """`workflow-controller-configmap` as KFP's patch of Argo's sets it, with the store's Service.

    Metrics are off: their default port (9090) is the workflow-controller's only other listener and
    is often taken on a developer's machine; nothing here reads them. `executor_env` is for
    measuring a platform knob (docs/platform-knobs.md): the harness sets none by default.
    """
    repository = {
        "archiveLogs": True,
        "s3": {
            "endpoint": f"seaweedfs.{NAMESPACE}.svc:9000", "bucket": BUCKET, "insecure": True,
            "keyFormat": "private-artifacts/{{workflow.namespace}}/{{workflow.name}}/{{pod.name}}",
            "accessKeySecret": {"name": "mlpipeline-minio-artifact", "key": "accesskey"},
            "secretKeySecret": {"name": "mlpipeline-minio-artifact", "key": "secretkey"},
        },
    }  # fmt: skip
    executor: dict[str, Any] = {
        "imagePullPolicy": "IfNotPresent",
        "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}},
    }  # fmt: skip
    if executor_env:
        executor["env"] = [{"name": k, "value": v} for k, v in sorted(executor_env.items())]
    defaults = {"spec": {"ttlStrategy": {"secondsAfterCompletion": 3600},
                         "templateDefaults": {"retryStrategy": {"limit": "2", "retryPolicy": "OnError"}}}}  # fmt: skip
    data = {
        "artifactRepository": yaml.safe_dump(repository),
        "executor": yaml.safe_dump(executor),
        "workflowDefaults": yaml.safe_dump(defaults),
        "metricsConfig": yaml.safe_dump({"enabled": False}),
        "telemetryConfig": yaml.safe_dump({"enabled": False}),
    }
    return yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": "workflow-controller-configmap", "namespace": NAMESPACE},
                           "data": data})  # fmt: skip


def persistence_agent(*, api_http_port: int = 8888, api_grpc_port: int = 8887, watch: str = NAMESPACE,
                      api_service: str = "ml-pipeline", name: str = "ml-pipeline-persistenceagent") -> str:  # fmt: skip
    """The persistence agent's Deployment as KFP's manifest has it (its token volume, its user),
    reporting the workflows of namespace `watch` to the API server behind Service `api_service`."""
    restricted = {"allowPrivilegeEscalation": False, "runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 0,
                  "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}  # fmt: skip
    token = {"serviceAccountToken": {"path": "persistenceagent-sa-token", "expirationSeconds": 3600,
                                     "audience": PERSISTENCE_AGENT_TOKEN_AUDIENCE}}  # fmt: skip
    container = {
        "name": "ml-pipeline-persistenceagent",
        "image": PERSISTENCE_AGENT_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/persistence_agent"],
        "args": ["--logtostderr=true", f"--namespace={watch}", f"--mlPipelineAPIServerName={api_service}",
                 "--ttlSecondsAfterWorkflowFinish=86400", "--numWorker=2", "--executionType=Workflow",
                 "--logLevel=info",
                 f"--mlPipelineServiceHttpPort={api_http_port}", f"--mlPipelineServiceGRPCPort={api_grpc_port}"],
        "volumeMounts": [{"mountPath": "/var/run/secrets/kubeflow/tokens", "name": "persistenceagent-sa-token"}],
        "securityContext": restricted,
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
    }  # fmt: skip
    labels = {"app": name}
    return yaml.safe_dump({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "replicas": 1, "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {
                "serviceAccountName": "ml-pipeline-persistenceagent",
                "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [container],
                "volumes": [{"name": "persistenceagent-sa-token", "projected": {"sources": [token]}}],
            }},
        },
    })  # fmt: skip
