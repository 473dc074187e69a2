"""Kubeflow Trainer v2 training runtimes: kubetrain's own MPI runtime, and Trainer's torch one.

`kubetrain_mpi_runtime()` is the ClusterTrainingRuntime kubetrain ships for ChainerMN over Open
MPI (`deploy/runtimes/kubetrain-mpi.yaml` is this function's output; a golden test keeps them
equal). `torch_distributed_runtime()` is the `torch-distributed` runtime Trainer v2.3 ships, as
far as a TrainJob's outcome depends on it; the local backend resolves TrainJobs against these two
unless it is given others.
"""

from __future__ import annotations

from typing import Any

from kubetrain.manifests.kinds import TRAINJOB
from kubetrain.names import LABEL_MANAGED_BY, MANAGED_BY

Manifest = dict[str, Any]
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
MPI_RUNTIME_NAME = "kubetrain-mpi"
TORCH_RUNTIME_NAME = "torch-distributed"
MPI_SSH_AUTH_MOUNT = "/home/mpiuser/.ssh"
SSHD_PORT = 2222
TORCH_RUNTIME_IMAGE = "pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime"
_UID = 1000

_RESTRICTED_CONTAINER: Manifest = {
    "allowPrivilegeEscalation": False,
    "runAsNonRoot": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def _restricted_pod() -> Manifest:
    return {
        "runAsNonRoot": True,
        "runAsUser": _UID,
        "runAsGroup": _UID,
        "fsGroup": _UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def kubetrain_mpi_runtime(image: str) -> Manifest:
    """kubetrain's ClusterTrainingRuntime for MPI: a launcher running mpirun, nodes running a non-root sshd."""
    node_container: Manifest = {
        "name": "node",
        "image": image,
        "command": ["/usr/sbin/sshd"],
        "args": ["-De", "-f", "/home/mpiuser/.sshd_config"],
        "ports": [{"name": "ssh", "containerPort": SSHD_PORT, "protocol": "TCP"}],
        # The launcher starts once every node is Ready: Ready must mean "sshd accepts connections".
        "readinessProbe": {"tcpSocket": {"port": SSHD_PORT}, "periodSeconds": 2, "failureThreshold": 30},
        "securityContext": dict(_RESTRICTED_CONTAINER),
    }
    launcher_container: Manifest = {
        "name": "node",
        "image": image,
        # One rank's exception ends the job instead of leaving the others blocked in a collective.
        "env": [{"name": "CHAINERMN_FORCE_ABORT_ON_EXCEPTION", "value": "1"}],
        "securityContext": dict(_RESTRICTED_CONTAINER),
    }
    return {
        "apiVersion": TRAINJOB.api_version,
        "kind": "ClusterTrainingRuntime",
        "metadata": {
            "name": MPI_RUNTIME_NAME,
            "labels": {"trainer.kubeflow.org/framework": "mpi", LABEL_MANAGED_BY: MANAGED_BY},
        },
        "spec": {
            "mlPolicy": {
                "numNodes": 1,
                "mpi": {
                    "numProcPerNode": 1,
                    "mpiImplementation": "OpenMPI",
                    "sshAuthMountPath": MPI_SSH_AUTH_MOUNT,
                    "runLauncherAsNode": False,
                },
            },
            "template": {
                "spec": {
                    "network": {"publishNotReadyAddresses": True},
                    "successPolicy": {"operator": "All", "targetReplicatedJobs": ["launcher"]},
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {
                                "spec": {
                                    "template": {
                                        "spec": {
                                            # No API access: a TrainJob's runtime patch cannot turn the token off.
                                            "automountServiceAccountToken": False,
                                            "securityContext": _restricted_pod(),
                                            "containers": [node_container],
                                        }
                                    }
                                }
                            },
                        },
                        {
                            "name": "launcher",
                            "dependsOn": [{"name": "node", "status": "Ready"}],
                            "template": {
                                "metadata": {"labels": {ANCESTOR_LABEL: "trainer"}},
                                "spec": {
                                    "template": {
                                        "spec": {
                                            "automountServiceAccountToken": False,
                                            "securityContext": _restricted_pod(),
                                            "containers": [launcher_container],
                                        }
                                    }
                                },
                            },
                        },
                    ],
                }
            },
        },
    }


def torch_distributed_runtime() -> Manifest:
    """The `torch-distributed` ClusterTrainingRuntime of Trainer v2.3, without its demo command."""
    return {
        "apiVersion": TRAINJOB.api_version,
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": TORCH_RUNTIME_NAME},
        "spec": {
            # v2.3 moved numProcPerNode out of the torch policy; a TrainJob sets trainer.numProcPerNode.
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {
                                "metadata": {"labels": {ANCESTOR_LABEL: "trainer"}},
                                "spec": {
                                    "template": {
                                        "spec": {"containers": [{"name": "node", "image": TORCH_RUNTIME_IMAGE}]}
                                    }
                                },
                            },
                        }
                    ]
                }
            },
        },
    }
