"""Specs shared by every job kind: containers, resources, volumes, scheduling and run policy.

Frozen dataclasses that validate themselves on construction. An invalid value raises
:class:`~kubetrain.errors.SpecError` naming the field, the value and what is expected, so nothing
invalid ever reaches a manifest builder or a backend. This module imports neither kfp, kubernetes
nor torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

from kubetrain.errors import SpecError
from kubetrain.names import (
    is_dns1123_label,
    is_dns1123_subdomain,
    is_env_name,
    is_label_key,
    is_label_value,
    is_quantity,
)
from kubetrain.specs import limits
from kubetrain.specs.scheduling import NodeAffinity, check_priority_class

RestartPolicy = Literal["Never", "OnFailure", "ExitCode", "Always"]
CleanPodPolicy = Literal["None", "Running", "All"]
RESTART_POLICIES: tuple[str, ...] = ("Never", "OnFailure", "ExitCode", "Always")
CLEAN_POD_POLICIES: tuple[str, ...] = ("None", "Running", "All")
GPU_RESOURCE = "nvidia.com/gpu"
# The most replicas of one role (each one a pod, with its own name, address and rank): far past any
# job kubetrain runs, while 100,000,000 would be a typo that floods the API server with pods.
MAX_REPLICAS = 10_000


def frozen_map(value: Mapping[str, str], field_name: str) -> Mapping[str, str]:
    """A read-only copy of a str->str mapping, checking the types on the way."""
    if not isinstance(value, Mapping):
        raise SpecError(field_name, value, "a mapping of strings to strings")
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise SpecError(f"{field_name}[{key!r}]", item, "a string value under a string key")
    return MappingProxyType(dict(value))


def check_labels(value: Mapping[str, str], field_name: str, *, values_are_labels: bool) -> None:
    """Validate label (or annotation) keys, and label values when `values_are_labels`."""
    for key, item in value.items():
        if not is_label_key(key):
            raise SpecError(
                f"{field_name}[{key!r}]", key, "a qualified key: [prefix/]name, name ≤63 alphanumerics, '-', '_', '.'"
            )
        if values_are_labels and not is_label_value(item):
            raise SpecError(f"{field_name}[{key!r}]", item, "a label value: ≤63 alphanumerics, '-', '_', '.'")


def check_name(value: str, field_name: str) -> None:
    """Validate an object name that Kubernetes requires to be a DNS-1123 subdomain."""
    if not isinstance(value, str) or not is_dns1123_subdomain(value):
        raise SpecError(field_name, value, "a DNS-1123 name: lower-case alphanumerics, '-' and '.'")


def check_namespace(value: str, field_name: str = "namespace") -> None:
    """Validate a namespace name: a DNS-1123 label (≤ 63 characters, no dots), as the API server requires."""
    if not isinstance(value, str) or not is_dns1123_label(value):
        raise SpecError(field_name, value, "a namespace: a DNS-1123 label, ≤ 63 lower-case alphanumerics and '-'")


def check_replicas(value: object, field_name: str, minimum: int) -> None:
    """Validate a replica count: an integer from `minimum` to :data:`MAX_REPLICAS`."""
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_REPLICAS:
        raise SpecError(field_name, value, f"an integer from {minimum} to {MAX_REPLICAS} (MAX_REPLICAS)")


def check_non_negative(value: int | None, field_name: str) -> None:
    """Validate an optional non-negative integer."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SpecError(field_name, value, "a non-negative integer")


@dataclass(frozen=True, kw_only=True)
class KeyRef:
    """A key of a Secret or ConfigMap, used as an environment variable's value."""

    name: str
    key: str
    optional: bool = False

    def __post_init__(self) -> None:
        check_name(self.name, "key_ref.name")
        if not self.key:
            raise SpecError("key_ref.key", self.key, "a non-empty key of the Secret/ConfigMap")


@dataclass(frozen=True, kw_only=True)
class EnvVar:
    """One environment variable: a literal value, or a reference to a Secret/ConfigMap key or a pod field."""

    name: str
    value: str | None = None
    secret_key_ref: KeyRef | None = None
    config_map_key_ref: KeyRef | None = None
    field_path: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not is_env_name(self.name):
            raise SpecError("env.name", self.name, "an environment variable name such as MY_VAR")
        sources = [
            s for s in (self.value, self.secret_key_ref, self.config_map_key_ref, self.field_path) if s is not None
        ]
        if len(sources) != 1:
            raise SpecError(
                f"env[{self.name}]", sources, "exactly one of value, secret_key_ref, config_map_key_ref, field_path"
            )
        if self.value is not None and not isinstance(self.value, str):
            raise SpecError(f"env[{self.name}].value", self.value, "a string (quote numbers)")


@dataclass(frozen=True, kw_only=True)
class Resources:
    """Requests and limits of one container. `gpus` becomes an `nvidia.com/gpu` limit."""

    cpu: str | None = None
    memory: str | None = None
    cpu_limit: str | None = None
    memory_limit: str | None = None
    gpus: int = 0
    gpu_resource: str = GPU_RESOURCE

    def __post_init__(self) -> None:
        for name in ("cpu", "memory", "cpu_limit", "memory_limit"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not is_quantity(value)):
                raise SpecError(f"resources.{name}", value, "a Kubernetes quantity such as '500m', '2', '4Gi'")
        limits.GPUS.check("resources.gpus", self.gpus)
        if not is_label_key(self.gpu_resource):
            raise SpecError(
                "resources.gpu_resource", self.gpu_resource, "an extended resource name like nvidia.com/gpu"
            )


@dataclass(frozen=True, kw_only=True)
class Volume:
    """A pod volume: a PersistentVolumeClaim, an emptyDir, a ConfigMap or a Secret (exactly one)."""

    name: str
    claim_name: str | None = None
    empty_dir: bool = False
    empty_dir_medium: Literal["", "Memory"] = ""
    size_limit: str | None = None
    config_map: str | None = None
    secret: str | None = None
    read_only: bool = False

    def __post_init__(self) -> None:
        check_name(self.name, "volumes.name")
        sources = [self.claim_name, self.config_map, self.secret, True if self.empty_dir else None]
        if sum(s is not None for s in sources) != 1:
            raise SpecError(f"volumes[{self.name}]", self, "exactly one of claim_name, empty_dir, config_map, secret")
        if self.empty_dir_medium not in ("", "Memory"):
            raise SpecError(f"volumes[{self.name}].empty_dir_medium", self.empty_dir_medium, "'' or 'Memory'")
        if self.size_limit is not None and not is_quantity(self.size_limit):
            raise SpecError(f"volumes[{self.name}].size_limit", self.size_limit, "a quantity such as '1Gi'")
        for ref_field in ("claim_name", "config_map", "secret"):
            ref = getattr(self, ref_field)
            if ref is not None:
                check_name(ref, f"volumes[{self.name}].{ref_field}")


@dataclass(frozen=True, kw_only=True)
class VolumeMount:
    """Where a volume appears inside the container."""

    name: str
    mount_path: str
    read_only: bool = False
    sub_path: str | None = None

    def __post_init__(self) -> None:
        check_name(self.name, "volume_mounts.name")
        if not isinstance(self.mount_path, str) or not self.mount_path.startswith("/") or ":" in self.mount_path:
            raise SpecError(f"volume_mounts[{self.name}].mount_path", self.mount_path, "an absolute path without ':'")
        if self.sub_path is not None and (self.sub_path.startswith("/") or ".." in self.sub_path.split("/")):
            raise SpecError(f"volume_mounts[{self.name}].sub_path", self.sub_path, "a relative path without '..'")


@dataclass(frozen=True, kw_only=True)
class Toleration:
    """A pod toleration (taint key, operator, value, effect)."""

    key: str | None = None
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str | None = None
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] = ""
    toleration_seconds: int | None = None

    def __post_init__(self) -> None:
        if self.operator not in ("Equal", "Exists"):
            raise SpecError("tolerations.operator", self.operator, "'Equal' or 'Exists'")
        if self.operator == "Exists" and self.value:
            raise SpecError("tolerations.value", self.value, "no value when operator is 'Exists'")
        if self.key is None and self.operator != "Exists":
            raise SpecError("tolerations.key", self.key, "a key, unless operator is 'Exists'")
        if self.effect not in ("", "NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise SpecError("tolerations.effect", self.effect, "'', NoSchedule, PreferNoSchedule or NoExecute")
        check_non_negative(self.toleration_seconds, "tolerations.toleration_seconds")
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise SpecError("tolerations.toleration_seconds", self.toleration_seconds, "only with effect NoExecute")


@dataclass(frozen=True, kw_only=True)
class PodSecurity:
    """The pod and container security context. Defaults meet the "restricted" Pod Security Standard.

    `restricted=False` emits no securityContext at all, for images that must run as root; the user
    then owns the consequences (the namespace may refuse such pods).
    """

    restricted: bool = True
    run_as_user: int = 1000
    run_as_group: int = 1000
    fs_group: int | None = 1000

    def __post_init__(self) -> None:
        check_non_negative(self.run_as_user, "security.run_as_user")
        check_non_negative(self.run_as_group, "security.run_as_group")
        check_non_negative(self.fs_group, "security.fs_group")
        if self.restricted and self.run_as_user == 0:
            raise SpecError("security.run_as_user", 0, "a non-zero uid under the restricted profile (runAsNonRoot)")


@dataclass(frozen=True, kw_only=True)
class RunPolicy:
    """Job-level policies. Rendered under `spec.runPolicy`, where the operators read them."""

    backoff_limit: int | None = None
    active_deadline_seconds: int | None = None
    ttl_seconds_after_finished: int | None = None
    clean_pod_policy: CleanPodPolicy | None = None
    suspend: bool = False

    def __post_init__(self) -> None:
        if self.backoff_limit is not None:
            limits.BACKOFF_LIMIT.check("run_policy.backoff_limit", self.backoff_limit)
        check_non_negative(self.ttl_seconds_after_finished, "run_policy.ttl_seconds_after_finished")
        if self.active_deadline_seconds is not None:
            limits.DEADLINE_SECONDS.check("run_policy.active_deadline_seconds", self.active_deadline_seconds)
        if self.clean_pod_policy is not None and self.clean_pod_policy not in CLEAN_POD_POLICIES:
            raise SpecError("run_policy.clean_pod_policy", self.clean_pod_policy, "one of None, Running, All")
        if not isinstance(self.suspend, bool):
            raise SpecError("run_policy.suspend", self.suspend, "a boolean")


@dataclass(frozen=True, kw_only=True)
class Workspace:
    """The shared ReadWriteMany claim holding data, checkpoints and models, mounted in every pod."""

    claim_name: str
    mount_path: str = "/workspace"
    volume_name: str = "workspace"

    def __post_init__(self) -> None:
        check_name(self.claim_name, "workspace.claim_name")
        check_name(self.volume_name, "workspace.volume_name")
        if not self.mount_path.startswith("/"):
            raise SpecError("workspace.mount_path", self.mount_path, "an absolute path")


@dataclass(frozen=True, kw_only=True)
class ReplicaSpec:
    """One replica type (Master, Worker, Launcher, ps, ...): its pod template and how many of it."""

    image: str
    replicas: int = 1
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: tuple[EnvVar, ...] = ()
    resources: Resources = field(default_factory=Resources)
    volumes: tuple[Volume, ...] = ()
    volume_mounts: tuple[VolumeMount, ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    service_account: str | None = None
    image_pull_secrets: tuple[str, ...] = ()
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    restart_policy: RestartPolicy | None = None
    security: PodSecurity = field(default_factory=PodSecurity)
    working_dir: str | None = None
    affinity: NodeAffinity | None = None
    priority_class: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.image, str) or not self.image or any(c.isspace() for c in self.image):
            raise SpecError("image", self.image, "a container image reference such as ghcr.io/org/img:1.0")
        check_replicas(self.replicas, "replicas", 0)
        for name in ("command", "args", "env", "volumes", "volume_mounts", "tolerations", "image_pull_secrets"):
            value = getattr(self, name)
            if isinstance(value, (str, bytes)) or not isinstance(value, (tuple, list)):
                raise SpecError(name, value, "a tuple (a list of items, not a single string)")
            object.__setattr__(self, name, tuple(value))
        for item in (*self.command, *self.args):
            if not isinstance(item, str):
                raise SpecError("command/args", item, "strings only (quote numbers)")
        object.__setattr__(self, "node_selector", frozen_map(self.node_selector, "node_selector"))
        object.__setattr__(self, "labels", frozen_map(self.labels, "labels"))
        object.__setattr__(self, "annotations", frozen_map(self.annotations, "annotations"))
        check_labels(self.labels, "labels", values_are_labels=True)
        check_labels(self.annotations, "annotations", values_are_labels=False)
        check_labels(self.node_selector, "node_selector", values_are_labels=True)
        if self.restart_policy is not None and self.restart_policy not in RESTART_POLICIES:
            raise SpecError("restart_policy", self.restart_policy, "one of Never, OnFailure, ExitCode, Always")
        if self.service_account is not None:
            check_name(self.service_account, "service_account")
        for secret in self.image_pull_secrets:
            check_name(secret, "image_pull_secrets")
        names = [v.name for v in self.volumes]
        if len(set(names)) != len(names):
            raise SpecError("volumes", names, "unique volume names")
        env_names = [e.name for e in self.env]
        if len(set(env_names)) != len(env_names):
            raise SpecError("env", env_names, "each variable once")
        paths = [m.mount_path for m in self.volume_mounts]
        if len(set(paths)) != len(paths):
            raise SpecError("volume_mounts", paths, "distinct mount paths")
        if self.image_pull_policy not in (None, "Always", "IfNotPresent", "Never"):
            raise SpecError("image_pull_policy", self.image_pull_policy, "Always, IfNotPresent or Never")
        if self.affinity is not None and not isinstance(self.affinity, NodeAffinity):
            raise SpecError("affinity", self.affinity, "a NodeAffinity, or None")
        check_priority_class(self.priority_class)

    def check_mounts(self, extra_volume_names: tuple[str, ...], field_prefix: str) -> None:
        """Every mount must name a volume of this replica or one the job adds (the workspace, /dev/shm)."""
        known = {v.name for v in self.volumes} | set(extra_volume_names)
        for mount in self.volume_mounts:
            if mount.name not in known:
                raise SpecError(
                    f"{field_prefix}.volume_mounts[{mount.mount_path}].name",
                    mount.name,
                    f"the name of a declared volume ({', '.join(sorted(known)) or 'none declared'})",
                )
