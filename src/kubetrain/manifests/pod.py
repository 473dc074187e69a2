"""The pod template every job kind shares: container, volumes, scheduling, security, labels.

Pure functions over specs; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kubetrain.names import LABEL_MANAGED_BY, MANAGED_BY
from kubetrain.specs.common import EnvVar, ReplicaSpec, Resources, Toleration, Volume, VolumeMount, Workspace
from kubetrain.specs.jobs import SHM_VOLUME, JobMeta
from kubetrain.specs.scheduling import ISTIO_INJECT, NodeAffinity, NodeSelectorRequirement, NodeSelectorTerm

__all__ = ["ISTIO_INJECT", "Manifest", "affinity_to_k8s", "build_pod_template", "job_metadata"]

Manifest = dict[str, Any]


def env_to_k8s(env: EnvVar) -> Manifest:
    """One EnvVar as the Kubernetes `env[]` item."""
    if env.value is not None:
        return {"name": env.name, "value": env.value}
    if env.secret_key_ref is not None:
        ref = env.secret_key_ref
        source: Manifest = {"secretKeyRef": {"name": ref.name, "key": ref.key, "optional": ref.optional}}
    elif env.config_map_key_ref is not None:
        ref = env.config_map_key_ref
        source = {"configMapKeyRef": {"name": ref.name, "key": ref.key, "optional": ref.optional}}
    else:
        source = {"fieldRef": {"fieldPath": env.field_path}}
    return {"name": env.name, "valueFrom": source}


def resources_to_k8s(resources: Resources) -> Manifest:
    """Requests and limits; a GPU count goes to both, as extended resources require."""
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    if resources.cpu:
        requests["cpu"] = resources.cpu
    if resources.memory:
        requests["memory"] = resources.memory
    if resources.cpu_limit:
        limits["cpu"] = resources.cpu_limit
    if resources.memory_limit:
        limits["memory"] = resources.memory_limit
    if resources.gpus:
        requests[resources.gpu_resource] = str(resources.gpus)
        limits[resources.gpu_resource] = str(resources.gpus)
    out: Manifest = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def volume_to_k8s(volume: Volume) -> Manifest:
    """One pod volume."""
    if volume.claim_name is not None:
        return {
            "name": volume.name,
            "persistentVolumeClaim": {"claimName": volume.claim_name, "readOnly": volume.read_only},
        }
    if volume.config_map is not None:
        return {"name": volume.name, "configMap": {"name": volume.config_map}}
    if volume.secret is not None:
        return {"name": volume.name, "secret": {"secretName": volume.secret}}
    empty: Manifest = {}
    if volume.empty_dir_medium:
        empty["medium"] = volume.empty_dir_medium
    if volume.size_limit:
        empty["sizeLimit"] = volume.size_limit
    return {"name": volume.name, "emptyDir": empty}


def mount_to_k8s(mount: VolumeMount) -> Manifest:
    """One container volume mount."""
    out: Manifest = {"name": mount.name, "mountPath": mount.mount_path}
    if mount.read_only:
        out["readOnly"] = True
    if mount.sub_path:
        out["subPath"] = mount.sub_path
    return out


def toleration_to_k8s(toleration: Toleration) -> Manifest:
    """One pod toleration."""
    out: Manifest = {"operator": toleration.operator}
    if toleration.key is not None:
        out["key"] = toleration.key
    if toleration.value:
        out["value"] = toleration.value
    if toleration.effect:
        out["effect"] = toleration.effect
    if toleration.toleration_seconds is not None:
        out["tolerationSeconds"] = toleration.toleration_seconds
    return out


def _requirements(items: Sequence[NodeSelectorRequirement]) -> list[Manifest]:
    out: list[Manifest] = []
    for req in items:
        item: Manifest = {"key": req.key, "operator": req.operator}
        if req.values:
            item["values"] = list(req.values)
        out.append(item)
    return out


def _term(term: NodeSelectorTerm) -> Manifest:
    out: Manifest = {}
    if term.match_expressions:
        out["matchExpressions"] = _requirements(term.match_expressions)
    if term.match_fields:
        out["matchFields"] = _requirements(term.match_fields)
    return out


def affinity_to_k8s(affinity: NodeAffinity) -> Manifest:
    """The pod's `affinity` holding this node affinity."""
    node: Manifest = {}
    if affinity.required:
        node["requiredDuringSchedulingIgnoredDuringExecution"] = {
            "nodeSelectorTerms": [_term(t) for t in affinity.required]
        }
    if affinity.preferred:
        node["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": p.weight, "preference": _term(p.preference)} for p in affinity.preferred
        ]
    return {"nodeAffinity": node}


def build_pod_template(
    *,
    meta: JobMeta,
    replica: ReplicaSpec,
    container_name: str,
    role_labels: Mapping[str, str],
    extra_env: Sequence[Manifest] = (),
    ports: Sequence[Manifest] = (),
    pod_restart_policy: str | None = None,
    readiness_probe: Manifest | None = None,
    workspace: Workspace | None = None,
    shm_size: str | None = None,
    command_override: Sequence[str] | None = None,
) -> Manifest:
    """The `template` (PodTemplateSpec) of one replica type.

    `extra_env` (operator-style variables the job kind adds) comes after the user's env, so a user
    can read them but the operator's injected values still win on the cluster, as they do there.
    """
    container: Manifest = {"name": container_name, "image": replica.image}
    command = list(command_override) if command_override is not None else list(replica.command)
    if command:
        container["command"] = command
    if replica.args:
        container["args"] = list(replica.args)
    if replica.working_dir:
        container["workingDir"] = replica.working_dir
    env = [env_to_k8s(e) for e in replica.env]
    user_names = {e.name for e in replica.env}
    env.extend(e for e in extra_env if e["name"] not in user_names)
    if env:
        container["env"] = env
    if ports:
        container["ports"] = [dict(p) for p in ports]
    resources = resources_to_k8s(replica.resources)
    if resources:
        container["resources"] = resources
    if replica.image_pull_policy:
        container["imagePullPolicy"] = replica.image_pull_policy
    if readiness_probe is not None:
        container["readinessProbe"] = dict(readiness_probe)

    volumes = [volume_to_k8s(v) for v in replica.volumes]
    mounts = [mount_to_k8s(m) for m in replica.volume_mounts]
    mounted_paths = {m.mount_path for m in replica.volume_mounts}
    if workspace is not None:
        volumes.append({"name": workspace.volume_name, "persistentVolumeClaim": {"claimName": workspace.claim_name}})
        if workspace.mount_path not in mounted_paths:
            mounts.append({"name": workspace.volume_name, "mountPath": workspace.mount_path})
    if shm_size is not None:
        # PyTorch DataLoader workers share tensors through /dev/shm, which is 64 MiB in a container.
        volumes.append({"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": shm_size}})
        if "/dev/shm" not in mounted_paths:
            mounts.append({"name": SHM_VOLUME, "mountPath": "/dev/shm"})
    if mounts:
        container["volumeMounts"] = mounts

    security = replica.security
    pod_spec: Manifest = {"containers": [container]}
    if security.restricted:
        # The "restricted" Pod Security Standard: non-root, no escalation, no capabilities, seccomp.
        pod_security: Manifest = {
            "runAsNonRoot": True,
            "runAsUser": security.run_as_user,
            "runAsGroup": security.run_as_group,
            "seccompProfile": {"type": "RuntimeDefault"},
        }
        if security.fs_group is not None:
            pod_security["fsGroup"] = security.fs_group
        pod_spec["securityContext"] = pod_security
        container["securityContext"] = {
            "allowPrivilegeEscalation": False,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        }
    if volumes:
        pod_spec["volumes"] = volumes
    if replica.node_selector:
        pod_spec["nodeSelector"] = dict(replica.node_selector)
    if replica.tolerations:
        pod_spec["tolerations"] = [toleration_to_k8s(t) for t in replica.tolerations]
    if replica.affinity is not None:
        pod_spec["affinity"] = affinity_to_k8s(replica.affinity)
    if replica.priority_class:
        pod_spec["priorityClassName"] = replica.priority_class
    if replica.service_account:
        pod_spec["serviceAccountName"] = replica.service_account
    else:
        # Training code needs no API access: keep the namespace's default token out of the pod.
        pod_spec["automountServiceAccountToken"] = False
    if replica.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": s} for s in replica.image_pull_secrets]
    if pod_restart_policy is not None:
        pod_spec["restartPolicy"] = pod_restart_policy

    labels = {**meta.pod_labels(), **dict(replica.labels), **dict(role_labels)}
    labels[LABEL_MANAGED_BY] = MANAGED_BY
    labels[ISTIO_INJECT] = "false"
    annotations = {**meta.all_annotations(), **dict(replica.annotations), ISTIO_INJECT: "false"}
    return {"metadata": {"labels": labels, "annotations": annotations}, "spec": pod_spec}


def job_metadata(meta: JobMeta) -> Manifest:
    """`metadata` of the job object itself."""
    labels = {**meta.pod_labels(), LABEL_MANAGED_BY: MANAGED_BY}
    out: Manifest = {"name": meta.name, "labels": labels}
    if meta.namespace:
        out["namespace"] = meta.namespace
    annotations = meta.all_annotations()
    if annotations:
        out["annotations"] = annotations
    return out


def run_policy_to_k8s(
    *,
    backoff_limit: int | None,
    active_deadline_seconds: int | None,
    ttl: int | None,
    clean_pod_policy: str | None,
    suspend: bool,
    priority_class: str | None = None,
) -> Manifest:
    """`spec.runPolicy` of kubeflow.org jobs (the old launchers put these at spec top level, pruned).

    The pods' priority class is repeated in `schedulingPolicy.priorityClass`, which the operators
    give the job's PodGroup under gang scheduling (volcano) and ignore otherwise.
    """
    out: Manifest = {}
    if clean_pod_policy is not None:
        out["cleanPodPolicy"] = clean_pod_policy
    if backoff_limit is not None:
        out["backoffLimit"] = backoff_limit
    if active_deadline_seconds is not None:
        out["activeDeadlineSeconds"] = active_deadline_seconds
    if ttl is not None:
        out["ttlSecondsAfterFinished"] = ttl
    if suspend:
        out["suspend"] = True
    if priority_class:
        out["schedulingPolicy"] = {"priorityClass": priority_class}
    return out


def workspace_env(workspace: Workspace | None) -> list[Manifest]:
    """Tell programs where the shared volume is, so their paths can be relative to it."""
    if workspace is None:
        return []
    return [{"name": "KUBETRAIN_WORKSPACE", "value": workspace.mount_path}]
