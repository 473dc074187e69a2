"""One typed request per training component: its inputs, validated once, and the spec they make.

A component hands its inputs over by the names it declares (`learning_rate`, `architecture`,
`ps_replicas`, ...); the request keeps those names, so an error names the input the user set.
Each framework checks `architecture` against its own programs' models. The one translation into
the training program's vocabulary (`--lr`, `--model`) is :meth:`TrainingRequest.training_params`,
and the one translation into a job is :meth:`TrainingRequest.to_spec`, through :mod:`kubetrain.presets`
(so `kubetrain render` shows exactly what a component submits).
"""

from __future__ import annotations

import abc
import dataclasses
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Self, cast

from kubetrain.errors import InvalidInputError
from kubetrain.launcher import DELETE_AFTER_CHOICES, DeleteAfter
from kubetrain.names import is_dns1123_subdomain
from kubetrain.presets import (
    CHAINERMN_IMAGE,
    CHAINERMN_PROGRAM,
    MPI_RUNTIME,
    PS_IMAGE,
    PYTORCH_IMAGE,
    TORCH_PROGRAM,
    TORCH_RUNTIME,
    PodOptions,
    Program,
    TrainingParams,
    UserProgram,
    mpi_job_spec,
    mpi_trainjob_spec,
    ps_job_spec,
    pytorch_job_spec,
    pytorch_trainjob_spec,
)
from kubetrain.ps.common.model_names import MODEL_NAMES as PS_MODEL_NAMES
from kubetrain.specs import JobSpec, RunPolicy
from kubetrain.train.common import MODEL_NAMES as DDP_MODEL_NAMES

Framework = Literal["pytorch", "chainermn", "ps"]
# The inputs that identify a task at run time; every training component takes them.
IDENTITY_INPUTS = ("run_id", "task_id", "task_name")


@dataclass(frozen=True, kw_only=True)
class JobPlan:
    """What a request needs at run time to become a spec: the job's name, program flags and pod options."""

    name: str
    params: TrainingParams
    pod: PodOptions


def _positive_int(name: str, value: object, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidInputError(f"{name}: got {value!r}; expected an integer >= {minimum}")


def _choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise InvalidInputError(f"{name}: got {value!r}; expected one of {', '.join(choices)}")


@dataclass(frozen=True, kw_only=True)
class TrainingRequest(abc.ABC):
    """The inputs every training component shares; one subclass per framework adds its own."""

    framework: ClassVar[Framework]
    models: ClassVar[tuple[str, ...]]
    default_image: ClassVar[str]

    run_id: str
    task_id: str
    task_name: str
    workspace_pvc: str = "kubetrain-workspace"
    epochs: int = 5
    batch_size: int = 32
    learning_rate: float = 0.002
    architecture: str = "mlp"
    seed: int = 0
    image: str = ""
    cpu: str = ""
    memory: str = ""
    gpus: int = 0
    timeout_seconds: float = 86400  # real training runs for hours; a day, as the peers default to
    delete_after: str = "success"
    backoff_limit: int = 3
    namespace: str = ""
    service_account: str = ""
    manifest_patch: dict[str, Any] | None = None
    image_pull_secrets: list[str] | None = None

    def __post_init__(self) -> None:
        for name in IDENTITY_INPUTS:
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip() or value.startswith("{{$"):
                raise InvalidInputError(
                    f"{name}: got {value!r}; pass dsl.PIPELINE_JOB_ID_PLACEHOLDER as run_id, "
                    "dsl.PIPELINE_TASK_ID_PLACEHOLDER as task_id and dsl.PIPELINE_TASK_NAME_PLACEHOLDER as "
                    "task_name, so each task's job name is derived at run time (the KFP backend resolves "
                    "these only when passed as the task's arguments, not as input defaults)"
                )
        _positive_int("epochs", self.epochs)
        _positive_int("batch_size", self.batch_size)
        lr = self.learning_rate
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not lr > 0:
            raise InvalidInputError(f"learning_rate: got {lr!r}; expected a number > 0")
        # Refused here, before anything is submitted, rather than by every replica's parser.
        _choice("architecture", self.architecture, self.models)
        if not self.timeout_seconds > 0:
            raise InvalidInputError(f"timeout_seconds: got {self.timeout_seconds!r}; expected a positive number")
        _choice("delete_after", self.delete_after, DELETE_AFTER_CHOICES)
        _positive_int("backoff_limit", self.backoff_limit, minimum=0)
        for secret in self.image_pull_secrets or ():
            if not isinstance(secret, str) or not is_dns1123_subdomain(secret):
                raise InvalidInputError(
                    f"image_pull_secrets: got {secret!r}; expected the name of a Secret of type dockerconfigjson"
                )
        if self.manifest_patch is not None and not isinstance(self.manifest_patch, dict):
            raise InvalidInputError(
                f"manifest_patch: got {self.manifest_patch!r}; expected a JSON object (an RFC 7386 merge patch)"
            )

    @classmethod
    def from_inputs(cls, inputs: Mapping[str, Any]) -> Self:
        """The request from a component's inputs, by their declared names."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(inputs) - known)
        if unknown:
            raise InvalidInputError(
                f"{cls.framework} training: unknown inputs {', '.join(unknown)}; "
                f"expected some of {', '.join(sorted(known))}"
            )
        missing = [name for name in IDENTITY_INPUTS if name not in inputs]
        if missing:
            raise InvalidInputError(
                f"{', '.join(missing)}: missing; pass dsl.PIPELINE_JOB_ID_PLACEHOLDER as run_id, "
                "dsl.PIPELINE_TASK_ID_PLACEHOLDER as task_id and dsl.PIPELINE_TASK_NAME_PLACEHOLDER as task_name"
            )
        return cls(**inputs)

    @property
    def task_key(self) -> str:
        """The task's identity within its run: the task id and the task's name.

        On the KFP backend the task id is the enclosing DAG's execution id, shared by every task of
        that DAG; the name tells them apart. It goes into the job name and the task label, so two
        tasks side by side never adopt each other's job while a retried task re-attaches to its own.
        """
        return f"{self.task_id}.{self.task_name}"

    @property
    def chosen_image(self) -> str:
        """The training image: the one given, else kubetrain's image for this framework and version."""
        return self.image or self.default_image

    @property
    def job_namespace(self) -> str | None:
        """The job's namespace, None for the backend's default (the launcher pod's own)."""
        return self.namespace or None

    @property
    def delete_policy(self) -> DeleteAfter:
        """`delete_after`, checked on construction."""
        return cast(DeleteAfter, self.delete_after)

    def run_policy(self) -> RunPolicy:
        """Restarts, plus the timeout as the job's own deadline: a backstop should the launcher pod be lost."""
        return RunPolicy(backoff_limit=self.backoff_limit, active_deadline_seconds=max(1, int(self.timeout_seconds)))

    def training_params(self, *, data_dir: str, output_dir: str, checkpoint_dir: str) -> TrainingParams:
        """The program's flags: the component's names become the program's (`--lr`, `--model`)."""
        return TrainingParams(
            data_dir=data_dir,
            output_dir=output_dir,
            checkpoint_dir=checkpoint_dir,
            epochs=self.epochs,
            batch_size=self.batch_size,
            lr=self.learning_rate,
            model=self.architecture,
            seed=self.seed,
        )

    def _job_identity(self, plan: JobPlan) -> dict[str, Any]:
        """The keyword arguments every preset takes alike."""
        return {
            "name": plan.name,
            "params": plan.params,
            "image": self.chosen_image,
            "pod": plan.pod,
            "workspace_pvc": self.workspace_pvc,
            "run_policy": self.run_policy(),
            "namespace": self.job_namespace,
            "kfp_run_id": self.run_id,
            "kfp_task_id": self.task_key,
        }

    def _trainjob_identity(self, plan: JobPlan) -> dict[str, Any]:
        """The preset arguments of a TrainJob: no run policy, the timeout as its own deadline."""
        identity = self._job_identity(plan)
        del identity["run_policy"]  # restarts are the runtime's (its JobSet failure policy)
        identity["active_deadline_seconds"] = max(1, int(self.timeout_seconds))
        return identity

    @property
    def user_program(self) -> UserProgram | None:
        """The user's own program (command and args as lists); None for kubetrain's trainer."""
        return None

    @abc.abstractmethod
    def to_spec(self, plan: JobPlan) -> JobSpec:
        """The job spec this request makes, for the job named and placed by `plan`."""


def _check_runtime(job_api: str, runtime: str) -> None:
    if runtime and job_api != "trainjob":
        raise InvalidInputError(f"runtime: got {runtime!r}; a training runtime is only used with job_api=trainjob")
    if runtime and not is_dns1123_subdomain(runtime):
        raise InvalidInputError(f"runtime: got {runtime!r}; expected the name of a ClusterTrainingRuntime")


def parse_command(command: str) -> tuple[str, ...]:
    """A command override as a shell-quoted string; empty means the default program."""
    try:
        return tuple(shlex.split(command))
    except ValueError as e:
        raise InvalidInputError(f"command: got {command!r}; expected a shell-quoted command line ({e})") from e


def _strings(name: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise InvalidInputError(f"{name}: got {value!r}; expected a list of strings, e.g. ['python', 'train.py']")
    return tuple(value)


def choose_program(command: object, args: object, default: tuple[str, ...]) -> Program:
    """The program a request runs, checked.

    - `command` a list: the user's own program, run as given with `args` (no kubetrain flags);
    - `command` a string (the library's older form): a shell-quoted replacement of kubetrain's
      program, which still gets kubetrain's flags;
    - `command` empty: kubetrain's own trainer.
    """
    extra = _strings("args", args) if args is not None else ()
    if isinstance(command, str):
        if extra:
            raise InvalidInputError("args: given with a string command; pass command as a list to run your own program")
        return parse_command(command) or default
    program = _strings("command", command) if command is not None else ()
    if not program:
        if extra:
            raise InvalidInputError(
                f"args: got {list(extra)!r} without a command; set command (a list) to run your own program"
            )
        return default
    if not all(program):
        raise InvalidInputError(f"command: got {list(program)!r}; expected non-empty strings")
    return UserProgram(command=program, args=extra)


@dataclass(frozen=True, kw_only=True)
class PyTorchRequest(TrainingRequest):
    """`pytorch_train`: a PyTorchJob running DDP (master alone, + workers, or elastic)."""

    framework: ClassVar[Framework] = "pytorch"
    models: ClassVar[tuple[str, ...]] = DDP_MODEL_NAMES
    default_image: ClassVar[str] = PYTORCH_IMAGE

    workers: int = 1
    elastic_min_workers: int = 0
    elastic_max_workers: int = 0
    backend: str = "gloo"
    command: list[str] | str | None = None
    args: list[str] | None = None
    job_api: str = "pytorchjob"
    runtime: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        _choice("backend", self.backend, ("gloo", "nccl"))
        _choice("job_api", self.job_api, ("pytorchjob", "trainjob"))
        _check_runtime(self.job_api, self.runtime)
        if self.job_api == "trainjob" and (self.elastic_min_workers or self.elastic_max_workers):
            raise InvalidInputError(
                "elastic_min_workers/elastic_max_workers: a TrainJob is not elastic in Trainer v2.3; "
                "use job_api=pytorchjob for an elastic job, or leave both 0"
            )
        elastic = self.elastic  # raises on bad bounds, now rather than when the spec is built
        program = self.program
        argv = program.command if isinstance(program, UserProgram) else program
        under_torchrun = elastic is not None or self.job_api == "trainjob"
        if under_torchrun and not (len(argv) > 1 and argv[0].startswith("python")):
            raise InvalidInputError(
                f"command: got {self.command!r}; an elastic job starts the program under torchrun (so does a "
                "TrainJob), so the command must be 'python SCRIPT' or 'python -m MODULE'"
            )

    @property
    def program(self) -> Program:
        """kubetrain's DDP trainer, or the program `command` names."""
        return choose_program(self.command, self.args, TORCH_PROGRAM)

    @property
    def user_program(self) -> UserProgram | None:
        """The user's own program, when `command` is a list."""
        return self.program if isinstance(self.program, UserProgram) else None

    @property
    def elastic(self) -> tuple[int, int] | None:
        """(min, max) workers of an elastic job; None for a fixed-size one."""
        low, high = self.elastic_min_workers, self.elastic_max_workers
        if not low and not high:
            return None
        if low < 1 or high < low:
            raise InvalidInputError(
                f"elastic_min_workers/elastic_max_workers: got {low}/{high}; expected 1 <= min <= max "
                "(both 0 for a fixed-size job)"
            )
        return (low, high)

    def to_spec(self, plan: JobPlan) -> JobSpec:
        """The PyTorchJob spec, or the TrainJob spec with job_api=trainjob."""
        if self.job_api == "trainjob":
            return pytorch_trainjob_spec(
                **self._trainjob_identity(plan),
                workers=self.workers,
                backend=cast(Literal["gloo", "nccl"], self.backend),
                program=self.program,
                runtime=self.runtime or TORCH_RUNTIME,
            )
        return pytorch_job_spec(
            **self._job_identity(plan),
            workers=self.workers,
            elastic=self.elastic,
            backend=cast(Literal["gloo", "nccl"], self.backend),
            program=self.program,
        )


@dataclass(frozen=True, kw_only=True)
class ChainerMNRequest(TrainingRequest):
    """`chainermn_train`: an MPIJob whose launcher runs mpirun over the ChainerMN program."""

    framework: ClassVar[Framework] = "chainermn"
    models: ClassVar[tuple[str, ...]] = DDP_MODEL_NAMES
    default_image: ClassVar[str] = CHAINERMN_IMAGE

    workers: int = 2
    slots_per_worker: int = 1
    command: list[str] | str | None = None
    args: list[str] | None = None
    job_api: str = "mpijob"
    runtime: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        _ = self.program  # refused now, before anything is submitted
        _choice("job_api", self.job_api, ("mpijob", "trainjob"))
        _check_runtime(self.job_api, self.runtime)

    def to_spec(self, plan: JobPlan) -> JobSpec:
        """The MPIJob spec, or the TrainJob spec with job_api=trainjob."""
        if self.job_api == "trainjob":
            return mpi_trainjob_spec(
                **self._trainjob_identity(plan),
                workers=self.workers,
                slots_per_worker=self.slots_per_worker,
                program=self.program,
                runtime=self.runtime or MPI_RUNTIME,
            )
        return mpi_job_spec(
            **self._job_identity(plan),
            workers=self.workers,
            slots_per_worker=self.slots_per_worker,
            program=self.program,
        )

    @property
    def program(self) -> Program:
        """kubetrain's ChainerMN trainer, or the program `command` names (run by mpirun on every rank)."""
        return choose_program(self.command, self.args, CHAINERMN_PROGRAM)

    @property
    def user_program(self) -> UserProgram | None:
        """The user's own program, when `command` is a list."""
        return self.program if isinstance(self.program, UserProgram) else None


@dataclass(frozen=True, kw_only=True)
class PSRequest(TrainingRequest):
    """`ps_train`: a JobSet with the parameter-server master, servers and workers."""

    framework: ClassVar[Framework] = "ps"
    models: ClassVar[tuple[str, ...]] = PS_MODEL_NAMES
    default_image: ClassVar[str] = PS_IMAGE

    ps_replicas: int = 2
    workers: int = 3
    mode: str = "async"
    records_per_task: int = 64
    optimizer: str = "adam"

    def __post_init__(self) -> None:
        super().__post_init__()
        _choice("mode", self.mode, ("async", "sync"))
        _choice("optimizer", self.optimizer, ("sgd", "adam"))

    def to_spec(self, plan: JobPlan) -> JobSpec:
        """The parameter-server JobSet spec."""
        return ps_job_spec(
            **self._job_identity(plan),
            ps=self.ps_replicas,
            workers=self.workers,
            mode=cast(Literal["async", "sync"], self.mode),
            records_per_task=self.records_per_task,
            optimizer=cast(Literal["sgd", "adam"], self.optimizer),
        )
