"""Pure `spec -> dict` builders, one per job kind, and manifest validation."""

from __future__ import annotations

from kubetrain.manifests.jobset import build_ps_jobset, build_ps_network_policy
from kubetrain.manifests.mpijob import build_mpijob
from kubetrain.manifests.pod import Manifest
from kubetrain.manifests.pytorchjob import build_pytorchjob
from kubetrain.manifests.trainjob import build_trainjob
from kubetrain.specs import JobSpec, MPIJobSpec, PSJobSpec, PyTorchJobSpec, TrainJobSpec


def build_manifest(spec: JobSpec) -> Manifest:
    """The manifest for any job spec."""
    if isinstance(spec, PyTorchJobSpec):
        return build_pytorchjob(spec)
    if isinstance(spec, MPIJobSpec):
        return build_mpijob(spec)
    if isinstance(spec, PSJobSpec):
        return build_ps_jobset(spec)
    if isinstance(spec, TrainJobSpec):
        return build_trainjob(spec)
    raise TypeError(f"no manifest builder for {type(spec).__name__}")


__all__ = [
    "Manifest",
    "build_manifest",
    "build_mpijob",
    "build_ps_jobset",
    "build_ps_network_policy",
    "build_pytorchjob",
    "build_trainjob",
]
