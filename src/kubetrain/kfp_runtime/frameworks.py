"""One typed request and one step per training component: its inputs, checked once, become one job.

`pytorch_train`, `chainermn_train` and `ps_train` each call one function here, `train_pytorch`,
`train_chainermn` or `train_ps`, with their inputs by name: the function's parameters are the
component's inputs, with the same defaults. It builds its framework's request from them
(`PyTorchRequest`, `ChainerMNRequest`, `PSRequest`: validated once, on construction, under the
inputs' own names) and hands it to :func:`~kubetrain.kfp_runtime.train_step.launch_training`.
Each request checks what only its framework knows (`architecture` against its own models, its
topology, its job API) and says how its spec is built, handing the job's common settings to its
builder in :mod:`kubetrain.presets` as one value; what the three share is in
:mod:`.request_base` and, for the two that run one program on an operator's job or a TrainJob,
:mod:`.program_request`. `kubetrain render` builds the same requests, so it prints what a
component submits.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, cast

from kubetrain.errors import InvalidInputError
from kubetrain.kfp_runtime.artifacts import ArtifactLike, MetricsLike
from kubetrain.kfp_runtime.exits import step
from kubetrain.kfp_runtime.program_request import TRAINJOB, ProgramRequest
from kubetrain.kfp_runtime.request_base import (
    DEFAULT_ARCHITECTURE,
    Framework,
    JobPlan,
    TrainingRequest,
    check_choice,
    replica_count,
)
from kubetrain.kfp_runtime.task_identity import IDENTITY_FIELDS, resolve_identity
from kubetrain.kfp_runtime.train_step import StepArtifacts, launch_training
from kubetrain.presets import (
    CHAINERMN_IMAGE,
    CHAINERMN_PROGRAM,
    MPI_RUNTIME,
    PS_IMAGE,
    PYTORCH_IMAGE,
    TORCH_PROGRAM,
    TORCH_RUNTIME,
    UserProgram,
    mpi_job_spec,
    mpi_trainjob_spec,
    ps_job_spec,
    pytorch_job_spec,
    pytorch_trainjob_spec,
)
from kubetrain.ps.common.model_names import MODEL_NAMES as PS_MODEL_NAMES
from kubetrain.ps.common.model_names import is_module_path
from kubetrain.specs import JobSpec, limits
from kubetrain.specs.limits import Count
from kubetrain.train.model_shapes import MODEL_NAMES as DDP_MODEL_NAMES

__all__ = [
    "ChainerMNRequest",
    "PSRequest",
    "PyTorchRequest",
    "train_chainermn",
    "train_ps",
    "train_pytorch",
]

# torch's c10d rendezvous: once the minimum of nodes has joined, it waits this long for more.
RDZV_LAST_CALL_SECONDS = 30
StepOutputs = tuple[str, str]  # (job name, final status): the components' job_name and status outputs


@dataclass(frozen=True, kw_only=True)
class PyTorchRequest(ProgramRequest):
    """`pytorch_train`: a PyTorchJob running DDP (master alone, + workers, or elastic), or a TrainJob."""

    framework: ClassVar[Framework] = "pytorch"
    models: ClassVar[tuple[str, ...]] = DDP_MODEL_NAMES
    default_image: ClassVar[str] = PYTORCH_IMAGE
    default_program: ClassVar[tuple[str, ...]] = TORCH_PROGRAM
    operator_api: ClassVar[str] = "pytorchjob"
    count_inputs: ClassVar[Mapping[str, Count]] = {
        "workers": replica_count(0, "worker replicas besides the master; 0 for a master-only job"),
        "elastic_min_workers": replica_count(0, "the least workers of an elastic job; 0 for a fixed-size job"),
        "elastic_max_workers": replica_count(0, "the most workers of an elastic job; 0 for a fixed-size job"),
    }

    workers: int = 1
    elastic_min_workers: int = 0
    elastic_max_workers: int = 0
    backend: str = "gloo"
    job_api: str = "pytorchjob"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("backend", self.backend, ("gloo", "nccl"))
        if self.job_api == TRAINJOB and (self.elastic_min_workers or self.elastic_max_workers):
            raise InvalidInputError(
                "elastic_min_workers/elastic_max_workers: a TrainJob is not elastic in Trainer v2.3; "
                "use job_api=pytorchjob for an elastic job, or leave both 0"
            )
        elastic = self.elastic  # raises on bad bounds, now rather than when the spec is built
        program = self.program
        argv = program.command if isinstance(program, UserProgram) else program
        under_torchrun = elastic is not None or self.job_api == TRAINJOB
        if under_torchrun and not (len(argv) > 1 and argv[0].startswith("python")):
            raise InvalidInputError(
                f"command: got {self.command!r}; an elastic job starts the program under torchrun (so does a "
                "TrainJob), so the command must be 'python SCRIPT' or 'python -m MODULE'"
            )

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

    def start_notice(self) -> str | None:
        """What an elastic job's torchrun waits for before rank 0 starts, when fewer than its maximum start."""
        bounds = self.elastic
        if bounds is None or self.workers >= bounds[1]:
            return None
        low, high = bounds
        workers = self.workers
        return (
            f"elastic job: {workers} worker{'s' if workers != 1 else ''} start, up to {high} may join; once {low} "
            f"{'have' if low != 1 else 'has'} joined, torchrun's rendezvous waits about {RDZV_LAST_CALL_SECONDS} s "
            f"for more before rank 0 starts (set workers={high} to start at once)"
        )

    @property
    def dist_backend(self) -> Literal["gloo", "nccl"]:
        """`backend`, checked on construction."""
        return cast(Literal["gloo", "nccl"], self.backend)

    def to_spec(self, plan: JobPlan) -> JobSpec:
        """The PyTorchJob spec, or with job_api=trainjob a TrainJob of 1 + workers nodes under torchrun."""
        job, program = self.job_settings(plan), self.program
        if self.job_api == TRAINJOB:
            # Restarts are the runtime's (its JobSet): the TrainJob takes only the run policy's deadline.
            runtime = self.runtime or TORCH_RUNTIME
            return pytorch_trainjob_spec(
                job, workers=self.workers, backend=self.dist_backend, program=program, runtime=runtime
            )
        return pytorch_job_spec(
            job, workers=self.workers, elastic=self.elastic, backend=self.dist_backend, program=program
        )


@step
def train_pytorch(
    *, dataset: ArtifactLike, model: ArtifactLike, metrics: MetricsLike, report: ArtifactLike, task_config: object,
    run_id: str = "", task_id: str = "", task_name: str = "", workspace_pvc: str = "kubetrain-workspace",
    workers: int = 1, elastic_min_workers: int = 0, elastic_max_workers: int = 0,
    epochs: int = 5, batch_size: int = 32, learning_rate: float = 0.002, architecture: str = "mlp",
    backend: str = "gloo", seed: int = 0, image: str = "", command: list[str] | str | None = None,
    args: list[str] | None = None, cpu: str = "", memory: str = "", gpus: int = 0, timeout_seconds: float = 86400,
    start_timeout_seconds: float = 600, delete_after: str = "success", backoff_limit: int = 3, namespace: str = "",
    service_account: str = "", image_pull_secrets: list[str] | None = None, labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None, priority_class: str = "",
    manifest_patch: dict[str, Any] | None = None, job_api: str = "pytorchjob", runtime: str = "",
) -> StepOutputs:  # fmt: skip
    """The `pytorch_train` step: a PyTorchJob running DDP (or a TrainJob); its parameters are the component's."""
    return _run(PyTorchRequest, locals())


@dataclass(frozen=True, kw_only=True)
class ChainerMNRequest(ProgramRequest):
    """`chainermn_train`: an MPIJob whose launcher runs mpirun over the ChainerMN program, or a TrainJob."""

    framework: ClassVar[Framework] = "chainermn"
    models: ClassVar[tuple[str, ...]] = DDP_MODEL_NAMES
    default_image: ClassVar[str] = CHAINERMN_IMAGE
    default_program: ClassVar[tuple[str, ...]] = CHAINERMN_PROGRAM
    operator_api: ClassVar[str] = "mpijob"
    count_inputs: ClassVar[Mapping[str, Count]] = {
        "workers": replica_count(1, "MPI worker replicas; mpirun needs at least one"),
        "slots_per_worker": limits.SLOTS_PER_WORKER,
    }

    workers: int = 2
    slots_per_worker: int = 1
    job_api: str = "mpijob"

    def to_spec(self, plan: JobPlan) -> JobSpec:
        """The MPIJob spec, or with job_api=trainjob a TrainJob whose launcher runs mpirun over `workers` nodes."""
        job, slots = self.job_settings(plan), self.slots_per_worker
        if self.job_api == TRAINJOB:
            # Restarts are the runtime's (its JobSet): the TrainJob takes only the run policy's deadline.
            runtime = self.runtime or MPI_RUNTIME
            return mpi_trainjob_spec(
                job, workers=self.workers, slots_per_worker=slots, program=self.program, runtime=runtime
            )
        return mpi_job_spec(job, workers=self.workers, slots_per_worker=slots, program=self.program)


@step
def train_chainermn(
    *, dataset: ArtifactLike, model: ArtifactLike, metrics: MetricsLike, report: ArtifactLike, task_config: object,
    run_id: str = "", task_id: str = "", task_name: str = "", workspace_pvc: str = "kubetrain-workspace",
    workers: int = 2, slots_per_worker: int = 1, epochs: int = 5, batch_size: int = 32,
    learning_rate: float = 0.002, architecture: str = "mlp", seed: int = 0, image: str = "",
    command: list[str] | str | None = None, args: list[str] | None = None, cpu: str = "", memory: str = "",
    gpus: int = 0, timeout_seconds: float = 86400, start_timeout_seconds: float = 600, delete_after: str = "success",
    backoff_limit: int = 3, namespace: str = "", service_account: str = "", image_pull_secrets: list[str] | None = None,
    labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None, priority_class: str = "",
    manifest_patch: dict[str, Any] | None = None, job_api: str = "mpijob", runtime: str = "",
) -> StepOutputs:  # fmt: skip
    """The `chainermn_train` step: an MPIJob running mpirun (or a TrainJob); its parameters are the component's."""
    return _run(ChainerMNRequest, locals())


@dataclass(frozen=True, kw_only=True)
class PSRequest(TrainingRequest):
    """`ps_train`: a JobSet with the parameter-server master, servers and workers."""

    framework: ClassVar[Framework] = "ps"
    models: ClassVar[tuple[str, ...]] = PS_MODEL_NAMES
    default_image: ClassVar[str] = PS_IMAGE
    count_inputs: ClassVar[Mapping[str, Count]] = {
        "ps_replicas": replica_count(1, "parameter servers holding the model's shards"),
        "workers": replica_count(1, "workers pulling tasks from the master"),
        "min_workers": replica_count(0, "the fewest workers an elastic job trains with; 0: a fixed-size job"),
        "max_workers": replica_count(0, "the most workers an elastic job asks for; 0: a fixed-size job"),
        "records_per_task": limits.RECORDS_PER_TASK,
    }

    ps_replicas: int = 2
    workers: int = 3
    min_workers: int = 0
    max_workers: int = 0
    straggler_factor: float = 3.0
    mode: str = "async"
    records_per_task: int = 64
    optimizer: str = "adam"
    model_module: str = ""
    # Asynchronous updates from stale versions need more passes than DDP's 5 (docs/testing.md).
    epochs: int = 10

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("mode", self.mode, ("async", "sync"))
        check_choice("optimizer", self.optimizer, ("sgd", "adam"))
        if self.model_module and not is_module_path(self.model_module):
            raise InvalidInputError(
                f"model_module: got {self.model_module!r}; expected an importable module path such as "
                "my_team.ctr_model (Python identifiers joined by dots, importable in the training image)"
            )
        if self.model_module and self.architecture != DEFAULT_ARCHITECTURE:
            raise InvalidInputError(
                f"architecture: got {self.architecture!r} with model_module={self.model_module!r}; the module's "
                f"model replaces the built-in ones: leave architecture at {DEFAULT_ARCHITECTURE}, or model_module empty"
            )

    @property
    def model_name(self) -> str:
        """The user's model module, or the built-in architecture."""
        return self.model_module or self.architecture

    def preflight(self, backend: str) -> None:
        """On the local backend the pods import from this machine's Python: check the module's contract now.

        On a cluster the module lives in the training image, which the launcher cannot import from;
        there every worker checks it before it trains anything.
        """
        if self.model_module and backend == "local":
            # torch is imported only here: the launcher image has none, and needs none on a cluster.
            from kubetrain.ps.common.optimizers import OptimizerSpec  # numpy: only for this local check
            from kubetrain.ps.worker.user_model import load_contract

            # Importing torch and the module can take a minute on a busy machine: say what happens.
            print(f"{self.framework}: checking model module {self.model_module} here (importing torch)", flush=True)
            started = time.monotonic()
            servers = OptimizerSpec(name=self.optimizer, lr=self.learning_rate)
            load_contract(self.model_module, lr=self.learning_rate, servers=servers)
            took = f"{time.monotonic() - started:.0f} s"
            print(f"{self.framework}: model module {self.model_module} meets the contract ({took})", flush=True)

    def to_spec(self, plan: JobPlan) -> JobSpec:
        """The parameter-server JobSet spec."""
        return ps_job_spec(
            self.job_settings(plan),
            ps_replicas=self.ps_replicas,
            workers=self.workers,
            min_workers=self.min_workers,
            max_workers=self.max_workers,
            straggler_factor=self.straggler_factor,
            mode=cast(Literal["async", "sync"], self.mode),
            records_per_task=self.records_per_task,
            optimizer=cast(Literal["sgd", "adam"], self.optimizer),
            model_module=self.model_module,
        )


@step
def train_ps(
    *, dataset: ArtifactLike, model: ArtifactLike, metrics: MetricsLike, report: ArtifactLike, task_config: object,
    run_id: str = "", task_id: str = "", task_name: str = "", workspace_pvc: str = "kubetrain-workspace",
    ps_replicas: int = 2, workers: int = 3, min_workers: int = 0, max_workers: int = 0, straggler_factor: float = 3.0,
    mode: str = "async", records_per_task: int = 64, optimizer: str = "adam", epochs: int = 10, batch_size: int = 32,
    learning_rate: float = 0.002, architecture: str = "mlp", model_module: str = "", seed: int = 0, image: str = "",
    cpu: str = "", memory: str = "", gpus: int = 0,
    timeout_seconds: float = 86400, start_timeout_seconds: float = 600, delete_after: str = "success",
    backoff_limit: int = 3, namespace: str = "", service_account: str = "", image_pull_secrets: list[str] | None = None,
    labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None, priority_class: str = "",
    manifest_patch: dict[str, Any] | None = None,
) -> StepOutputs:  # fmt: skip
    """The `ps_train` step: a parameter-server JobSet (master, servers, workers); its parameters are the component's."""
    return _run(PSRequest, locals())


def _run(request_type: type[TrainingRequest], step_inputs: Mapping[str, Any]) -> StepOutputs:
    """A training step from its parameters (`locals()` of the step: exactly its inputs, by name).

    The artifacts and the TaskConfig go apart; the task's identity is read from KFP where the
    inputs leave it out; the rest is the request, built and checked once.
    """
    inputs = dict(step_inputs)
    outputs = StepArtifacts(
        dataset=inputs.pop("dataset"), model=inputs.pop("model"), metrics=inputs.pop("metrics"),
        report=inputs.pop("report"),
    )  # fmt: skip
    task_config = inputs.pop("task_config")
    # Read only when an identity input is left out: a caller's own artifacts may have no URI.
    given = all(inputs.get(name) for name in IDENTITY_FIELDS)
    identity = resolve_identity(inputs, output_uri="" if given else str(getattr(outputs.model, "uri", "")))
    if identity.source != "inputs":
        print(f"{request_type.framework}: run {identity.run_id}, task {identity.task_id} ({identity.source})")
    named = {**inputs, "run_id": identity.run_id, "task_id": identity.task_id, "task_name": identity.task_name}
    return launch_training(request_type.from_inputs(named), outputs=outputs, task_config=task_config)
