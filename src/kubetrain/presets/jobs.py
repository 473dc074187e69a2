"""The training-operator v1, mpi-operator and parameter-server JobSet jobs kubetrain submits."""

from __future__ import annotations

import dataclasses
from typing import Literal

from kubetrain.errors import SpecError
from kubetrain.images import (
    CHAINERMN_IMAGE,
    PS_IMAGE,
    PYTORCH_IMAGE,
)
from kubetrain.manifests.jobset import master_address, ps_addresses
from kubetrain.presets.defaults import (
    CHAINERMN_PROGRAM,
    PS_CONTROL_PRIORITY_CLASS,
    PS_MASTER_PORT,
    PS_MASTER_SERVICE_ACCOUNT,
    PS_SERVER_PORT,
    TORCH_PROGRAM,
    Program,
    mpirun,
    resolve_program,
    torch_program,
    under_torchrun,
)
from kubetrain.presets.settings import JobSettings
from kubetrain.ps.common.model_names import is_module_path
from kubetrain.ps.common.tasks import check_straggler_factor
from kubetrain.specs import (
    ElasticPolicy,
    MPIJobSpec,
    PSJobSpec,
    PyTorchJobSpec,
    ReplicaSpec,
    RunPolicy,
    limits,
)


def pytorch_job_spec(
    job: JobSettings,
    *,
    workers: int = 0,
    elastic: tuple[int, int] | None = None,
    backend: Literal["gloo", "nccl"] = "gloo",
    program: Program = TORCH_PROGRAM,
) -> PyTorchJobSpec:
    """DDP training with `program` (default `python -m kubetrain.train.torch_ddp`): master alone,
    + workers, or elastic.

    Elastic jobs have workers only and start the program under torchrun, which reads the
    rendezvous from the `PET_*` variables the operator injects; their program must therefore be a
    Python one (`python SCRIPT ...` or `python -m MODULE ...`), which torchrun runs itself.
    """
    image = job.image or PYTORCH_IMAGE
    program, args, pod = torch_program(program, job.params, job.pod, backend)
    policy = ElasticPolicy(min_replicas=elastic[0], max_replicas=elastic[1]) if elastic else None
    if policy is not None:
        torchrun = under_torchrun(program, "an elastic job starts the program under torchrun")
        master = None
        worker: ReplicaSpec | None = pod.replica(
            image=image, replicas=max(workers, policy.min_replicas), command=torchrun, args=args
        )
    else:
        master = pod.replica(image=image, replicas=1, command=program, args=args)
        worker = pod.replica(image=image, replicas=workers, command=program, args=args) if workers else None
    return PyTorchJobSpec(
        meta=job.meta("pytorch-train"),
        master=master,
        worker=worker,
        backend=backend,
        elastic=policy,
        run_policy=job.run_policy or RunPolicy(backoff_limit=3),
        workspace=job.workspace,
    )


def mpi_job_spec(
    job: JobSettings,
    *,
    workers: int = 2,
    slots_per_worker: int = 1,
    program: Program = CHAINERMN_PROGRAM,
) -> MPIJobSpec:
    """ChainerMN training: the launcher runs mpirun over workers × slots ranks of `program`
    (default `python -m kubetrain.train.chainermn_mpi`)."""
    image = job.image or CHAINERMN_IMAGE
    params = job.params
    program, args, pod, forward = resolve_program(program, params, job.pod, tuple(params.program_args()))
    launcher_cmd = mpirun(workers * slots_per_worker, forward, program)
    return MPIJobSpec(
        meta=job.meta("chainermn-train"),
        launcher=pod.replica(image=image, replicas=1, command=launcher_cmd, args=args, light=True),
        worker=pod.replica(image=image, replicas=workers, command=()),
        slots_per_worker=slots_per_worker,
        run_policy=job.run_policy or RunPolicy(backoff_limit=3),
        workspace=job.workspace,
    )


def _ps_workers(workers: int, min_workers: int, max_workers: int, mode: str, sharding: str) -> tuple[int, int]:
    """(worker pods, the master's minimum): `workers` for a fixed-size job (trains with whoever is
    there), or max_workers pods and min_workers as the minimum for an elastic one."""
    if not (min_workers or max_workers):
        return workers, 1
    if not 1 <= min_workers <= max_workers:
        raise SpecError(
            "min_workers, max_workers", (min_workers, max_workers), "1 <= min_workers <= max_workers (both 0: workers)"
        )
    if min_workers < max_workers and mode == "sync":
        raise SpecError("mode", mode, "async for an elastic job (sync waits for every worker's gradient each step)")
    if min_workers < max_workers and sharding == "static":
        raise SpecError("sharding", sharding, "dynamic for an elastic job (static slots need a fixed worker count)")
    return max_workers, min_workers


def ps_job_spec(
    job: JobSettings,
    *,
    ps_replicas: int = 2,
    workers: int = 3,
    min_workers: int = 0,
    max_workers: int = 0,
    mode: Literal["async", "sync"] = "async",
    records_per_task: int = 64,
    optimizer: Literal["sgd", "adam"] = "adam",
    model_module: str = "",
    straggler_factor: float = 3.0,
    sharding: Literal["dynamic", "static"] = "dynamic",
) -> PSJobSpec:
    """Parameter-server training: `kubetrain.ps.master`, `.server` and `.worker` in one JobSet.

    With `model_module`, the workers train the model that module of the image defines
    (`kubetrain.ps.worker.user_model`) instead of `params.model`, and are told the servers'
    optimizer to check the module's `optimizer(lr)` against.

    Elastic (`min_workers`/`max_workers`, in place of `workers`): max_workers worker pods are
    asked for; those that cannot be placed wait Pending and join when room appears; the master
    trains while at least min_workers are there. The master runs as its own service account
    (it watches its workers' pods), and unless the job names a priority class, the master and the
    servers run at kubetrain-ps-control, above the workers, so preemption takes workers first.
    """
    if model_module and not is_module_path(model_module):
        raise SpecError("model_module", model_module, "an importable module path such as my_team.ctr_model")
    limits.RECORDS_PER_TASK.check("records_per_task", records_per_task)
    check_straggler_factor(straggler_factor)
    pods, minimum = _ps_workers(workers, min_workers, max_workers, mode, sharding)
    params, pod, image = job.params, job.pod, job.image or PS_IMAGE
    master_addr = master_address(name=job.name, port=PS_MASTER_PORT)
    ps_addrs = ",".join(ps_addresses(name=job.name, port=PS_SERVER_PORT, count=ps_replicas))
    state_dir = f"{params.output_dir}/ps-state"
    # On the job's volume, not in the manifest: see kubetrain.ps.common.jobtoken.
    token_file = f"{state_dir}/job-token"
    checkpoint_dir = params.checkpoint_dir or f"{params.output_dir}/ps-checkpoints"
    master_args: tuple[str, ...] = (
        "--port", str(PS_MASTER_PORT), "--data", params.data_dir, "--output", params.output_dir,
        "--state-dir", state_dir, "--num-ps", str(ps_replicas), "--ps-addrs", ps_addrs,
        "--epochs", str(params.epochs), "--records-per-task", str(records_per_task), "--mode", mode,
        "--model", params.model, "--seed", str(params.seed), "--batch-size", str(params.batch_size),
        "--job-token-file", token_file, "--min-workers", str(minimum),
        "--straggler-factor", repr(float(straggler_factor)),
    )  # fmt: skip
    if sharding == "static":
        master_args += ("--sharding", "static", "--num-workers", str(pods))
    server_args: tuple[str, ...] = (
        "--port", str(PS_SERVER_PORT), "--num-shards", str(ps_replicas), "--checkpoint-dir", checkpoint_dir,
        "--mode", mode, "--optimizer", optimizer, "--lr", repr(float(params.lr)), "--job-token-file", token_file,
    )  # fmt: skip
    if mode == "sync":
        # One model version per round of every worker's gradient (ElasticDL's grads_to_wait).
        server_args += ("--grads-to-wait", str(pods))
    # Workers ask the master for the batch size and the model, so every worker trains alike.
    worker_args: tuple[str, ...] = (
        "--master", master_addr, "--ps-addrs", ps_addrs, "--data", params.data_dir, "--job-token-file", token_file,
    )  # fmt: skip
    if model_module:
        master_args += ("--model-module", model_module)
        worker_args += ("--optimizer", optimizer, "--lr", repr(float(params.lr)))
    # Preemption takes the lowest priority first: the workers, whose tasks go back on the queue,
    # not a server holding a shard. A priority class the job names applies to every pod.
    control_class = pod.priority_class or PS_CONTROL_PRIORITY_CLASS
    master = pod.replica(
        image=image, replicas=1, command=("python", "-m", "kubetrain.elastic.master"), args=master_args, light=True
    )
    server = pod.replica(
        image=image, replicas=ps_replicas, command=("python", "-m", "kubetrain.ps.server"), args=server_args, light=True
    )
    return PSJobSpec(
        meta=job.meta("ps-train"),
        master=dataclasses.replace(master, service_account=PS_MASTER_SERVICE_ACCOUNT, priority_class=control_class),
        ps=dataclasses.replace(server, priority_class=control_class),
        worker=pod.replica(
            image=image, replicas=pods, command=("python", "-m", "kubetrain.ps.worker"), args=worker_args
        ),
        master_port=PS_MASTER_PORT,
        ps_port=PS_SERVER_PORT,
        mode=mode,
        state_dir=state_dir,
        checkpoint_dir=checkpoint_dir,
        run_policy=job.run_policy or RunPolicy(),
        workspace=job.workspace,
    )
