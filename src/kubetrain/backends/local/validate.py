"""Structural checks of a manifest before the local backend runs it.

The local backend accepts manifests it did not render (hand-written PyTorchJobs, MPIJobs and
JobSets), so it checks what the API server, the admission webhooks and the controllers would
reject, and what it needs to run one: replica keys and counts, containers with an image,
restart policies each controller accepts, volume mounts that name a volume, start-up order and
policy references. A problem raises ManifestError naming the field path, before anything runs.
It applies the same rules as `kubetrain render` and the Kubernetes path first
(:func:`kubetrain.manifests.validate.validate_manifest`: names that leave room for what the
operator derives, the operators' container and replica rules), then what only a local run needs.
Names and paths a pod gives volumes become directories on this machine, so whatever could point
outside the backend's root is refused, before anything runs:

- what the API server refuses, in its words (field path, `Invalid value: "..."` quoted as Go's
  `%q`, then the rule): volume names that are not RFC 1123 labels, sub-paths and item paths that
  are absolute or contain `..`;
- claim names no PersistentVolumeClaim can have (not an RFC 1123 subdomain). The API server only
  requires `claimName` to be non-empty when it admits a pod; such a pod then waits, Pending, for a
  claim that cannot exist. Locally the claim would be a directory named after it, so the name is
  refused with the rule the API server applies to a claim's own name.

A sub-path that goes through a symbolic link out of its volume is the kubelet's to refuse, when it
mounts: `podspec` does the same when the pod starts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from kubetrain.errors import ManifestError
from kubetrain.manifests.kinds import JOBSET, MPIJOB, PYTORCHJOB, JobKind
from kubetrain.manifests.validate import validate_manifest as validate_for_cluster
from kubetrain.names import is_dns1035_label

# The API server's own words: k8s.io/apimachinery/pkg/util/validation (IsDNS1123Label,
# IsDNS1123Subdomain, RegexError, with its double space) and k8s.io/kubernetes
# pkg/apis/core/validation (validateLocalDescendingPath, ValidateLocalNonReservedPath).
_LABEL_FORMAT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN_FORMAT = _LABEL_FORMAT + r"(\." + _LABEL_FORMAT + ")*"
LABEL_RULE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
    "and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
    f"regex used for validation is '{_LABEL_FORMAT}')"
)
SUBDOMAIN_RULE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'example.com', "
    f"regex used for validation is '{_SUBDOMAIN_FORMAT}')"
)
_LABEL_MAX, _SUBDOMAIN_MAX = 63, 253
# Go's strconv.Quote escapes these by name.
_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def go_quote(value: object) -> str:
    """`value` as Go's `%q` prints a string (strconv.Quote), the way the API server quotes a bad value.

    Double quotes; backslash, quote and control characters escaped; other printable characters,
    non-ASCII ones included, as they are.
    """
    out = []
    for char in str(value):
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif char in _GO_ESCAPES:
            out.append(_GO_ESCAPES[char])
        elif char.isprintable():
            out.append(char)
        elif ord(char) < 0x80:
            out.append(f"\\x{ord(char):02x}")
        elif ord(char) < 0x10000:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    return '"' + "".join(out) + '"'


def invalid_value(path: str, value: object, detail: str) -> ManifestError:
    """The API server's `field.Invalid`: `PATH: Invalid value: "VALUE": DETAIL`."""
    return ManifestError(path, f"Invalid value: {go_quote(value)}: {detail}")


def dns1123_label_problem(value: str) -> str | None:
    """What the API server says of `value` as an RFC 1123 label (its first complaint), or None if it is one."""
    if len(value) > _LABEL_MAX:
        return f"must be no more than {_LABEL_MAX} characters"
    if re.fullmatch(_LABEL_FORMAT, value):
        return None
    if re.fullmatch(_SUBDOMAIN_FORMAT, value):
        return "must not contain dots"
    return LABEL_RULE


def dns1123_subdomain_problem(value: str) -> str | None:
    """What the API server says of `value` as an RFC 1123 subdomain (its first complaint), or None if it is one."""
    if len(value) > _SUBDOMAIN_MAX:
        return f"must be no more than {_SUBDOMAIN_MAX} characters"
    return None if re.fullmatch(_SUBDOMAIN_FORMAT, value) else SUBDOMAIN_RULE


_JOBSET_ACTIONS = (
    "FailJobSet",
    "RestartJobSet",
    "RestartJobSetAndIgnoreMaxRestarts",
    "RestartJob",
    "RestartJobAndIgnoreMaxRestarts",
)


def _mapping(value: object, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ManifestError(path, f"expected an object, got {type(value).__name__}")
    return value


def _list(value: object, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise ManifestError(path, f"expected a list, got {type(value).__name__}")
    return value


def _int(value: object, path: str, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ManifestError(path, f"expected an integer ≥ {minimum}, got {value!r}")
    return value


def check_pod_template(template: object, path: str, *, restart_policies: tuple[str, ...] | None = None) -> None:
    """A PodTemplateSpec: containers with images, mounts that name volumes, a known restart policy."""
    spec = _mapping(_mapping(template, path).get("spec"), f"{path}.spec")
    containers = _list(spec.get("containers"), f"{path}.spec.containers")
    if not containers:
        raise ManifestError(f"{path}.spec.containers", "at least one container is required")
    volumes: set[str] = set()
    for i, raw_volume in enumerate(_list(spec.get("volumes") or [], f"{path}.spec.volumes")):
        vpath = f"{path}.spec.volumes[{i}]"
        name = _check_volume(_mapping(raw_volume, vpath), vpath)
        if name in volumes:
            raise ManifestError(f"{vpath}.name", f"Duplicate value: {go_quote(name)}")
        volumes.add(name)
    for i, raw in enumerate(containers):
        cpath = f"{path}.spec.containers[{i}]"
        container = _mapping(raw, cpath)
        if not container.get("name"):
            raise ManifestError(f"{cpath}.name", "every container needs a name")
        if not container.get("image"):
            raise ManifestError(f"{cpath}.image", "every container needs an image (the operators' webhooks require it)")
        for key in ("command", "args"):
            if key in container and not all(isinstance(x, str) for x in _list(container[key], f"{cpath}.{key}")):
                raise ManifestError(f"{cpath}.{key}", "expected a list of strings")
        for j, raw_mount in enumerate(container.get("volumeMounts") or []):
            mpath = f"{cpath}.volumeMounts[{j}]"
            mount = _mapping(raw_mount, mpath)
            if str(mount.get("name")) not in volumes:
                raise ManifestError(f"{mpath}.name", f"volume {mount.get('name')!r} is not in {path}.spec.volumes")
            mount_path = str(mount.get("mountPath") or "")
            if not mount_path.startswith("/"):
                raise ManifestError(f"{mpath}.mountPath", f"expected an absolute path, got {mount_path!r}")
            if mount_path.rstrip("/") == "":
                raise ManifestError(
                    f"{mpath}.mountPath", 'Invalid value: "/": a volume cannot be mounted over the root directory'
                )
            _check_no_backsteps(mount_path, f"{mpath}.mountPath")
            if mount.get("subPath"):
                _check_descending(str(mount["subPath"]), f"{mpath}.subPath")
        for j, env in enumerate(container.get("env") or []):
            if not _mapping(env, f"{cpath}.env[{j}]").get("name"):
                raise ManifestError(f"{cpath}.env[{j}].name", "every env entry needs a name")
    policy = spec.get("restartPolicy")
    if restart_policies is not None and policy is not None and policy not in restart_policies:
        raise ManifestError(
            f"{path}.spec.restartPolicy", f"expected one of {', '.join(restart_policies)}, got {policy!r}"
        )


def _check_no_backsteps(value: str, path: str) -> None:
    if ".." in value.split("/"):
        raise invalid_value(path, value, "must not contain '..'")


def _check_descending(value: str, path: str) -> None:
    """A path that must stay inside its volume (subPath, items[].path), as the API server checks it."""
    if value.startswith("/"):
        raise invalid_value(path, value, "must be a relative path")
    _check_no_backsteps(value, path)


def _check_volume(volume: Mapping[str, Any], path: str) -> str:
    """One entry of a pod's volumes; its name."""
    name = volume.get("name")
    if name is None or name == "":
        raise ManifestError(f"{path}.name", "Required value")
    # Locally an emptyDir (or configMap, secret) volume is a directory named after the volume.
    problem = dns1123_label_problem(str(name))
    if problem is not None:
        raise invalid_value(f"{path}.name", name, problem)
    claim = volume.get("persistentVolumeClaim")
    if claim is not None:
        field = f"{path}.persistentVolumeClaim.claimName"
        claim_name = _mapping(claim, f"{path}.persistentVolumeClaim").get("claimName")
        if claim_name is None or claim_name == "":
            raise ManifestError(field, "Required value")
        problem = dns1123_subdomain_problem(str(claim_name))
        if problem is not None:
            # The API server admits the pod, which then waits for a claim that cannot exist; here the
            # claim would be a directory named after it, perhaps outside the local root.
            raise invalid_value(
                field,
                claim_name,
                f"no PersistentVolumeClaim can have this name (the API server refuses it as a claim's "
                f"metadata.name: {problem}); name an existing claim",
            )
    for key in ("configMap", "secret"):
        source = volume.get(key)
        if source is not None:
            for j, raw_item in enumerate(_mapping(source, f"{path}.{key}").get("items") or []):
                ipath = f"{path}.{key}.items[{j}].path"
                item_path = str(_mapping(raw_item, f"{path}.{key}.items[{j}]").get("path") or "")
                if not item_path:
                    raise ManifestError(ipath, "Required value")
                _check_descending(item_path, ipath)
                if item_path.startswith("..") and not item_path.startswith("../"):
                    raise invalid_value(ipath, item_path, "must not start with '..'")
    return str(name)


def _check_run_policy(run_policy: object, path: str) -> None:
    rp = _mapping(run_policy or {}, path)
    for key in ("backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished"):
        if rp.get(key) is not None:
            _int(rp[key], f"{path}.{key}")
    if rp.get("cleanPodPolicy") not in (None, "None", "Running", "All"):
        raise ManifestError(f"{path}.cleanPodPolicy", f"expected None, Running or All, got {rp['cleanPodPolicy']!r}")
    if not isinstance(rp.get("suspend", False), bool):
        raise ManifestError(f"{path}.suspend", f"expected true or false, got {rp['suspend']!r}")


def _check_pytorchjob(spec: Mapping[str, Any]) -> None:
    replicas = _mapping(spec.get("pytorchReplicaSpecs"), "spec.pytorchReplicaSpecs")
    unknown = sorted(set(replicas) - set(PYTORCHJOB.replica_types))
    if unknown or not replicas:
        raise ManifestError(
            "spec.pytorchReplicaSpecs", f"expected keys Master and/or Worker (exact case), got {sorted(replicas)}"
        )
    for rtype, raw in replicas.items():
        path = f"spec.pytorchReplicaSpecs.{rtype}"
        replica = _mapping(raw, path)
        if rtype == "Master" and replica.get("replicas") != 1:
            raise ManifestError(
                f"{path}.replicas", f"the Master must set replicas: 1 explicitly, got {replica.get('replicas')!r}"
            )
        _int(replica.get("replicas", 1), f"{path}.replicas", minimum=1)
        policy = replica.get("restartPolicy")
        if policy not in (None, "Never", "OnFailure", "ExitCode", "Always"):
            raise ManifestError(
                f"{path}.restartPolicy", f"expected Never, OnFailure, ExitCode or Always, got {policy!r}"
            )
        check_pod_template(replica.get("template"), f"{path}.template")
        names = [c.get("name") for c in replica["template"]["spec"]["containers"]]
        if "pytorch" not in names:
            raise ManifestError(
                f"{path}.template.spec.containers", f"one container must be named 'pytorch', got {names}"
            )
    if spec.get("elasticPolicy") is not None and "Worker" not in replicas:
        raise ManifestError("spec.elasticPolicy", "an elasticPolicy requires Worker replicas")
    nproc = spec.get("nprocPerNode")
    if nproc is not None and not (str(nproc) in ("auto", "cpu", "gpu") or str(nproc).isdigit()):
        raise ManifestError("spec.nprocPerNode", f"expected auto, cpu, gpu or an integer string, got {nproc!r}")
    _check_run_policy(spec.get("runPolicy"), "spec.runPolicy")


def _check_mpijob(spec: Mapping[str, Any]) -> None:
    replicas = _mapping(spec.get("mpiReplicaSpecs"), "spec.mpiReplicaSpecs")
    unknown = sorted(set(replicas) - set(MPIJOB.replica_types))
    if unknown or "Launcher" not in replicas:
        raise ManifestError("spec.mpiReplicaSpecs", f"expected Launcher and optionally Worker, got {sorted(replicas)}")
    for rtype, raw in replicas.items():
        path = f"spec.mpiReplicaSpecs.{rtype}"
        replica = _mapping(raw, path)
        count = _int(replica.get("replicas", 1 if rtype == "Launcher" else 0), f"{path}.replicas")
        if rtype == "Launcher" and count != 1:
            raise ManifestError(f"{path}.replicas", f"the Launcher must have exactly 1 replica, got {count}")
        if replica.get("restartPolicy") not in (None, "Never", "OnFailure"):
            raise ManifestError(
                f"{path}.restartPolicy", f"mpi-operator accepts Never or OnFailure, got {replica['restartPolicy']!r}"
            )
        check_pod_template(replica.get("template"), f"{path}.template")
    _int(spec.get("slotsPerWorker", 1), "spec.slotsPerWorker", minimum=1)
    if spec.get("mpiImplementation") not in (None, "OpenMPI", "Intel", "MPICH"):
        raise ManifestError(
            "spec.mpiImplementation", f"expected OpenMPI, Intel or MPICH, got {spec['mpiImplementation']!r}"
        )
    _check_run_policy(spec.get("runPolicy"), "spec.runPolicy")


def _check_jobset(spec: Mapping[str, Any]) -> None:
    rjobs = _list(spec.get("replicatedJobs"), "spec.replicatedJobs")
    if not rjobs:
        raise ManifestError("spec.replicatedJobs", "at least one replicated job is required")
    names: list[str] = []
    for i, raw in enumerate(rjobs):
        path = f"spec.replicatedJobs[{i}]"
        rj = _mapping(raw, path)
        name = str(rj.get("name") or "")
        if not is_dns1035_label(name) or name in names:
            raise ManifestError(f"{path}.name", f"expected a unique DNS-1035 name, got {name!r}")
        _int(rj.get("replicas", 1), f"{path}.replicas", minimum=1)
        job_spec = _mapping(_mapping(rj.get("template"), f"{path}.template").get("spec"), f"{path}.template.spec")
        for key in ("parallelism", "completions", "backoffLimit", "backoffLimitPerIndex", "maxFailedIndexes",
                    "activeDeadlineSeconds"):  # fmt: skip
            if job_spec.get(key) is not None:
                _int(job_spec[key], f"{path}.template.spec.{key}", minimum=1 if key == "activeDeadlineSeconds" else 0)
        check_pod_template(
            job_spec.get("template"), f"{path}.template.spec.template", restart_policies=("OnFailure", "Never")
        )
        for j, raw_dep in enumerate(rj.get("dependsOn") or []):
            dep = _mapping(raw_dep, f"{path}.dependsOn[{j}]")
            if dep.get("name") not in names:
                raise ManifestError(
                    f"{path}.dependsOn[{j}].name",
                    f"must name an earlier replicated job ({names}), got {dep.get('name')!r}",
                )
            if dep.get("status") not in ("Ready", "Complete"):
                raise ManifestError(
                    f"{path}.dependsOn[{j}].status", f"expected Ready or Complete, got {dep.get('status')!r}"
                )
        names.append(name)
    startup = (spec.get("startupPolicy") or {}).get("startupPolicyOrder")
    if startup not in (None, "AnyOrder", "InOrder"):
        raise ManifestError("spec.startupPolicy.startupPolicyOrder", f"expected AnyOrder or InOrder, got {startup!r}")
    if startup == "InOrder" and any(rj.get("dependsOn") for rj in rjobs):
        raise ManifestError("spec.startupPolicy", "startupPolicy InOrder and dependsOn are mutually exclusive")
    success = _mapping(spec.get("successPolicy") or {}, "spec.successPolicy")
    if success.get("operator") not in (None, "All", "Any"):
        raise ManifestError("spec.successPolicy.operator", f"expected All or Any, got {success['operator']!r}")
    for target in success.get("targetReplicatedJobs") or []:
        if target not in names:
            raise ManifestError(
                "spec.successPolicy.targetReplicatedJobs", f"{target!r} is not a replicated job ({names})"
            )
    failure = spec.get("failurePolicy")
    if failure is not None:
        failure = _mapping(failure, "spec.failurePolicy")
        _int(failure.get("maxRestarts", 0), "spec.failurePolicy.maxRestarts")
        for j, raw_rule in enumerate(failure.get("rules") or []):
            rule = _mapping(raw_rule, f"spec.failurePolicy.rules[{j}]")
            if rule.get("action") not in _JOBSET_ACTIONS:
                raise ManifestError(
                    f"spec.failurePolicy.rules[{j}].action",
                    f"expected one of {', '.join(_JOBSET_ACTIONS)}, got {rule.get('action')!r}",
                )
            for target in rule.get("targetReplicatedJobs") or []:
                if target not in names:
                    raise ManifestError(
                        f"spec.failurePolicy.rules[{j}].targetReplicatedJobs", f"{target!r} is not a replicated job"
                    )
    if not isinstance(spec.get("suspend", False), bool):
        raise ManifestError("spec.suspend", f"expected true or false, got {spec['suspend']!r}")


def validate_manifest(manifest: object) -> JobKind:
    """The manifest's kind, after checking everything the local backend needs; ManifestError otherwise."""
    obj = _mapping(manifest, "manifest")
    kind = validate_for_cluster(obj)
    meta = _mapping(obj.get("metadata"), "metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not is_dns1035_label(name):
        raise ManifestError(
            "metadata.name", f"expected a DNS-1035 label (lower-case letters, digits, '-'), got {name!r}"
        )
    spec = _mapping(obj.get("spec"), "spec")
    if kind is PYTORCHJOB:
        _check_pytorchjob(spec)
    elif kind is MPIJOB:
        _check_mpijob(spec)
    elif kind is JOBSET:
        _check_jobset(spec)
    return kind
