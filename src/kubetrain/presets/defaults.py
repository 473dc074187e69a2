"""kubetrain's images, ports, programs and the options every preset takes (flags, pod settings)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from kubetrain.errors import SpecError
from kubetrain.specs import (
    EnvVar,
    NodeAffinity,
    ReplicaSpec,
    Resources,
    Toleration,
    Volume,
    VolumeMount,
    Workspace,
    limits,
)
from kubetrain.specs.limits import check_learning_rate

WORKSPACE_MOUNT = "/workspace"
PS_MASTER_PORT = 50051
# The PS master's own identity (deploy/rbac.yaml: it may list and watch its namespace's pods) and
# the class its master and servers run at, above the workers (deploy/priority-classes.yaml).
PS_MASTER_SERVICE_ACCOUNT = "kubetrain-ps-master"
PS_CONTROL_PRIORITY_CLASS = "kubetrain-ps-control"
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
        limits.EPOCHS.check("epochs", self.epochs)
        limits.BATCH_SIZE.check("batch_size", self.batch_size)
        limits.SEED.check("seed", self.seed)
        check_learning_rate(self.lr, "lr", noun="learning rate")
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
    affinity: NodeAffinity | None = None
    priority_class: str | None = None

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
            affinity=self.affinity,
            priority_class=self.priority_class,
        )


def resolve_program(
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


def torch_program(
    program: Program, params: TrainingParams, pod: PodOptions, backend: str
) -> tuple[tuple[str, ...], tuple[str, ...], PodOptions]:
    """(command, args, pod options) of a DDP program: kubetrain's flags plus `--backend`, or a user's program."""
    command, args, pod, _ = resolve_program(program, params, pod, (*params.program_args(), "--backend", backend))
    return command, args, pod


def under_torchrun(command: tuple[str, ...], why: str) -> tuple[str, ...]:
    """`command` (a Python program) started by torchrun, which then reads the rendezvous from `PET_*`.

    torchrun runs the Python program itself, so the command must be `python SCRIPT ...` or
    `python -m MODULE ...`; `why` says what starts it under torchrun (elastic job, TrainJob).
    """
    if len(command) < 2 or not command[0].startswith("python"):
        raise SpecError("command", " ".join(command), f"'python SCRIPT' or 'python -m MODULE': {why}")
    return ("python", "-m", "torch.distributed.run", *command[1:])


def under_mpi4py(command: tuple[str, ...]) -> tuple[str, ...]:
    """A Python program run by mpi4py's runner (`python -m mpi4py SCRIPT|-m MODULE ...`); others as they are.

    A rank that exits non-zero (`sys.exit(3)`) would otherwise call MPI_Finalize at exit and wait
    there for the ranks blocked in a collective on it: the job hung until its deadline. The runner
    aborts the whole job instead, as CHAINERMN_FORCE_ABORT_ON_EXCEPTION does for an exception.
    """
    if not command or not command[0].rsplit("/", 1)[-1].startswith("python"):
        return command
    # Python's own options stay before the runner, which refuses them ("Unknown option: -u").
    at = 1
    while at < len(command) and command[at].startswith("-") and command[at] not in ("-", "-m", "-c"):
        at += 2 if command[at] in _PYTHON_OPTIONS_WITH_VALUE else 1
    if at >= len(command) or command[at : at + 2] == ("-m", "mpi4py"):
        return command
    return (*command[:at], "-m", "mpi4py", *command[at:])


# The interpreter's options that take the next word as their value (`python -W ignore`).
_PYTHON_OPTIONS_WITH_VALUE = frozenset({"-W", "-X", "--check-hash-based-pycs"})


def mpirun(ranks: int, forward: tuple[str, ...], command: tuple[str, ...]) -> tuple[str, ...]:
    """The launcher's mpirun over `ranks` ranks of `command`, forwarding the env names in `forward`."""
    # -x forwards the abort switch to every rank, so an exception on one rank ends the whole
    # job instead of leaving the others blocked in a collective (chainermn#236).
    return (
        "mpirun", "-n", str(ranks), "--bind-to", "none", "-x", "CHAINERMN_FORCE_ABORT_ON_EXCEPTION",
        "-x", "PYTHONUNBUFFERED", *forward, *under_mpi4py(command),
    )  # fmt: skip


def workspace_for(claim: str | None) -> Workspace | None:
    """The workspace claim mounted at the usual place, if there is one."""
    return Workspace(claim_name=claim, mount_path=WORKSPACE_MOUNT) if claim else None
