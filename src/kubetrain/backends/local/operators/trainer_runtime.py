"""What the Kubeflow Trainer v2.3 controller makes of a TrainJob: its runtime, resolved into a JobSet.

:func:`resolve` is the cluster's behaviour, as far as a program can see it (operator-contracts.md
§8): the JobSet has the TrainJob's name; the replicated jobs labelled
`trainer.kubeflow.org/trainjob-ancestor-step: trainer` run the trainer (image, command, args,
env, resources in their `node` container); `numNodes` sizes the `node` job; the torch policy
injects `PET_*` and port 29500; the MPI policy mounts the SSH key Secret and the hostfile
ConfigMap and sets the `OMPI_MCA_*` variables; runtime patches are merged by replicated job and
container name.

:func:`localize` is what running it on one machine changes, nothing else: there is no Secret or
ConfigMap store, so the hostfile becomes a local directory (every rank on `localhost`, as the local
MPIJob does) and the SSH keys an empty directory; the MPI nodes' sshd is not run (mpirun starts
the ranks here), so a node pod is a process that waits to be stopped; and Open MPI gets the local
settings the local MPIJob uses (oversubscribe, yield when idle, run as root where we are root);
the torch policy's PET_MASTER_PORT becomes a port of the job's own (see `addresses`).
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast

from kubetrain.backends.local.operators.mpijob import local_mpi_env
from kubetrain.errors import ManifestError
from kubetrain.manifests.kinds import JOBSET

Manifest = dict[str, Any]
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
NODE = "node"
LAUNCHER = "launcher"
TORCH_MASTER_PORT = 29500
MPI_HOSTFILE_DIR = "/etc/mpi"
MPI_SSH_VOLUME = "mpi-ssh-auth"
MPI_HOSTFILE_VOLUME = "mpi-hostfile"
_PATCHABLE_POD = (
    "securityContext",
    "serviceAccountName",
    "nodeSelector",
    "tolerations",
    "imagePullSecrets",
    "affinity",
)


def _by_name(items: list[Manifest], item: Manifest) -> None:
    """Upsert `item` into `items` by its name, as server-side apply merges lists keyed by name."""
    for i, existing in enumerate(items):
        if existing.get("name") == item.get("name"):
            items[i] = {**existing, **item}
            return
    items.append(dict(item))


def _pod_spec(rjob: Manifest) -> Manifest:
    pod: Manifest = rjob.setdefault("template", {}).setdefault("spec", {}).setdefault("template", {})
    return cast(Manifest, pod.setdefault("spec", {}))


def _containers(rjob: Manifest, name: str) -> list[Manifest]:
    return [c for c in _pod_spec(rjob).get("containers") or [] if c.get("name") == name]


def _is_trainer(rjob: Manifest) -> bool:
    labels = ((rjob.get("template") or {}).get("metadata") or {}).get("labels") or {}
    return bool(labels.get(ANCESTOR_LABEL) == "trainer")


def _apply_trainer(rjob: Manifest, trainer: Manifest) -> None:
    for container in _containers(rjob, NODE):
        for key in ("image", "command", "args"):
            if trainer.get(key):
                container[key] = copy.deepcopy(trainer[key])
        env = container.setdefault("env", [])
        for item in trainer.get("env") or ():
            _by_name(env, item)
        if trainer.get("resourcesPerNode"):
            container["resources"] = copy.deepcopy(trainer["resourcesPerNode"])


def _size(rjob: Manifest, count: int) -> None:
    job_spec = rjob["template"]["spec"]
    job_spec["parallelism"] = count
    job_spec["completions"] = count


def _torch(jobset: Manifest, name: str, nodes: int, procs: object) -> None:
    for rjob in jobset["spec"]["replicatedJobs"]:
        if rjob["name"] == NODE:
            _size(rjob, nodes)
        if not _is_trainer(rjob):
            continue
        for container in _containers(rjob, NODE):
            env = container.setdefault("env", [])
            for item in (
                {"name": "PET_NNODES", "value": str(nodes)},
                {"name": "PET_NPROC_PER_NODE", "value": str(procs)},
                {"name": "PET_NODE_RANK", "valueFrom": {"fieldRef": {
                    "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}},
                {"name": "PET_MASTER_ADDR", "value": f"{name}-{NODE}-0-0.{name}"},
                {"name": "PET_MASTER_PORT", "value": str(TORCH_MASTER_PORT)},
            ):  # fmt: skip
                _by_name(env, item)
            _by_name(container.setdefault("ports", []), {"containerPort": TORCH_MASTER_PORT, "name": "pet"})


def _mpi(jobset: Manifest, name: str, nodes: int, policy: Mapping[str, Any], procs: int) -> None:
    as_node = bool(policy.get("runLauncherAsNode", False))
    ssh_path = str(policy.get("sshAuthMountPath") or "/root/.ssh")
    for rjob in jobset["spec"]["replicatedJobs"]:
        if rjob["name"] == NODE:
            _size(rjob, max(nodes - 1, 1) if as_node else nodes)
        if rjob["name"] not in (NODE, LAUNCHER):
            continue
        pod = _pod_spec(rjob)
        volumes = pod.setdefault("volumes", [])
        _by_name(volumes, {"name": MPI_SSH_VOLUME, "secret": {"secretName": f"{name}-mpi-ssh-auth"}})
        if rjob["name"] == LAUNCHER:
            _by_name(volumes, {"name": MPI_HOSTFILE_VOLUME, "configMap": {"name": f"{name}-mpi-hostfile"}})
        for container in _containers(rjob, NODE):
            mounts = container.setdefault("volumeMounts", [])
            _by_name(mounts, {"name": MPI_SSH_VOLUME, "mountPath": ssh_path})
            if rjob["name"] == LAUNCHER:
                _by_name(mounts, {"name": MPI_HOSTFILE_VOLUME, "mountPath": MPI_HOSTFILE_DIR})
                env = container.setdefault("env", [])
                for key, value in (
                    ("OMPI_MCA_orte_default_hostfile", f"{MPI_HOSTFILE_DIR}/hostfile"),
                    ("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
                    ("OMPI_MCA_orte_set_default_slots", str(procs)),
                    ("OMPI_MCA_plm_rsh_args", "-o ConnectionAttempts=10"),
                ):
                    _by_name(env, {"name": key, "value": value})


def _apply_patch(jobset: Manifest, patch: Mapping[str, Any]) -> None:
    template = (patch.get("trainingRuntimeSpec") or {}).get("template") or {}
    meta = jobset["metadata"]
    for key in ("labels", "annotations"):
        meta.setdefault(key, {}).update((template.get("metadata") or {}).get(key) or {})
    rjobs = {r["name"]: r for r in jobset["spec"]["replicatedJobs"]}
    for rpatch in (template.get("spec") or {}).get("replicatedJobs") or ():
        target = rjobs.get(str(rpatch.get("name")))
        if target is None:
            raise ManifestError(
                "spec.runtimePatches", f"patches replicated job {rpatch.get('name')!r}, which the runtime does not have"
            )
        pod_patch = ((rpatch.get("template") or {}).get("spec") or {}).get("template") or {}
        pod_template = target["template"]["spec"].setdefault("template", {})
        pod_meta = pod_template.setdefault("metadata", {})
        for key in ("labels", "annotations"):
            pod_meta.setdefault(key, {}).update((pod_patch.get("metadata") or {}).get(key) or {})
        spec_patch = pod_patch.get("spec") or {}
        pod = _pod_spec(target)
        for key in _PATCHABLE_POD:
            if key in spec_patch:
                pod[key] = copy.deepcopy(spec_patch[key])
        for volume in spec_patch.get("volumes") or ():
            _by_name(pod.setdefault("volumes", []), volume)
        for cpatch in spec_patch.get("containers") or ():
            for container in _containers(target, str(cpatch.get("name"))):
                for key in ("env", "volumeMounts"):
                    for item in cpatch.get(key) or ():
                        _by_name(container.setdefault(key, []), item)
                if "securityContext" in cpatch:
                    container["securityContext"] = copy.deepcopy(cpatch["securityContext"])


def resolve(trainjob: Mapping[str, Any], runtime: Mapping[str, Any]) -> Manifest:
    """The JobSet the Trainer controller creates for `trainjob` on `runtime`."""
    meta = trainjob["metadata"]
    name = str(meta["name"])
    spec = trainjob.get("spec") or {}
    rt_spec = runtime.get("spec") or {}
    policy = rt_spec.get("mlPolicy") or {}
    trainer = spec.get("trainer") or {}
    jobset: Manifest = {
        "apiVersion": JOBSET.api_version,
        "kind": JOBSET.kind,
        "metadata": {"name": name, "namespace": meta.get("namespace"), "labels": dict(meta.get("labels") or {})},
        "spec": copy.deepcopy((rt_spec.get("template") or {}).get("spec") or {}),
    }
    if not jobset["spec"].get("replicatedJobs"):
        raise ManifestError("spec.runtimeRef", f"runtime {runtime['metadata']['name']!r} has no replicated jobs")
    nodes = int(trainer.get("numNodes") or policy.get("numNodes") or 1)
    for rjob in jobset["spec"]["replicatedJobs"]:
        if _is_trainer(rjob):
            _apply_trainer(rjob, trainer)
    if "torch" in policy:
        _torch(jobset, name, nodes, trainer.get("numProcPerNode") or "auto")
    elif "mpi" in policy:
        mpi = policy["mpi"] or {}
        procs = int(trainer.get("numProcPerNode") or mpi.get("numProcPerNode") or 1)
        _mpi(jobset, name, nodes, mpi, procs)
    for patch in spec.get("runtimePatches") or ():
        _apply_patch(jobset, patch)
    return jobset


def localize(
    jobset: Manifest, *, workdir: Path, total_ranks: int, hold_port: Callable[[int], int] | None = None
) -> Manifest:
    """The resolved JobSet as the local backend runs it (see the module docstring).

    `hold_port` (manifest port → the job's own port): what PET_MASTER_PORT says instead, since
    torchrun's store listens on every interface and two local jobs must not meet there.
    """
    out = copy.deepcopy(jobset)
    hostfile_dir = workdir / "etc-mpi"
    for rjob in out["spec"]["replicatedJobs"]:
        pod = _pod_spec(rjob)
        if hold_port is not None and _is_trainer(rjob):
            for container in _containers(rjob, NODE):
                for item in container.get("env") or ():
                    if item.get("name") == "PET_MASTER_PORT" and str(item.get("value", "")).isdigit():
                        item["value"] = str(hold_port(int(item["value"])))
        for volume in pod.get("volumes") or ():
            if volume.get("name") == MPI_HOSTFILE_VOLUME:
                hostfile_dir.mkdir(parents=True, exist_ok=True)
                (hostfile_dir / "hostfile").write_text(f"localhost slots={max(total_ranks, 1)}\n")
                volume.pop("configMap", None)
                volume["hostPath"] = {"path": str(hostfile_dir)}
            elif volume.get("name") == MPI_SSH_VOLUME:
                volume.pop("secret", None)
                volume["emptyDir"] = {}
        if rjob["name"] == NODE and any(v.get("name") == MPI_SSH_VOLUME for v in pod.get("volumes") or ()):
            for container in _containers(rjob, NODE):
                # mpirun starts every rank on this machine: a node only has to be there, and Ready.
                container["command"] = [sys.executable, "-c", "import signal; signal.sigwait({signal.SIGTERM})"]
                container.pop("args", None)
                container.pop("readinessProbe", None)
        if rjob["name"] == LAUNCHER:
            for container in _containers(rjob, NODE):
                env = container.setdefault("env", [])
                own = {e["name"] for e in env}
                # Before the manifest's own env, which may override them, as for the local MPIJob.
                container["env"] = [*[e for e in local_mpi_env() if e["name"] not in own], *env]
    return out
