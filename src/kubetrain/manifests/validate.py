"""The webhook and controller rules that the CRD schemas do not encode (operator-contracts.md).

Applied to every manifest before submission, rendered or user-supplied: a job the training
operator's webhook would refuse, or that mpi-operator would only answer with a ValidationError
event (no condition, so a naive launcher waits forever), is refused here with a clear message.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kubetrain.errors import ManifestError
from kubetrain.manifests.bounds import check_manifest_bounds
from kubetrain.manifests.kinds import JOBSET, MPIJOB, PYTORCH_CONTAINER, PYTORCHJOB, TRAINJOB, JobKind, kind_of
from kubetrain.manifests.schema import crd_dir_from_env, validate_against_crd
from kubetrain.names import DNS1035_MAX, is_dns1035_label

# Fields the old launchers wrote at the top of `spec`, where the API server pruned them.
RUN_POLICY_FIELDS = ("cleanPodPolicy", "backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished",
                     "activeDeadlineSecond", "schedulingPolicy", "suspend")  # fmt: skip
JOB_POD_SUFFIX = 5
# JobSet's webhook (v0.12 validateFailurePolicy); the CRD schema does not carry it, so a manifest
# that passes the schema can still be refused at submission.
_JOBSET_RULE_NAME = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?")
_JOBSET_RULE_NAME_MAX = 128


def _fail(path: str, problem: str) -> None:
    raise ManifestError(path, problem)


def _dict(value: object, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        _fail(path, f"must be an object, got {type(value).__name__}")
    assert isinstance(value, Mapping)
    return value


def _check_name_room(name: str, derived: list[str]) -> None:
    if not is_dns1035_label(name):
        _fail(
            "metadata.name", f"{name!r} is not a DNS-1035 label (lower-case letters, digits, '-', start with a letter)"
        )
    for item in derived:
        if len(item) > DNS1035_MAX:
            _fail("metadata.name", f"{name!r} is too long: the operator derives {item!r} ({len(item)} > 63 characters)")


def _check_pod_template(template: object, path: str, *, restart_policies: tuple[str, ...] | None = None) -> list[str]:
    spec = _dict(_dict(template, path).get("spec"), f"{path}.spec")
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        _fail(f"{path}.spec.containers", "needs at least one container")
    assert isinstance(containers, list)
    names = []
    for i, container in enumerate(containers):
        c = _dict(container, f"{path}.spec.containers[{i}]")
        if not c.get("image"):
            _fail(f"{path}.spec.containers[{i}].image", "every container needs an image")
        names.append(str(c.get("name", "")))
    policy = spec.get("restartPolicy")
    if restart_policies is not None and policy is not None and policy not in restart_policies:
        _fail(
            f"{path}.spec.restartPolicy", f"{policy!r} is not accepted here; use one of {', '.join(restart_policies)}"
        )
    return names


def _check_run_policy_placement(spec: Mapping[str, Any]) -> None:
    misplaced = [f for f in RUN_POLICY_FIELDS if f in spec]
    if misplaced:
        _fail(
            "spec",
            f"{', '.join(misplaced)} must be under spec.runPolicy; at the top of spec the API server drops "
            "them silently",
        )


def _replicas(rspec: Mapping[str, Any]) -> int | None:
    value = rspec.get("replicas")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _validate_pytorchjob(manifest: Mapping[str, Any]) -> None:
    spec = _dict(manifest.get("spec"), "spec")
    _check_run_policy_placement(spec)
    replica_specs = _dict(spec.get("pytorchReplicaSpecs"), "spec.pytorchReplicaSpecs")
    for key in replica_specs:
        if key not in PYTORCHJOB.replica_types:
            _fail(
                f"spec.pytorchReplicaSpecs.{key}", "unknown replica type; the webhook accepts exactly Master and Worker"
            )
    if not replica_specs:
        _fail("spec.pytorchReplicaSpecs", "needs a Master, Workers, or both")
    has_pytorch = False
    for rtype, raw in replica_specs.items():
        rspec = _dict(raw, f"spec.pytorchReplicaSpecs.{rtype}")
        path = f"spec.pytorchReplicaSpecs.{rtype}"
        replicas = _replicas(rspec)
        if rtype == "Master" and replicas != 1:
            _fail(f"{path}.replicas", f"got {rspec.get('replicas')!r}; the Master must set replicas: 1 explicitly")
        if rtype == "Worker" and (replicas is None or replicas < 1):
            _fail(f"{path}.replicas", f"got {rspec.get('replicas')!r}; Worker replicas must be ≥ 1")
        policy = rspec.get("restartPolicy")
        if policy is not None and policy not in ("Always", "OnFailure", "Never", "ExitCode"):
            _fail(f"{path}.restartPolicy", f"{policy!r}; use Always, OnFailure, Never or ExitCode")
        names = _check_pod_template(rspec.get("template"), f"{path}.template")
        has_pytorch = has_pytorch or PYTORCH_CONTAINER in names
    if not has_pytorch:
        _fail("spec.pytorchReplicaSpecs", "one container must be named 'pytorch' (the operator requires it)")
    elastic = spec.get("elasticPolicy")
    if elastic is not None:
        e = _dict(elastic, "spec.elasticPolicy")
        if "Worker" not in replica_specs:
            _fail("spec.elasticPolicy", "requires Worker replicas")
        if "nProcPerNode" in e and "nprocPerNode" in spec:
            _fail("spec.elasticPolicy.nProcPerNode", "is deprecated and may not be set together with spec.nprocPerNode")
        lo, hi = e.get("minReplicas"), e.get("maxReplicas")
        if isinstance(lo, int) and isinstance(hi, int) and lo > hi:
            _fail("spec.elasticPolicy.minReplicas", f"{lo} > maxReplicas {hi}")
    name = str(_dict(manifest.get("metadata"), "metadata").get("name", ""))
    workers = _replicas(_dict(replica_specs.get("Worker", {}), "Worker")) or 0
    if elastic is not None:
        workers = max(workers, int(_dict(elastic, "spec.elasticPolicy").get("maxReplicas") or 0))
    _check_name_room(name, [f"{name}-master-0"] + ([f"{name}-worker-{workers - 1}"] if workers else []))


def _validate_mpijob(manifest: Mapping[str, Any]) -> None:
    spec = _dict(manifest.get("spec"), "spec")
    _check_run_policy_placement(spec)
    replica_specs = _dict(spec.get("mpiReplicaSpecs"), "spec.mpiReplicaSpecs")
    for key in replica_specs:
        if key not in MPIJOB.replica_types:
            _fail(f"spec.mpiReplicaSpecs.{key}", "unknown replica type; use Launcher and Worker")
    if "Launcher" not in replica_specs:
        _fail("spec.mpiReplicaSpecs.Launcher", "is required")
    workers = 0
    for rtype, raw in replica_specs.items():
        rspec = _dict(raw, f"spec.mpiReplicaSpecs.{rtype}")
        path = f"spec.mpiReplicaSpecs.{rtype}"
        replicas = _replicas(rspec)
        if rtype == "Launcher" and replicas not in (None, 1):
            _fail(f"{path}.replicas", f"got {replicas}; the launcher must have exactly 1 replica")
        if rtype == "Worker":
            if replicas is None or replicas < 1:
                _fail(f"{path}.replicas", f"got {rspec.get('replicas')!r}; Worker replicas must be ≥ 1")
            workers = replicas or 0
        policy = rspec.get("restartPolicy")
        if policy is not None and policy not in ("Never", "OnFailure"):
            # mpi-operator would only emit a ValidationError event and never set a condition.
            _fail(f"{path}.restartPolicy", f"{policy!r}; mpi-operator accepts only Never or OnFailure")
        _check_pod_template(rspec.get("template"), f"{path}.template")
    slots = spec.get("slotsPerWorker")
    if slots is not None and (not isinstance(slots, int) or slots < 1):
        _fail("spec.slotsPerWorker", f"got {slots!r}; must be an integer ≥ 1")
    name = str(_dict(manifest.get("metadata"), "metadata").get("name", ""))
    _check_name_room(name, [f"{name}-launcher", f"{name}-worker-{max(workers - 1, 0)}"])


def _validate_jobset(manifest: Mapping[str, Any]) -> None:
    spec = _dict(manifest.get("spec"), "spec")
    jobs = spec.get("replicatedJobs")
    if not isinstance(jobs, list) or not jobs:
        _fail("spec.replicatedJobs", "needs at least one replicated job")
    assert isinstance(jobs, list)
    name = str(_dict(manifest.get("metadata"), "metadata").get("name", ""))
    seen: list[str] = []
    derived = []
    uses_depends_on = False
    for i, raw in enumerate(jobs):
        rjob = _dict(raw, f"spec.replicatedJobs[{i}]")
        rname = str(rjob.get("name", ""))
        path = f"spec.replicatedJobs[{rname or i}]"
        if not is_dns1035_label(rname):
            _fail(f"{path}.name", f"{rname!r} is not a DNS-1035 label")
        if rname in seen:
            _fail(f"{path}.name", "replicated job names must be unique")
        for dep in rjob.get("dependsOn") or ():
            uses_depends_on = True
            if i == 0:
                _fail(f"{path}.dependsOn", "the first replicated job cannot depend on another")
            if dep.get("name") not in seen:
                _fail(f"{path}.dependsOn", f"{dep.get('name')!r} is not an earlier replicated job")
        seen.append(rname)
        job_spec = _dict(_dict(rjob.get("template"), f"{path}.template").get("spec"), f"{path}.template.spec")
        containers = _check_pod_template(job_spec.get("template"), f"{path}.template.spec.template",
                                         restart_policies=("OnFailure", "Never"))  # fmt: skip
        _check_pod_failure_policy(job_spec, f"{path}.template.spec", containers)
        replicas = rjob.get("replicas", 1)
        pods = job_spec.get("parallelism", 1)
        derived.append(f"{name}-{rname}-{max(int(replicas) - 1, 0)}-{max(int(pods) - 1, 0)}" + "x" * JOB_POD_SUFFIX)
    startup = spec.get("startupPolicy") or {}
    if uses_depends_on and startup.get("startupPolicyOrder") == "InOrder":
        _fail("spec.startupPolicy", "InOrder and dependsOn are mutually exclusive")
    for policy_name in ("successPolicy",):
        targets = (spec.get(policy_name) or {}).get("targetReplicatedJobs") or ()
        for target in targets:
            if target not in seen:
                _fail(f"spec.{policy_name}.targetReplicatedJobs", f"{target!r} is not a replicated job")
    rule_names: set[str] = set()
    for i, rule in enumerate((spec.get("failurePolicy") or {}).get("rules") or ()):
        rule_name = str(rule.get("name", ""))
        if not _JOBSET_RULE_NAME.fullmatch(rule_name) or len(rule_name) > _JOBSET_RULE_NAME_MAX:
            _fail(
                f"spec.failurePolicy.rules[{i}].name",
                f"{rule_name!r} is not a rule name JobSet accepts: 1-{_JOBSET_RULE_NAME_MAX} characters, a letter "
                "first, then letters, digits, '_', ',' or ':', not ending in ',' or ':' "
                "(no '-'; e.g. 'DeadlineIsFinal')",
            )
        if rule_name in rule_names:
            _fail(f"spec.failurePolicy.rules[{i}].name", f"{rule_name!r} names two rules; give each rule its own name")
        rule_names.add(rule_name)
        for target in rule.get("targetReplicatedJobs") or ():
            if target not in seen:
                _fail("spec.failurePolicy.rules.targetReplicatedJobs", f"{target!r} is not a replicated job")
    _check_name_room(name, derived)


def _check_pod_failure_policy(job_spec: Mapping[str, Any], path: str, containers: list[str]) -> None:
    """The API server's Job rules for a podFailurePolicy, which the JobSet's own admission does not
    check: a child Job breaking them is never created, and the JobSet waits on it in vain."""
    policy = job_spec.get("podFailurePolicy")
    if policy is None:
        return
    restart = _dict(_dict(job_spec.get("template"), f"{path}.template").get("spec"), f"{path}.template.spec")
    if restart.get("restartPolicy") != "Never":
        _fail(f"{path}.podFailurePolicy", "needs the pods' restartPolicy Never (the API server refuses the Job)")
    for i, rule in enumerate(_dict(policy, f"{path}.podFailurePolicy").get("rules") or ()):
        codes = _dict(rule, f"{path}.podFailurePolicy.rules[{i}]").get("onExitCodes")
        if codes is None:
            continue
        container = codes.get("containerName")
        if container is not None and container not in containers:
            _fail(f"{path}.podFailurePolicy.rules[{i}].onExitCodes.containerName",
                  f"{container!r} is not a container of the pod ({', '.join(containers)})")  # fmt: skip
        if codes.get("operator") == "In" and 0 in (codes.get("values") or ()):
            _fail(f"{path}.podFailurePolicy.rules[{i}].onExitCodes.values", "0 is not a failure; remove it")


# What the Trainer's torch plugin sets itself; its webhook refuses a TrainJob that sets them.
_TRAINER_OWNED_ENV = ("PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT")


def _validate_trainjob(manifest: Mapping[str, Any]) -> None:
    """The Trainer's CEL rules and webhook (v2.3), and room for the pod names its JobSet derives."""
    spec = _dict(manifest.get("spec"), "spec")
    ref = _dict(spec.get("runtimeRef"), "spec.runtimeRef")
    if not ref.get("name"):
        _fail("spec.runtimeRef.name", "names the (Cluster)TrainingRuntime to run on; it is required")
    if ref.get("kind", "ClusterTrainingRuntime") not in ("ClusterTrainingRuntime", "TrainingRuntime"):
        _fail("spec.runtimeRef.kind", f"{ref.get('kind')!r}: expected ClusterTrainingRuntime or TrainingRuntime")
    trainer = _dict(spec.get("trainer") or {}, "spec.trainer")
    owned = sorted({str(e.get("name")) for e in trainer.get("env") or ()} & set(_TRAINER_OWNED_ENV))
    if owned:
        _fail("spec.trainer.env", f"{', '.join(owned)} are set by the Trainer; remove them")
    nodes = trainer.get("numNodes", 1)
    if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1:
        _fail("spec.trainer.numNodes", f"{nodes!r}: expected an integer >= 1")
    managers = [str(p.get("manager")) for p in spec.get("runtimePatches") or ()]
    if len(set(managers)) != len(managers):
        _fail("spec.runtimePatches", "each manager may own one patch")
    name = str(_dict(manifest.get("metadata"), "metadata").get("name", ""))
    # The JobSet's pods: <name>-<replicated job>-<job index>-<pod index>-<suffix>; `node` is the longest.
    _check_name_room(name, [f"{name}-node-0-{max(int(nodes) - 1, 0)}" + "x" * JOB_POD_SUFFIX])


_VALIDATORS = {
    PYTORCHJOB.kind: _validate_pytorchjob,
    MPIJOB.kind: _validate_mpijob,
    JOBSET.kind: _validate_jobset,
    TRAINJOB.kind: _validate_trainjob,
}


def validate_manifest(manifest: Mapping[str, Any], *, crd_dir: Path | None = None) -> JobKind:
    """Check a manifest of any supported kind; return its kind or raise ManifestError.

    Controller and webhook rules always apply, and so do the input bounds (`bounds`). The CRD
    schema (with undeclared fields as errors) applies when `crd_dir` is given or
    `KUBETRAIN_CRD_DIR` is set.
    """
    if not isinstance(manifest, Mapping):
        raise ManifestError("<root>", f"a manifest must be a mapping, got {type(manifest).__name__}")
    kind = kind_of(manifest)
    metadata = _dict(manifest.get("metadata"), "metadata")
    if not metadata.get("name"):
        _fail("metadata.name", "is required (kubetrain does not use generateName: names must be stable for retries)")
    _VALIDATORS[kind.kind](manifest)
    check_manifest_bounds(manifest)
    directory = crd_dir or crd_dir_from_env()
    if directory is not None:
        validate_against_crd(manifest, directory)
    return kind
