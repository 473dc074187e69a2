"""The spec of a Kubeflow Trainer v2 TrainJob (`trainer.kubeflow.org/v1alpha1`, Trainer v2.3).

A TrainJob names a runtime (a ClusterTrainingRuntime or a namespaced TrainingRuntime: the JobSet
template and the ML policy) and says what to train: the trainer's image, command, args, env,
number of nodes and processes per node, and the resources of each node. Everything else a pod
needs (volumes, the workspace claim, node selectors, tolerations, the restricted security
context, labels) travels as a runtime patch owned by kubetrain, since the TrainJob has no other
place for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kubetrain.errors import SpecError
from kubetrain.specs import limits
from kubetrain.specs.common import ReplicaSpec, Workspace, check_name
from kubetrain.specs.jobs import JobMeta, check_derived_names

# What the Trainer's torch plugin injects and its webhook refuses to see set by a user.
TORCH_RESERVED_ENV = ("PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT")
# The replicated jobs of the runtimes kubetrain uses: `node` (torch-distributed, and the MPI
# nodes) and `launcher` (MPI).
NODE_JOB = "node"
LAUNCHER_JOB = "launcher"
# JobSet pod names end with the Job's index and a 5-character random suffix.
_POD_SUFFIX = "-xxxxx"


@dataclass(frozen=True, kw_only=True)
class TrainJobSpec:
    """A TrainJob: `trainer` runs on `num_nodes` nodes of the runtime named `runtime`.

    `trainer.replicas` is the number of nodes. `patched_jobs` are the runtime's replicated jobs
    whose pods get kubetrain's pod settings (volumes, scheduling, security); `trainer_jobs` are
    those whose `node` container runs the trainer (the Trainer itself decides that by the
    runtime's `trainer.kubeflow.org/trainjob-ancestor-step: trainer` label; this only names
    them for the checks and the local backend).
    """

    meta: JobMeta
    runtime: str
    runtime_kind: Literal["ClusterTrainingRuntime", "TrainingRuntime"] = "ClusterTrainingRuntime"
    trainer: ReplicaSpec
    num_proc_per_node: int | None = None
    patched_jobs: tuple[str, ...] = (NODE_JOB,)
    workspace: Workspace | None = None
    active_deadline_seconds: int | None = None

    def __post_init__(self) -> None:
        check_name(self.runtime, "runtime")
        if self.runtime_kind not in ("ClusterTrainingRuntime", "TrainingRuntime"):
            raise SpecError("runtime_kind", self.runtime_kind, "ClusterTrainingRuntime or TrainingRuntime")
        if self.trainer.replicas < 1:
            raise SpecError("trainer.replicas", self.trainer.replicas, "the number of nodes, ≥ 1")
        if self.num_proc_per_node is not None and (
            isinstance(self.num_proc_per_node, bool) or not isinstance(self.num_proc_per_node, int)
            or self.num_proc_per_node < 1
        ):  # fmt: skip
            raise SpecError("num_proc_per_node", self.num_proc_per_node, "an integer ≥ 1, or None for the runtime's")
        if self.active_deadline_seconds is not None:
            limits.DEADLINE_SECONDS.check("active_deadline_seconds", self.active_deadline_seconds)
        reserved = sorted({e.name for e in self.trainer.env} & set(TORCH_RESERVED_ENV))
        if reserved:
            # The Trainer's webhook refuses these: the torch plugin sets them itself.
            raise SpecError("trainer.env", ", ".join(reserved), "none of the variables the Trainer injects (PET_*)")
        if self.trainer.priority_class is not None:
            # Trainer v2.3's runtime patches may not set priorityClassName, and a TrainJob has no
            # other place for it: refused rather than dropped.
            raise SpecError(
                "priority_class",
                self.trainer.priority_class,
                "none on a TrainJob (Trainer v2.3 lets no runtime patch set priorityClassName): set it in the "
                "training runtime's pod template, or use job_api=pytorchjob / mpijob",
            )
        if not self.patched_jobs or len(set(self.patched_jobs)) != len(self.patched_jobs):
            raise SpecError("patched_jobs", self.patched_jobs, "distinct replicated job names")
        extra = (self.workspace.volume_name,) if self.workspace else ()
        self.trainer.check_mounts(extra, "trainer")
        derived = [f"{self.meta.name}-{job}-0-{self.trainer.replicas - 1}{_POD_SUFFIX}" for job in self.patched_jobs]
        check_derived_names(self.meta.name, derived, "name")
