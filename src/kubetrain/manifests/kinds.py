"""What kubetrain knows about each job kind: API coordinates, containers, replica keys, roles.

Backends, the status parser and the launcher read these facts from here instead of hard-coding
them, so adding a kind is one entry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubetrain.errors import ManifestError


@dataclass(frozen=True)
class JobKind:
    """Static facts about one job kind (see operator-contracts.md)."""

    kind: str
    api_version: str
    plural: str
    replica_specs_key: str | None  # None for JobSet (replicatedJobs)
    replica_types: tuple[str, ...]
    default_container: str | None  # the container the operator requires by name, if any
    primary_replica: tuple[str, ...]  # replica types whose index-0 pod carries the job's main log

    @property
    def group(self) -> str:
        """The API group (`kubeflow.org`, `jobset.x-k8s.io`)."""
        return self.api_version.split("/", 1)[0]

    @property
    def version(self) -> str:
        """The API version (`v1`, `v2beta1`, `v1alpha2`)."""
        return self.api_version.split("/", 1)[1]


PYTORCHJOB = JobKind(
    kind="PyTorchJob",
    api_version="kubeflow.org/v1",
    plural="pytorchjobs",
    replica_specs_key="pytorchReplicaSpecs",
    replica_types=("Master", "Worker"),
    default_container="pytorch",
    primary_replica=("Master", "Worker"),
)
MPIJOB = JobKind(
    kind="MPIJob",
    api_version="kubeflow.org/v2beta1",
    plural="mpijobs",
    replica_specs_key="mpiReplicaSpecs",
    replica_types=("Launcher", "Worker"),
    default_container=None,  # mpi-operator uses container[0]
    primary_replica=("Launcher",),
)
JOBSET = JobKind(
    kind="JobSet",
    api_version="jobset.x-k8s.io/v1alpha2",
    plural="jobsets",
    replica_specs_key=None,
    replica_types=(),
    default_container=None,
    primary_replica=("master",),
)
TRAINJOB = JobKind(
    kind="TrainJob",
    api_version="trainer.kubeflow.org/v1alpha1",
    plural="trainjobs",
    replica_specs_key=None,
    replica_types=(),
    default_container="node",  # the Trainer puts the trainer into the container named `node`
    primary_replica=("launcher", "node"),  # mpirun's launcher, else torch's node 0
)
KINDS: tuple[JobKind, ...] = (PYTORCHJOB, MPIJOB, JOBSET, TRAINJOB)

# Container names the builders use (the PyTorch one is required by the training-operator).
PYTORCH_CONTAINER = "pytorch"
MPI_CONTAINER = "mpi"
PS_CONTAINER = "ps"
# The PS master's exit code for a failure that a restart would only repeat (a diverged model,
# dropped work past the limit, a flag or a data set that can never work): its Job's
# podFailurePolicy fails the Job on it at once (manifests.jobset) rather than restarting the pod.
PS_FINAL_EXIT_CODE = 10
TRAINJOB_CONTAINER = "node"


def kind_of(manifest: Mapping[str, Any]) -> JobKind:
    """The JobKind of a manifest, refusing kinds and API versions kubetrain does not run."""
    kind = manifest.get("kind")
    api_version = manifest.get("apiVersion")
    for known in KINDS:
        if known.kind == kind:
            if known.api_version != api_version:
                raise ManifestError(
                    "apiVersion",
                    f"{kind} {api_version!r} is not supported; use {known.api_version!r}"
                    + (
                        " (mpi-operator v2; MPIJob v1 of the training-operator is not supported)"
                        if known is MPIJOB
                        else ""
                    ),
                )
            return known
    raise ManifestError(
        "kind", f"{kind!r} is not a job kind kubetrain runs; expected one of {', '.join(k.kind for k in KINDS)}"
    )
