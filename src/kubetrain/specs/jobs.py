"""Per-kind job specs: PyTorchJob, MPIJob and the parameter-server JobSet.

Each spec checks, on construction, everything the API server, the admission webhooks and the
controllers would reject later (operator-contracts.md): names that leave room for every name the
operator derives, replica counts, restart policies each operator accepts, elastic bounds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from kubetrain.errors import SpecError
from kubetrain.names import DNS1035_MAX, LABEL_RUN_ID, LABEL_TASK_ID, is_dns1035_label, sanitize_label_value
from kubetrain.specs import limits
from kubetrain.specs.common import (
    ReplicaSpec,
    RunPolicy,
    Workspace,
    check_labels,
    check_namespace,
    check_non_negative,
    check_replicas,
    frozen_map,
)
from kubetrain.specs.scheduling import check_user_metadata

# Volume names the builders add themselves; user mounts may refer to them.
SHM_VOLUME = "dshm"
# Suffix the Job controller appends to a Job's pod names; JobSet's webhook reserves room for it.
JOB_POD_SUFFIX = 5


def _check_port(value: int, field_name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise SpecError(field_name, value, "a TCP port between 1 and 65535")


def check_derived_names(job_name: str, derived: list[str], field_name: str) -> None:
    """The operator names pods and services after the job; each must still be a DNS-1035 label."""
    if not is_dns1035_label(job_name):
        raise SpecError(
            field_name, job_name, "a DNS-1035 label: lower-case letters, digits and '-', starting with a letter, ≤63"
        )
    too_long = [n for n in derived if len(n) > DNS1035_MAX]
    if too_long:
        longest = max(too_long, key=len)
        room = len(job_name) - (len(longest) - DNS1035_MAX)
        raise SpecError(
            field_name,
            job_name,
            f"a shorter name: the operator derives {longest!r} ({len(longest)} > {DNS1035_MAX} characters); "
            f"use at most {max(room, 1)} characters",
        )


@dataclass(frozen=True, kw_only=True)
class JobMeta:
    """Name, namespace and the metadata the job and every pod carry (the KFP run and task it belongs to).

    `labels` and `annotations` are kubetrain's own (the component); `user_labels` and
    `user_annotations` are the user's (a Kueue queue name, say), which may not use kubetrain's keys.
    """

    name: str
    namespace: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    kfp_run_id: str | None = None
    kfp_task_id: str | None = None
    user_labels: Mapping[str, str] = field(default_factory=dict)
    user_annotations: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not is_dns1035_label(self.name):
            raise SpecError(
                "name", self.name, "a DNS-1035 label: lower-case letters, digits and '-', starting with a letter, ≤63"
            )
        if self.namespace is not None:
            check_namespace(self.namespace)
        object.__setattr__(self, "labels", frozen_map(self.labels, "labels"))
        object.__setattr__(self, "annotations", frozen_map(self.annotations, "annotations"))
        check_labels(self.labels, "labels", values_are_labels=True)
        check_labels(self.annotations, "annotations", values_are_labels=False)
        for name in ("user_labels", "user_annotations"):
            if not isinstance(getattr(self, name), Mapping):
                raise SpecError(name.removeprefix("user_"), getattr(self, name), "a mapping of strings to strings")
        check_user_metadata(self.user_labels, self.user_annotations)
        object.__setattr__(self, "user_labels", frozen_map(self.user_labels, "labels"))
        object.__setattr__(self, "user_annotations", frozen_map(self.user_annotations, "annotations"))

    def pod_labels(self) -> dict[str, str]:
        """The labels of the job and its pods: the user's, kubetrain's, and the KFP run and task's."""
        labels = {**self.user_labels, **self.labels}
        if self.kfp_run_id:
            labels[LABEL_RUN_ID] = sanitize_label_value(self.kfp_run_id)
        if self.kfp_task_id:
            labels[LABEL_TASK_ID] = sanitize_label_value(self.kfp_task_id)
        return labels

    def all_annotations(self) -> dict[str, str]:
        """The annotations of the job and its pods: the user's and kubetrain's."""
        return {**self.user_annotations, **self.annotations}


def common_priority_class(replicas: Mapping[str, ReplicaSpec | None]) -> str | None:
    """The one priority class of a job's replicas (a gang scheduler's PodGroup takes one), or None."""
    classes = {role: r.priority_class for role, r in replicas.items() if r is not None}
    if len(set(classes.values())) > 1:
        raise SpecError(
            "priority_class", classes, "the same priority class on every replica (the job's PodGroup has one)"
        )
    return next(iter(classes.values()), None)


@dataclass(frozen=True, kw_only=True)
class ElasticPolicy:
    """Elastic PyTorchJob: torchrun rendezvous between `min_replicas` and `max_replicas` workers."""

    min_replicas: int
    max_replicas: int
    max_restarts: int | None = 3
    rdzv_backend: Literal["c10d", "etcd", "etcd-v2"] = "c10d"
    rdzv_port: int | None = None
    rdzv_host: str | None = None

    def __post_init__(self) -> None:
        for name in ("min_replicas", "max_replicas"):
            check_replicas(getattr(self, name), f"elastic.{name}", 1)
        if self.min_replicas > self.max_replicas:
            raise SpecError("elastic.min_replicas", self.min_replicas, f"≤ elastic.max_replicas ({self.max_replicas})")
        check_non_negative(self.max_restarts, "elastic.max_restarts")
        if self.rdzv_backend not in ("c10d", "etcd", "etcd-v2"):
            raise SpecError("elastic.rdzv_backend", self.rdzv_backend, "c10d, etcd or etcd-v2")
        if self.rdzv_port is not None:
            _check_port(self.rdzv_port, "elastic.rdzv_port")


@dataclass(frozen=True, kw_only=True)
class PyTorchJobSpec:
    """A `kubeflow.org/v1` PyTorchJob: a master alone, master + workers, or elastic workers."""

    meta: JobMeta
    master: ReplicaSpec | None
    worker: ReplicaSpec | None = None
    backend: Literal["gloo", "nccl"] = "gloo"
    master_port: int = 23456
    nproc_per_node: str = "1"
    elastic: ElasticPolicy | None = None
    run_policy: RunPolicy = field(default_factory=RunPolicy)
    workspace: Workspace | None = None
    shm_size: str | None = "1Gi"

    def __post_init__(self) -> None:
        if self.backend not in ("gloo", "nccl"):
            raise SpecError("backend", self.backend, "gloo (CPU) or nccl (GPU)")
        _check_port(self.master_port, "master_port")
        if not (self.nproc_per_node in ("auto", "cpu", "gpu") or self.nproc_per_node.isdigit()):
            raise SpecError("nproc_per_node", self.nproc_per_node, "auto, cpu, gpu or a positive integer string")
        if self.nproc_per_node.isdigit() and int(self.nproc_per_node) < 1:
            raise SpecError("nproc_per_node", self.nproc_per_node, "a positive integer")
        if self.master is None and self.worker is None:
            raise SpecError("master", None, "a master replica, workers, or both")
        if self.master is not None and self.master.replicas != 1:
            raise SpecError("master.replicas", self.master.replicas, "exactly 1 (the training-operator rejects others)")
        if self.worker is not None and self.worker.replicas < 1:
            raise SpecError("worker.replicas", self.worker.replicas, "≥ 1, or no worker spec for a master-only job")
        if self.elastic is not None:
            if self.worker is None:
                raise SpecError("elastic", self.elastic, "a worker spec (elasticPolicy requires Worker replicas)")
            if not self.elastic.min_replicas <= self.worker.replicas <= self.elastic.max_replicas:
                raise SpecError(
                    "worker.replicas",
                    self.worker.replicas,
                    f"between elastic.min_replicas ({self.elastic.min_replicas}) "
                    f"and elastic.max_replicas ({self.elastic.max_replicas})",
                )
        if self.shm_size is not None:
            from kubetrain.names import is_quantity

            if not is_quantity(self.shm_size):
                raise SpecError("shm_size", self.shm_size, "a quantity such as '1Gi', or None")
        extra = self._extra_volume_names()
        for role, replica in (("master", self.master), ("worker", self.worker)):
            if replica is not None:
                if replica.restart_policy not in (None, "Never", "OnFailure", "ExitCode", "Always"):
                    raise SpecError(
                        f"{role}.restart_policy", replica.restart_policy, "Never, OnFailure, ExitCode, Always"
                    )
                replica.check_mounts(extra, role)
        common_priority_class({"master": self.master, "worker": self.worker})
        max_workers = self.elastic.max_replicas if self.elastic else (self.worker.replicas if self.worker else 0)
        derived = [f"{self.meta.name}-master-0"]
        if max_workers:
            derived.append(f"{self.meta.name}-worker-{max_workers - 1}")
        check_derived_names(self.meta.name, derived, "name")

    def _extra_volume_names(self) -> tuple[str, ...]:
        names = [SHM_VOLUME] if self.shm_size else []
        if self.workspace:
            names.append(self.workspace.volume_name)
        return tuple(names)


@dataclass(frozen=True, kw_only=True)
class MPIJobSpec:
    """A `kubeflow.org/v2beta1` MPIJob (mpi-operator): one launcher and N sshd workers."""

    meta: JobMeta
    launcher: ReplicaSpec
    worker: ReplicaSpec
    slots_per_worker: int = 1
    mpi_implementation: Literal["OpenMPI", "Intel", "MPICH"] = "OpenMPI"
    launcher_creation_policy: Literal["AtStartup", "WaitForWorkersReady"] = "WaitForWorkersReady"
    ssh_auth_mount_path: str = "/home/mpiuser/.ssh"
    run_launcher_as_worker: bool = False
    run_policy: RunPolicy = field(default_factory=RunPolicy)
    workspace: Workspace | None = None

    def __post_init__(self) -> None:
        if self.launcher.replicas != 1:
            raise SpecError("launcher.replicas", self.launcher.replicas, "exactly 1")
        if self.worker.replicas < 1:
            raise SpecError("worker.replicas", self.worker.replicas, "≥ 1")
        limits.SLOTS_PER_WORKER.check("slots_per_worker", self.slots_per_worker)
        if self.mpi_implementation not in ("OpenMPI", "Intel", "MPICH"):
            raise SpecError("mpi_implementation", self.mpi_implementation, "OpenMPI, Intel or MPICH")
        if self.launcher_creation_policy not in ("AtStartup", "WaitForWorkersReady"):
            raise SpecError(
                "launcher_creation_policy", self.launcher_creation_policy, "AtStartup or WaitForWorkersReady"
            )
        if not self.ssh_auth_mount_path.startswith("/"):
            raise SpecError("ssh_auth_mount_path", self.ssh_auth_mount_path, "an absolute path")
        extra = (self.workspace.volume_name,) if self.workspace else ()
        for role, replica in (("launcher", self.launcher), ("worker", self.worker)):
            # mpi-operator v2beta1 accepts only these two; it reports others as a ValidationError event.
            if replica.restart_policy not in (None, "Never", "OnFailure"):
                raise SpecError(f"{role}.restart_policy", replica.restart_policy, "Never or OnFailure (mpi-operator)")
            replica.check_mounts(extra, role)
        common_priority_class({"launcher": self.launcher, "worker": self.worker})
        derived = [
            f"{self.meta.name}-launcher",
            f"{self.meta.name}-worker-{self.worker.replicas - 1}",
            f"{self.meta.name}-config",
        ]
        check_derived_names(self.meta.name, derived, "name")

    @property
    def total_slots(self) -> int:
        """MPI processes the launcher starts: workers × slots (plus the launcher's when it is a worker)."""
        workers = self.worker.replicas + (1 if self.run_launcher_as_worker else 0)
        return workers * self.slots_per_worker


@dataclass(frozen=True, kw_only=True)
class PSJobSpec:
    """The parameter-server job as a `jobset.x-k8s.io/v1alpha2` JobSet: master, P servers, W workers."""

    meta: JobMeta
    master: ReplicaSpec
    ps: ReplicaSpec
    worker: ReplicaSpec
    master_port: int = 50051
    ps_port: int = 50052
    mode: Literal["async", "sync"] = "async"
    state_dir: str = "/workspace/ps-state"
    checkpoint_dir: str = "/workspace/ps-checkpoints"
    max_restarts: int = 3
    worker_backoff_limit: int = 6
    run_policy: RunPolicy = field(default_factory=RunPolicy)
    workspace: Workspace | None = None

    def __post_init__(self) -> None:
        if self.master.replicas != 1:
            raise SpecError("master.replicas", self.master.replicas, "exactly 1")
        if self.ps.replicas < 1:
            raise SpecError("ps.replicas", self.ps.replicas, "≥ 1 parameter server")
        if self.worker.replicas < 1:
            raise SpecError("worker.replicas", self.worker.replicas, "≥ 1 worker")
        _check_port(self.master_port, "master_port")
        _check_port(self.ps_port, "ps_port")
        if self.mode not in ("async", "sync"):
            raise SpecError("mode", self.mode, "async or sync")
        for name in ("state_dir", "checkpoint_dir"):
            if not getattr(self, name).startswith("/"):
                raise SpecError(name, getattr(self, name), "an absolute path on the shared volume")
        check_non_negative(self.max_restarts, "max_restarts")
        check_non_negative(self.worker_backoff_limit, "worker_backoff_limit")
        extra = (self.workspace.volume_name,) if self.workspace else ()
        for role, replica in (("master", self.master), ("ps", self.ps), ("worker", self.worker)):
            # Pods of a Job accept only OnFailure or Never.
            if replica.restart_policy not in (None, "Never", "OnFailure"):
                raise SpecError(f"{role}.restart_policy", replica.restart_policy, "Never or OnFailure (batch Job pods)")
            replica.check_mounts(extra, role)
        pad = "x" * JOB_POD_SUFFIX
        derived = [
            f"{self.meta.name}-master-0-0{pad}",
            f"{self.meta.name}-ps-{self.ps.replicas - 1}-0{pad}",
            f"{self.meta.name}-worker-0-{self.worker.replicas - 1}{pad}",
        ]
        check_derived_names(self.meta.name, derived, "name")
