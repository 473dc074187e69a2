"""Typed, self-validating job specs (no kfp, kubernetes or torch imports)."""

from kubetrain.specs import limits
from kubetrain.specs.common import (
    MAX_REPLICAS,
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
from kubetrain.specs.scheduling import (
    NodeAffinity,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PreferredSchedulingTerm,
)
from kubetrain.specs.trainjob import TrainJobSpec

JobSpec = PyTorchJobSpec | MPIJobSpec | PSJobSpec | TrainJobSpec

__all__ = [
    "MAX_REPLICAS",
    "ElasticPolicy",
    "EnvVar",
    "JobMeta",
    "JobSpec",
    "KeyRef",
    "MPIJobSpec",
    "NodeAffinity",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "PSJobSpec",
    "PodSecurity",
    "PreferredSchedulingTerm",
    "PyTorchJobSpec",
    "ReplicaSpec",
    "Resources",
    "RunPolicy",
    "Toleration",
    "TrainJobSpec",
    "Volume",
    "VolumeMount",
    "Workspace",
    "limits",
]
