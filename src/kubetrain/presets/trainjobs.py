"""The Kubeflow Trainer v2 TrainJobs kubetrain submits."""

from __future__ import annotations

from typing import Literal

from kubetrain.images import (
    CHAINERMN_IMAGE,
    PYTORCH_IMAGE,
)
from kubetrain.presets.defaults import (
    CHAINERMN_PROGRAM,
    TORCH_PROGRAM,
    Program,
    mpirun,
    resolve_program,
    torch_program,
    under_torchrun,
)
from kubetrain.presets.settings import JobSettings
from kubetrain.specs import (
    TrainJobSpec,
)
from kubetrain.specs.trainjob import LAUNCHER_JOB, NODE_JOB

# Kubeflow Trainer v2: the runtime Trainer ships for torch, and kubetrain's own for MPI (deploy/runtimes/).
TORCH_RUNTIME = "torch-distributed"
MPI_RUNTIME = "kubetrain-mpi"


def _deadline(job: JobSettings) -> int | None:
    # A TrainJob takes only the deadline of the job's run policy: its restarts are its runtime's
    # (the JobSet's failure policy), so a backoff limit has no place on it.
    return job.run_policy.active_deadline_seconds if job.run_policy else None


def pytorch_trainjob_spec(
    job: JobSettings,
    *,
    workers: int = 0,
    backend: Literal["gloo", "nccl"] = "gloo",
    program: Program = TORCH_PROGRAM,
    runtime: str = TORCH_RUNTIME,
) -> TrainJobSpec:
    """DDP training as a TrainJob on the `torch-distributed` runtime: 1 + `workers` nodes.

    The Trainer injects the rendezvous as `PET_*` variables, which torchrun reads, so the program
    runs under torchrun (one process per node on CPUs, one per GPU) and must be a Python program.
    """
    program, args, pod = torch_program(program, job.params, job.pod, backend)
    torchrun = under_torchrun(program, "torchrun runs it")
    trainer = pod.replica(image=job.image or PYTORCH_IMAGE, replicas=1 + workers, command=torchrun, args=args)
    return TrainJobSpec(
        meta=job.meta("pytorch-train"),
        runtime=runtime,
        trainer=trainer,
        # Explicit: the runtime's "auto" would start one process per CPU of a CPU-only node.
        num_proc_per_node=max(1, pod.resources.gpus),
        workspace=job.workspace,
        active_deadline_seconds=_deadline(job),
    )


def mpi_trainjob_spec(
    job: JobSettings,
    *,
    workers: int = 2,
    slots_per_worker: int = 1,
    program: Program = CHAINERMN_PROGRAM,
    runtime: str = MPI_RUNTIME,
) -> TrainJobSpec:
    """ChainerMN training as a TrainJob on kubetrain's MPI runtime: the launcher runs mpirun over
    `workers` nodes × `slots_per_worker` ranks (the Trainer writes the hostfile)."""
    params = job.params
    program, args, pod, forward = resolve_program(program, params, job.pod, tuple(params.program_args()))
    launcher_cmd = mpirun(workers * slots_per_worker, forward, program)
    trainer = pod.replica(image=job.image or CHAINERMN_IMAGE, replicas=workers, command=launcher_cmd, args=args)
    return TrainJobSpec(
        meta=job.meta("chainermn-train"),
        runtime=runtime,
        trainer=trainer,
        num_proc_per_node=slots_per_worker,
        patched_jobs=(NODE_JOB, LAUNCHER_JOB),
        workspace=job.workspace,
        active_deadline_seconds=_deadline(job),
    )
