"""KFP `TaskConfig` (what the user set on the task) → :class:`~kubetrain.presets.PodOptions`.

With KFP ≥ 2.15 `task_config_passthroughs`, resources, env, volumes, node selectors,
tolerations and node affinity set on a launcher task (`set_cpu_limit`, `set_accelerator_type`,
`kfp.kubernetes.add_toleration`, `mount_pvc`, ...) are handed to the component as Kubernetes
JSON fragments instead of (or, for env and volumes, as well as) being applied to the launcher pod.
This module turns those fragments into the typed specs the training pods are built from, and
refuses what it cannot carry over rather than dropping it silently.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from kubetrain.errors import InvalidInputError, SpecError
from kubetrain.presets import PodOptions
from kubetrain.specs import (
    EnvVar,
    KeyRef,
    NodeAffinity,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PreferredSchedulingTerm,
    Resources,
    Toleration,
    Volume,
    VolumeMount,
)
from kubetrain.specs.common import GPU_RESOURCE

# The TaskConfig fields, in the attribute spelling of kfp.dsl.TaskConfig.
TASK_CONFIG_FIELDS = ("affinity", "tolerations", "node_selector", "env", "volumes", "volume_mounts", "resources")


@dataclass(frozen=True, kw_only=True)
class ExplicitResources:
    """Resources given as component inputs (empty string / 0 means "not set")."""

    cpu: str = ""
    memory: str = ""
    gpus: int = 0


def task_config_fields(task_config: object) -> dict[str, Any]:
    """The TaskConfig's fields as a dict (None when unset); accepts the KFP object or a mapping."""
    if task_config is None:
        return dict.fromkeys(TASK_CONFIG_FIELDS)
    if isinstance(task_config, Mapping):
        # The KFP driver's JSON spelling (nodeSelector, volumeMounts) and the attribute spelling.
        aliases = {"nodeSelector": "node_selector", "volumeMounts": "volume_mounts"}
        unknown = sorted(k for k in task_config if aliases.get(k, k) not in TASK_CONFIG_FIELDS)
        if unknown:
            raise InvalidInputError(f"task_config: unknown fields {unknown}; expected some of {TASK_CONFIG_FIELDS}")
        return {name: task_config.get(name, task_config.get(_camel(name))) for name in TASK_CONFIG_FIELDS}
    return {name: getattr(task_config, name, None) for name in TASK_CONFIG_FIELDS}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _quantity(value: object, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise SpecError(where, value, "a Kubernetes quantity such as '500m', '2' or '4Gi'")
    return str(value)


def _gpu_entries(section: Mapping[str, Any], where: str) -> dict[str, int]:
    gpus: dict[str, int] = {}
    for key, value in section.items():
        if key in ("cpu", "memory"):
            continue
        if "/" not in key:
            # ephemeral-storage, hugepages-*: the job specs have no field for them.
            raise SpecError(f"{where}.{key}", value, "only cpu, memory and one accelerator (vendor/name) resource")
        text = _quantity(value, f"{where}.{key}")
        if not text.isdigit():
            raise SpecError(f"{where}.{key}", value, "a whole number of devices")
        gpus[key] = int(text)
    return gpus


def resources_from(fragment: Mapping[str, Any] | None, explicit: ExplicitResources) -> Resources:
    """Resources from the task's ResourceRequirements fragment merged with the component inputs.

    A value given both ways must agree: two sources that disagree are a mistake the user should
    see, not a precedence rule to remember.
    """
    fragment = fragment or {}
    if not isinstance(fragment, Mapping):
        raise SpecError("task_config.resources", fragment, "a ResourceRequirements object")
    requests = fragment.get("requests") or {}
    limits = fragment.get("limits") or {}
    extra = sorted(set(fragment) - {"requests", "limits", "claims"})
    if extra:
        raise SpecError("task_config.resources", extra, "only requests and limits")
    gpus = {
        **_gpu_entries(requests, "task_config.resources.requests"),
        **_gpu_entries(limits, "task_config.resources.limits"),
    }
    if len(gpus) > 1:
        raise SpecError("task_config.resources", sorted(gpus), "at most one accelerator resource type")
    gpu_resource, gpu_count = next(iter(gpus.items())) if gpus else (GPU_RESOURCE, 0)
    cpu = _quantity(requests["cpu"], "requests.cpu") if "cpu" in requests else None
    memory = _quantity(requests["memory"], "requests.memory") if "memory" in requests else None
    cpu_limit = _quantity(limits["cpu"], "limits.cpu") if "cpu" in limits else None
    memory_limit = _quantity(limits["memory"], "limits.memory") if "memory" in limits else None

    def agree(name: str, mine: str | int, theirs: str | int | None, how: str) -> None:
        if mine and theirs and str(mine) != str(theirs):
            raise InvalidInputError(
                f"{name}: the component input says {mine!r} but the task sets {theirs!r} ({how}); set it one way"
            )

    if isinstance(explicit.gpus, bool) or not isinstance(explicit.gpus, int) or explicit.gpus < 0:
        raise SpecError("gpus", explicit.gpus, "a non-negative number of GPUs")
    agree("cpu", explicit.cpu, cpu, "set_cpu_request")
    agree("memory", explicit.memory, memory, "set_memory_request")
    agree("gpus", explicit.gpus, gpu_count or None, "set_accelerator_limit")
    return Resources(
        cpu=explicit.cpu or cpu,
        memory=explicit.memory or memory,
        cpu_limit=cpu_limit,
        memory_limit=memory_limit,
        gpus=explicit.gpus or gpu_count,
        gpu_resource=gpu_resource,
    )


def _key_ref(raw: Mapping[str, Any], where: str) -> KeyRef:
    try:
        return KeyRef(name=raw["name"], key=raw["key"], optional=bool(raw.get("optional", False)))
    except KeyError as e:
        raise SpecError(where, dict(raw), "an object with name and key") from e


def env_from(items: Sequence[Mapping[str, Any]] | None) -> tuple[EnvVar, ...]:
    """EnvVar specs from the task's `env` list (literal values, Secret/ConfigMap keys, field paths)."""
    out: list[EnvVar] = []
    for raw in items or ():
        name = raw.get("name")
        where = f"task_config.env[{name}]"
        source = raw.get("valueFrom")
        if source is None:
            out.append(EnvVar(name=cast(str, name), value=str(raw.get("value", ""))))
        elif "secretKeyRef" in source:
            out.append(EnvVar(name=cast(str, name), secret_key_ref=_key_ref(source["secretKeyRef"], where)))
        elif "configMapKeyRef" in source:
            out.append(EnvVar(name=cast(str, name), config_map_key_ref=_key_ref(source["configMapKeyRef"], where)))
        elif "fieldRef" in source:
            out.append(EnvVar(name=cast(str, name), field_path=str(source["fieldRef"].get("fieldPath", ""))))
        else:
            raise SpecError(where, dict(source), "a value, secretKeyRef, configMapKeyRef or fieldRef")
    return tuple(out)


def tolerations_from(items: Sequence[Mapping[str, Any]] | None) -> tuple[Toleration, ...]:
    """Toleration specs from the task's `tolerations` list."""
    out = []
    for raw in items or ():
        seconds = raw.get("tolerationSeconds")
        out.append(
            Toleration(
                key=raw.get("key"),
                operator=cast(Literal["Equal", "Exists"], raw.get("operator") or "Equal"),
                value=raw.get("value"),
                effect=cast(Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"], raw.get("effect") or ""),
                toleration_seconds=int(seconds) if seconds is not None else None,
            )
        )
    return tuple(out)


def _volume(raw: Mapping[str, Any]) -> Volume:
    name = str(raw.get("name", ""))
    where = f"task_config.volumes[{name}]"
    if "persistentVolumeClaim" in raw:
        pvc = raw["persistentVolumeClaim"]
        return Volume(name=name, claim_name=pvc.get("claimName"), read_only=bool(pvc.get("readOnly", False)))
    if "secret" in raw:
        return Volume(name=name, secret=raw["secret"].get("secretName"))
    if "configMap" in raw:
        return Volume(name=name, config_map=raw["configMap"].get("name"))
    if "emptyDir" in raw:
        empty = raw["emptyDir"] or {}
        medium = cast(Literal["", "Memory"], empty.get("medium") or "")
        return Volume(name=name, empty_dir=True, empty_dir_medium=medium, size_limit=empty.get("sizeLimit"))
    kinds = sorted(k for k in raw if k != "name")
    raise SpecError(where, kinds, "a persistentVolumeClaim, secret, configMap or emptyDir volume")


def volumes_from(
    volumes: Sequence[Mapping[str, Any]] | None,
    mounts: Sequence[Mapping[str, Any]] | None,
    *,
    workspace_claim: str | None,
) -> tuple[tuple[Volume, ...], tuple[VolumeMount, ...]]:
    """Volume and mount specs from the task's volumes, minus the workspace claim.

    The pipelines mount the workspace claim on the launcher task too (the launcher reads and
    writes the workspace); the job spec mounts that claim in every pod itself, so passing it
    through again would mount it twice.
    """
    kept: list[Volume] = []
    skipped: set[str] = set()
    for raw in volumes or ():
        volume = _volume(raw)
        if workspace_claim and volume.claim_name == workspace_claim:
            skipped.add(volume.name)
            continue
        kept.append(volume)
    out_mounts = []
    for raw in mounts or ():
        if raw.get("name") in skipped:
            continue
        out_mounts.append(
            VolumeMount(
                name=str(raw.get("name", "")),
                mount_path=str(raw.get("mountPath", "")),
                read_only=bool(raw.get("readOnly", False)),
                sub_path=raw.get("subPath") or None,
            )
        )
    return tuple(kept), tuple(out_mounts)


def _requirements(items: object, where: str) -> tuple[NodeSelectorRequirement, ...]:
    if items is None:
        return ()
    if not isinstance(items, Sequence) or isinstance(items, str):
        raise SpecError(where, items, "a list of {key, operator, values} requirements")
    out = []
    for i, raw in enumerate(items):
        if not isinstance(raw, Mapping) or "key" not in raw or "operator" not in raw:
            raise SpecError(f"{where}[{i}]", raw, "a requirement with key, operator and (for In/NotIn/Gt/Lt) values")
        out.append(
            NodeSelectorRequirement(key=raw["key"], operator=raw["operator"], values=tuple(raw.get("values") or ()))
        )
    return tuple(out)


def _term(raw: object, where: str) -> NodeSelectorTerm:
    if not isinstance(raw, Mapping):
        raise SpecError(where, raw, "a node selector term (matchExpressions and/or matchFields)")
    return NodeSelectorTerm(
        match_expressions=_requirements(raw.get("matchExpressions"), f"{where}.matchExpressions"),
        match_fields=_requirements(raw.get("matchFields"), f"{where}.matchFields"),
    )


def affinity_from(fragment: object) -> NodeAffinity | None:
    """The node affinity of the task's `affinity` (a Kubernetes Affinity), or None when it sets none.

    The KFP driver fills only `nodeAffinity` (from `kfp.kubernetes.add_node_affinity` and
    `add_node_affinity_json`); pod (anti-)affinity would name the launcher's own pods' labels, not
    the training pods', so it is refused rather than carried over with a meaning it did not have.
    """
    if not fragment:
        return None
    where = "task_config.affinity"
    if not isinstance(fragment, Mapping):
        raise SpecError(where, fragment, "a Kubernetes Affinity object")
    other = sorted(k for k in fragment if k != "nodeAffinity")
    if other:
        raise SpecError(
            f"{where}.{other[0]}",
            fragment[other[0]],
            "node affinity only (kfp.kubernetes.add_node_affinity); for pod (anti-)affinity of the training pods "
            "use the manifest_patch input",
        )
    node = fragment.get("nodeAffinity") or {}
    if not isinstance(node, Mapping):
        raise SpecError(f"{where}.nodeAffinity", node, "a NodeAffinity object")
    where = f"{where}.nodeAffinity"
    required = node.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    preferred = node.get("preferredDuringSchedulingIgnoredDuringExecution") or []
    if not isinstance(required, Mapping) or not isinstance(preferred, Sequence):
        raise SpecError(where, dict(node), "required (nodeSelectorTerms) and preferred ({weight, preference}) terms")
    terms = required.get("nodeSelectorTerms") or []
    if not isinstance(terms, Sequence):
        raise SpecError(f"{where}.requiredDuringSchedulingIgnoredDuringExecution", dict(required), "nodeSelectorTerms")
    preferences = []
    for i, raw in enumerate(preferred):
        pwhere = f"{where}.preferredDuringSchedulingIgnoredDuringExecution[{i}]"
        if not isinstance(raw, Mapping):
            raise SpecError(pwhere, raw, "{weight, preference}")
        preferences.append(
            # The weight's type is checked with the rest of the affinity, by NodeAffinity.
            PreferredSchedulingTerm(
                weight=cast(int, raw.get("weight")), preference=_term(raw.get("preference"), pwhere)
            )
        )
    if not terms and not preferences:
        return None
    return NodeAffinity(
        required=tuple(_term(t, f"{where}.nodeSelectorTerms[{i}]") for i, t in enumerate(terms)),
        preferred=tuple(preferences),
    )


def pod_options(
    task_config: object,
    *,
    explicit: ExplicitResources,
    workspace_claim: str | None,
    service_account: str | None = None,
) -> PodOptions:
    """The PodOptions for the training pods from the task's TaskConfig and the component inputs.

    Raises SpecError (an InvalidInputError) for what the training pods cannot carry and for
    malformed fragments, naming the TaskConfig field.
    """
    fields = task_config_fields(task_config)
    node_selector = fields["node_selector"] or {}
    if not isinstance(node_selector, Mapping):
        raise SpecError("task_config.node_selector", node_selector, "a mapping of label keys to values")
    volumes, mounts = volumes_from(fields["volumes"], fields["volume_mounts"], workspace_claim=workspace_claim)
    return PodOptions(
        resources=resources_from(fields["resources"], explicit),
        env=env_from(fields["env"]),
        node_selector={str(k): str(v) for k, v in node_selector.items()},
        tolerations=tolerations_from(fields["tolerations"]),
        affinity=affinity_from(fields["affinity"]),
        volumes=volumes,
        volume_mounts=mounts,
        service_account=service_account or None,
    )
