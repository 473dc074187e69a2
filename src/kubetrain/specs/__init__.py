"""Typed, self-validating job specs (no kfp, kubernetes or torch imports)."""

from kubetrain.specs.common import (
    EnvVar,
    KeyRef,
    PodSecurity,
    ReplicaSpec,
    Resources,
    RunPolicy,
    Toleration,
    Volume,
    VolumeMount,
    Workspace,
)
from kubetrain.specs.jobs import ElasticPolicy, JobMeta, MPIJobSpec, PSJobSpec, PyTorchJobSpec

JobSpec = PyTorchJobSpec | MPIJobSpec | PSJobSpec

__all__ = [
    "ElasticPolicy",
    "EnvVar",
    "JobMeta",
    "JobSpec",
    "KeyRef",
    "MPIJobSpec",
    "PSJobSpec",
    "PodSecurity",
    "PyTorchJobSpec",
    "ReplicaSpec",
    "Resources",
    "RunPolicy",
    "Toleration",
    "Volume",
    "VolumeMount",
    "Workspace",
]
