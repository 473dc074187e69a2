"""The Kubeflow Trainer v2 TrainJobs kubetrain submits."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from kubetrain.images import (
    CHAINERMN_IMAGE,
    PYTORCH_IMAGE,
)
from kubetrain.presets.defaults import (
    CHAINERMN_PROGRAM,
    TORCH_PROGRAM,
    PodOptions,
    Program,
    TrainingParams,
    job_meta,
    mpirun,
    resolve_program,
    torch_program,
    under_torchrun,
    workspace_for,
)
from kubetrain.specs import (
    TrainJobSpec,
)
from kubetrain.specs.trainjob import LAUNCHER_JOB, NODE_JOB

# Kubeflow Trainer v2: the runtime Trainer ships for torch, and kubetrain's own for MPI (deploy/runtimes/).
TORCH_RUNTIME = "torch-distributed"
MPI_RUNTIME = "kubetrain-mpi"


def pytorch_trainjob_spec(
    *,
    name: str,
    params: TrainingParams,
    workers: int = 0,
    image: str = PYTORCH_IMAGE,
    backend: Literal["gloo", "nccl"] = "gloo",
    pod: PodOptions | None = None,
    workspace_pvc: str | None = None,
    active_deadline_seconds: int | None = None,
    namespace: str | None = None,
    kfp_run_id: str | None = None,
    kfp_task_id: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    program: Program = TORCH_PROGRAM,
    runtime: str = TORCH_RUNTIME,
) -> TrainJobSpec:
    """DDP training as a TrainJob on the `torch-distributed` runtime: 1 + `workers` nodes.

    The Trainer injects the rendezvous as `PET_*` variables, which torchrun reads, so the program
    runs under torchrun (one process per node on CPUs, one per GPU) and must be a Python program.
    """
    program, args, pod = torch_program(program, params, pod or PodOptions(), backend)
    torchrun = under_torchrun(program, "torchrun runs it")
    trainer = pod.replica(image=image, replicas=1 + workers, command=torchrun, args=args)
    return TrainJobSpec(
        meta=job_meta(
            name, namespace, kfp_run_id, kfp_task_id, "pytorch-train", labels=labels, annotations=annotations
        ),
        runtime=runtime,
        trainer=trainer,
        # Explicit: the runtime's "auto" would start one process per CPU of a CPU-only node.
        num_proc_per_node=max(1, pod.resources.gpus),
        workspace=workspace_for(workspace_pvc),
        active_deadline_seconds=active_deadline_seconds,
    )


def mpi_trainjob_spec(
    *,
    name: str,
    params: TrainingParams,
    workers: int = 2,
    slots_per_worker: int = 1,
    image: str = CHAINERMN_IMAGE,
    pod: PodOptions | None = None,
    workspace_pvc: str | None = None,
    active_deadline_seconds: int | None = None,
    namespace: str | None = None,
    kfp_run_id: str | None = None,
    kfp_task_id: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    program: Program = CHAINERMN_PROGRAM,
    runtime: str = MPI_RUNTIME,
) -> TrainJobSpec:
    """ChainerMN training as a TrainJob on kubetrain's MPI runtime: the launcher runs mpirun over
    `workers` nodes × `slots_per_worker` ranks (the Trainer writes the hostfile)."""
    program, args, pod, forward = resolve_program(program, params, pod or PodOptions(), tuple(params.program_args()))
    launcher_cmd = mpirun(workers * slots_per_worker, forward, program)
    trainer = pod.replica(image=image, replicas=workers, command=launcher_cmd, args=args)
    return TrainJobSpec(
        meta=job_meta(
            name, namespace, kfp_run_id, kfp_task_id, "chainermn-train", labels=labels, annotations=annotations
        ),
        runtime=runtime,
        trainer=trainer,
        num_proc_per_node=slots_per_worker,
        patched_jobs=(NODE_JOB, LAUNCHER_JOB),
        workspace=workspace_for(workspace_pvc),
        active_deadline_seconds=active_deadline_seconds,
    )
