"""The project's own jobs: images, training programs and sensible defaults for each kind.

`kubetrain render` and the KFP components both build their specs here, so what `render` prints
is exactly what a component submits. Image tags are tied to the package version in this one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from kubetrain import __version__
from kubetrain.errors import SpecError
from kubetrain.manifests.jobset import master_address, ps_addresses
from kubetrain.specs import (
    ElasticPolicy,
    EnvVar,
    JobMeta,
    MPIJobSpec,
    PSJobSpec,
    PyTorchJobSpec,
    ReplicaSpec,
    Resources,
    RunPolicy,
    Toleration,
    TrainJobSpec,
    Volume,
    VolumeMount,
    Workspace,
)
from kubetrain.specs.trainjob import LAUNCHER_JOB, NODE_JOB

IMAGE_REGISTRY = "ghcr.io/kubetrain"
IMAGE_TAG = __version__
IMAGE_NAMES = ("launcher", "pytorch", "chainermn", "ps")


def image_ref(name: str, *, registry: str = IMAGE_REGISTRY, tag: str = IMAGE_TAG) -> str:
    """The reference of one of the project's images (`launcher`, `pytorch`, `chainermn`, `ps`)."""
    if name not in IMAGE_NAMES:
        raise SpecError("image", name, f"one of {', '.join(IMAGE_NAMES)}")
    return f"{registry}/{name}:{tag}"


LAUNCHER_IMAGE = image_ref("launcher")
PYTORCH_IMAGE = image_ref("pytorch")
CHAINERMN_IMAGE = image_ref("chainermn")
PS_IMAGE = image_ref("ps")

WORKSPACE_MOUNT = "/workspace"
PS_MASTER_PORT = 50051
PS_SERVER_PORT = 50052
TORCH_PROGRAM = ("python", "-m", "kubetrain.train.torch_ddp")
CHAINERMN_PROGRAM = ("python", "-m", "kubetrain.train.chainermn_mpi")


@dataclass(frozen=True, kw_only=True)
class TrainingParams:
    """What every training program takes on its command line (DESIGN.md, "Programs")."""

    data_dir: str = f"{WORKSPACE_MOUNT}/datasets/digits"
    output_dir: str = f"{WORKSPACE_MOUNT}/runs/output"
    checkpoint_dir: str | None = f"{WORKSPACE_MOUNT}/runs/checkpoints"
    epochs: int = 5
    batch_size: int = 32
    lr: float = 0.002  # Adam, as the training programs use
    model: str = "mlp"
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SpecError(name, value, "an integer ≥ 1")
        if not isinstance(self.lr, (int, float)) or isinstance(self.lr, bool) or not self.lr > 0:
            raise SpecError("lr", self.lr, "a learning rate > 0")
        for name in ("data_dir", "output_dir"):
            if not getattr(self, name):
                raise SpecError(name, getattr(self, name), "a directory path")

    def program_args(self) -> list[str]:
        """The shared flags of `kubetrain.train.torch_ddp` / `chainermn_mpi`."""
        args = ["--data", self.data_dir, "--output", self.output_dir]
        if self.checkpoint_dir:
            args += ["--checkpoint-dir", self.checkpoint_dir]
        args += [
            "--epochs", str(self.epochs),
            "--batch-size", str(self.batch_size),
            "--lr", repr(float(self.lr)),
            "--model", self.model,
            "--seed", str(self.seed),
        ]  # fmt: skip
        return args


# What a user's own program finds in its environment instead of kubetrain's flags.
WORKSPACE_ENV = ("KUBETRAIN_DATA_DIR", "KUBETRAIN_OUTPUT_DIR", "KUBETRAIN_CHECKPOINT_DIR")


@dataclass(frozen=True, kw_only=True)
class UserProgram:
    """A user's own program in the user's image: run exactly as given, no kubetrain flags added.

    It finds the data, output and checkpoint directories in :data:`WORKSPACE_ENV` beside the
    operator's own environment (rendezvous, ranks), and leaves its results in the output directory.
    """

    command: tuple[str, ...]
    args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.command or not all(isinstance(part, str) and part for part in self.command):
            raise SpecError("command", self.command, "a non-empty list of strings, e.g. ['python', 'train.py']")
        if not all(isinstance(arg, str) for arg in self.args):
            raise SpecError("args", self.args, "a list of strings")


Program = tuple[str, ...] | UserProgram


@dataclass(frozen=True, kw_only=True)
class PodOptions:
    """Scheduling and environment applied to the training pods (the component's TaskConfig lands here)."""

    resources: Resources = field(default_factory=Resources)
    env: tuple[EnvVar, ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    volumes: tuple[Volume, ...] = ()
    volume_mounts: tuple[VolumeMount, ...] = ()
    image_pull_secrets: tuple[str, ...] = ()
    service_account: str | None = None

    def replica(
        self,
        *,
        image: str,
        replicas: int,
        command: tuple[str, ...],
        args: tuple[str, ...] = (),
        restart_policy: Literal["Never", "OnFailure", "ExitCode", "Always"] | None = None,
        light: bool = False,
    ) -> ReplicaSpec:
        """A replica with these options. `light` replicas (launchers, masters) skip GPU requests."""
        resources = Resources(cpu=self.resources.cpu, memory=self.resources.memory) if light else self.resources
        return ReplicaSpec(
            image=image,
            replicas=replicas,
            command=command,
            args=args,
            env=self.env,
            resources=resources,
            node_selector=self.node_selector,
            tolerations=self.tolerations,
            volumes=self.volumes,
            volume_mounts=self.volume_mounts,
            image_pull_secrets=self.image_pull_secrets,
            service_account=self.service_account,
            restart_policy=restart_policy,
        )


def _meta(name: str, namespace: str | None, run_id: str | None, task_id: str | None, component: str) -> JobMeta:
    return JobMeta(
        name=name,
        namespace=namespace,
        kfp_run_id=run_id,
        kfp_task_id=task_id,
        labels={"kubetrain.io/component": component},
    )


def _program(
    program: Program, params: TrainingParams, pod: PodOptions, flags: tuple[str, ...]
) -> tuple[tuple[str, ...], tuple[str, ...], PodOptions, tuple[str, ...]]:
    """(command, args, pod options, env names for mpirun -x): kubetrain's flags, or a user's program and env."""
    if isinstance(program, UserProgram):
        checkpoints = params.checkpoint_dir or f"{params.output_dir}/checkpoints"
        values = (params.data_dir, params.output_dir, checkpoints)
        env = tuple(EnvVar(name=n, value=v) for n, v in zip(WORKSPACE_ENV, values, strict=True))
        forward = tuple(x for n in WORKSPACE_ENV for x in ("-x", n))
        return program.command, program.args, replace(pod, env=(*pod.env, *env)), forward
    if not program:
        raise SpecError("command", program, "a program to run, e.g. ('python', 'train.py')")
    return program, flags, pod, ()


def _workspace(claim: str | None) -> Workspace | None:
    return Workspace(claim_name=claim, mount_path=WORKSPACE_MOUNT) if claim else None


def pytorch_job_spec(
    *,
    name: str,
    params: TrainingParams,
    workers: int = 0,
    elastic: tuple[int, int] | None = None,
    image: str = PYTORCH_IMAGE,
    backend: Literal["gloo", "nccl"] = "gloo",
    pod: PodOptions | None = None,
    workspace_pvc: str | None = None,
    run_policy: RunPolicy | None = None,
    namespace: str | None = None,
    kfp_run_id: str | None = None,
    kfp_task_id: str | None = None,
    program: Program = TORCH_PROGRAM,
) -> PyTorchJobSpec:
    """DDP training with `program` (default `python -m kubetrain.train.torch_ddp`): master alone,
    + workers, or elastic.

    Elastic jobs have workers only and start the program under torchrun, which reads the
    rendezvous from the `PET_*` variables the operator injects; their program must therefore be a
    Python one (`python SCRIPT ...` or `python -m MODULE ...`), which torchrun runs itself.
    """
    flags = (*params.program_args(), "--backend", backend)
    program, args, pod, _ = _program(program, params, pod or PodOptions(), flags)
    policy = ElasticPolicy(min_replicas=elastic[0], max_replicas=elastic[1]) if elastic else None
    if policy is not None:
        if not program[0].startswith("python") or len(program) < 2:
            raise SpecError(
                "command",
                " ".join(program),
                "'python SCRIPT' or 'python -m MODULE': an elastic job starts the program under torchrun",
            )
        torchrun = ("python", "-m", "torch.distributed.run", *program[1:])
        master = None
        worker: ReplicaSpec | None = pod.replica(
            image=image, replicas=max(workers, policy.min_replicas), command=torchrun, args=args
        )
    else:
        master = pod.replica(image=image, replicas=1, command=program, args=args)
        worker = pod.replica(image=image, replicas=workers, command=program, args=args) if workers else None
    return PyTorchJobSpec(
        meta=_meta(name, namespace, kfp_run_id, kfp_task_id, "pytorch-train"),
        master=master,
        worker=worker,
        backend=backend,
        elastic=policy,
        run_policy=run_policy or RunPolicy(backoff_limit=3),
        workspace=_workspace(workspace_pvc),
    )


def mpi_job_spec(
    *,
    name: str,
    params: TrainingParams,
    workers: int = 2,
    slots_per_worker: int = 1,
    image: str = CHAINERMN_IMAGE,
    pod: PodOptions | None = None,
    workspace_pvc: str | None = None,
    run_policy: RunPolicy | None = None,
    namespace: str | None = None,
    kfp_run_id: str | None = None,
    kfp_task_id: str | None = None,
    program: Program = CHAINERMN_PROGRAM,
) -> MPIJobSpec:
    """ChainerMN training: the launcher runs mpirun over workers × slots ranks of `program`
    (default `python -m kubetrain.train.chainermn_mpi`)."""
    program, args, pod, forward = _program(program, params, pod or PodOptions(), tuple(params.program_args()))
    total = workers * slots_per_worker
    # -x forwards the abort switch to every rank, so an exception on one rank ends the whole
    # job instead of leaving the others blocked in a collective (chainermn#236).
    launcher_cmd = (
        "mpirun", "-n", str(total), "--bind-to", "none", "-x", "CHAINERMN_FORCE_ABORT_ON_EXCEPTION",
        "-x", "PYTHONUNBUFFERED", *forward, *program,
    )  # fmt: skip
    return MPIJobSpec(
        meta=_meta(name, namespace, kfp_run_id, kfp_task_id, "chainermn-train"),
        launcher=pod.replica(image=image, replicas=1, command=launcher_cmd, args=args, light=True),
        worker=pod.replica(image=image, replicas=workers, command=()),
        slots_per_worker=slots_per_worker,
        run_policy=run_policy or RunPolicy(backoff_limit=3),
        workspace=_workspace(workspace_pvc),
    )


def ps_job_spec(
    *,
    name: str,
    params: TrainingParams,
    ps: int = 2,
    workers: int = 3,
    mode: Literal["async", "sync"] = "async",
    records_per_task: int = 64,
    optimizer: Literal["sgd", "adam"] = "adam",
    image: str = PS_IMAGE,
    pod: PodOptions | None = None,
    workspace_pvc: str | None = None,
    run_policy: RunPolicy | None = None,
    namespace: str | None = None,
    kfp_run_id: str | None = None,
    kfp_task_id: str | None = None,
) -> PSJobSpec:
    """Parameter-server training: `kubetrain.ps.master`, `.server` and `.worker` in one JobSet."""
    pod = pod or PodOptions()
    master_addr = master_address(name=name, port=PS_MASTER_PORT)
    ps_addrs = ",".join(ps_addresses(name=name, port=PS_SERVER_PORT, count=ps))
    state_dir = f"{params.output_dir}/ps-state"
    checkpoint_dir = params.checkpoint_dir or f"{params.output_dir}/ps-checkpoints"
    master_args = (
        "--port", str(PS_MASTER_PORT), "--data", params.data_dir, "--output", params.output_dir,
        "--state-dir", state_dir, "--num-ps", str(ps), "--ps-addrs", ps_addrs,
        "--epochs", str(params.epochs), "--records-per-task", str(records_per_task), "--mode", mode,
        "--model", params.model, "--seed", str(params.seed), "--batch-size", str(params.batch_size),
    )  # fmt: skip
    server_args: tuple[str, ...] = (
        "--port", str(PS_SERVER_PORT), "--num-shards", str(ps), "--checkpoint-dir", checkpoint_dir,
        "--mode", mode, "--optimizer", optimizer, "--lr", repr(float(params.lr)),
    )  # fmt: skip
    if mode == "sync":
        # One model version per round of every worker's gradient (ElasticDL's grads_to_wait).
        server_args += ("--grads-to-wait", str(workers))
    # Workers ask the master for the batch size and the model, so every worker trains alike.
    worker_args = ("--master", master_addr, "--ps-addrs", ps_addrs, "--data", params.data_dir)
    return PSJobSpec(
        meta=_meta(name, namespace, kfp_run_id, kfp_task_id, "ps-train"),
        master=pod.replica(
            image=image, replicas=1, command=("python", "-m", "kubetrain.ps.master"), args=master_args, light=True
        ),
        ps=pod.replica(
            image=image, replicas=ps, command=("python", "-m", "kubetrain.ps.server"), args=server_args, light=True
        ),
        worker=pod.replica(
            image=image, replicas=workers, command=("python", "-m", "kubetrain.ps.worker"), args=worker_args
        ),
        master_port=PS_MASTER_PORT,
        ps_port=PS_SERVER_PORT,
        mode=mode,
        state_dir=state_dir,
        checkpoint_dir=checkpoint_dir,
        run_policy=run_policy or RunPolicy(),
        workspace=_workspace(workspace_pvc),
    )


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
    program: Program = TORCH_PROGRAM,
    runtime: str = TORCH_RUNTIME,
) -> TrainJobSpec:
    """DDP training as a TrainJob on the `torch-distributed` runtime: 1 + `workers` nodes.

    The Trainer injects the rendezvous as `PET_*` variables, which torchrun reads, so the program
    runs under torchrun (one process per node on CPUs, one per GPU) and must be a Python program.
    """
    flags = (*params.program_args(), "--backend", backend)
    program, args, pod, _ = _program(program, params, pod or PodOptions(), flags)
    if len(program) < 2 or not program[0].startswith("python"):
        raise SpecError("command", " ".join(program), "'python SCRIPT' or 'python -m MODULE': torchrun runs it")
    trainer = pod.replica(
        image=image,
        replicas=1 + workers,
        command=("python", "-m", "torch.distributed.run", *program[1:]),
        args=args,
    )
    return TrainJobSpec(
        meta=_meta(name, namespace, kfp_run_id, kfp_task_id, "pytorch-train"),
        runtime=runtime,
        trainer=trainer,
        # Explicit: the runtime's "auto" would start one process per CPU of a CPU-only node.
        num_proc_per_node=max(1, pod.resources.gpus),
        workspace=_workspace(workspace_pvc),
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
    program: Program = CHAINERMN_PROGRAM,
    runtime: str = MPI_RUNTIME,
) -> TrainJobSpec:
    """ChainerMN training as a TrainJob on kubetrain's MPI runtime: the launcher runs mpirun over
    `workers` nodes × `slots_per_worker` ranks (the Trainer writes the hostfile)."""
    program, args, pod, forward = _program(program, params, pod or PodOptions(), tuple(params.program_args()))
    launcher_cmd = (
        "mpirun", "-n", str(workers * slots_per_worker), "--bind-to", "none",
        "-x", "CHAINERMN_FORCE_ABORT_ON_EXCEPTION", "-x", "PYTHONUNBUFFERED", *forward, *program,
    )  # fmt: skip
    trainer = pod.replica(image=image, replicas=workers, command=launcher_cmd, args=args)
    return TrainJobSpec(
        meta=_meta(name, namespace, kfp_run_id, kfp_task_id, "chainermn-train"),
        runtime=runtime,
        trainer=trainer,
        num_proc_per_node=slots_per_worker,
        patched_jobs=(NODE_JOB, LAUNCHER_JOB),
        workspace=_workspace(workspace_pvc),
        active_deadline_seconds=active_deadline_seconds,
    )
