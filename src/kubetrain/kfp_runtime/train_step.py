"""The training steps: spec (via presets) → manifest → launcher → KFP output artifacts.

Each of `pytorch_train`, `chainermn_train` and `ps_train` calls one function here. They share
one flow (:func:`launch_training`): derive the job name from the KFP run and task ids, build the
spec through :mod:`kubetrain.presets` (so `kubetrain render` shows exactly what is submitted),
apply the task's TaskConfig to the training pods, run the job with the launcher on the selected
backend, then copy the model and metrics from the workspace into the step's artifacts and write
the HTML report.
"""

from __future__ import annotations

import dataclasses
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, cast

from kubetrain.errors import InvalidInputError
from kubetrain.kfp_runtime import artifacts, report
from kubetrain.kfp_runtime.artifacts import ArtifactLike, MetricsLike
from kubetrain.kfp_runtime.taskconfig import ExplicitResources, pod_options
from kubetrain.kfp_runtime.workspace import WorkspaceView, backend_kind, make_backend, open_workspace
from kubetrain.launcher import DELETE_AFTER_CHOICES, DeleteAfter, run_job
from kubetrain.manifests import build_manifest
from kubetrain.names import derive_job_name
from kubetrain.presets import PodOptions, TrainingParams
from kubetrain.specs import JobSpec, ReplicaSpec, RunPolicy
from kubetrain.status import JobResult
from kubetrain.train.common import MODEL_NAMES

Framework = Literal["pytorch", "chainermn", "ps"]
# Short enough that every name the operators derive (…-worker-N, JobSet pod host names) fits.
JOB_NAME_MAX = 32
RUNS_DIR = "runs"


@dataclass(frozen=True, kw_only=True)
class StepArtifacts:
    """The artifacts a training step reads and writes."""

    dataset: ArtifactLike
    model: ArtifactLike
    metrics: MetricsLike
    report: ArtifactLike


@dataclass(frozen=True, kw_only=True)
class LaunchSettings:
    """How the job is named, where it runs and how long the launcher waits for it."""

    run_id: str
    task_id: str
    workspace_pvc: str
    timeout_seconds: float
    delete_after: str = "success"
    backoff_limit: int = 3
    namespace: str = ""
    service_account: str = ""

    def __post_init__(self) -> None:
        for name in ("run_id", "task_id"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip() or value.startswith("{{$"):
                raise InvalidInputError(
                    f"{name}: got {value!r}; pass dsl.PIPELINE_JOB_ID_PLACEHOLDER as run_id and "
                    "dsl.PIPELINE_TASK_ID_PLACEHOLDER as task_id, so the job name is derived at run time"
                )
        if not self.timeout_seconds > 0:
            raise InvalidInputError(f"timeout_seconds: got {self.timeout_seconds!r}; expected a positive number")
        if self.delete_after not in DELETE_AFTER_CHOICES:
            raise InvalidInputError(
                f"delete_after: got {self.delete_after!r}; expected one of {', '.join(DELETE_AFTER_CHOICES)}"
            )
        if isinstance(self.backoff_limit, bool) or not isinstance(self.backoff_limit, int) or self.backoff_limit < 0:
            raise InvalidInputError(f"backoff_limit: got {self.backoff_limit!r}; expected an integer >= 0")

    def run_policy(self) -> RunPolicy:
        """Restarts, plus the timeout as the job's own deadline: a backstop should the launcher pod be lost."""
        return RunPolicy(backoff_limit=self.backoff_limit, active_deadline_seconds=max(1, int(self.timeout_seconds)))


@dataclass(frozen=True, kw_only=True)
class Hyperparameters:
    """The training program's flags a component exposes."""

    epochs: int
    batch_size: int
    learning_rate: float
    architecture: str
    seed: int = 0

    def __post_init__(self) -> None:
        # Refused here, before anything is submitted, rather than by every replica's parser.
        if self.architecture not in MODEL_NAMES:
            raise InvalidInputError(
                f"architecture: got {self.architecture!r}; expected one of {', '.join(MODEL_NAMES)}"
            )


@dataclass(frozen=True, kw_only=True)
class JobPlan:
    """What a framework builder gets: the job name, the program flags and the training pods' options."""

    name: str
    params: TrainingParams
    pod: PodOptions
    settings: LaunchSettings

    @property
    def namespace(self) -> str | None:
        """The namespace, None for the backend's default."""
        return self.settings.namespace or None


SpecBuilder = Callable[[JobPlan], JobSpec]


def dataset_location(dataset: ArtifactLike, *, workspace_pvc: str) -> str:
    """The dataset's pod-side path from a `download_dataset` Dataset artifact."""
    meta = dataset.metadata or {}
    path = meta.get("path")
    if not isinstance(path, str) or not path:
        raise InvalidInputError(
            "dataset: the artifact has no 'path' metadata; pass the output of the download_dataset component "
            "(or any Dataset whose metadata names its directory on the workspace volume)"
        )
    claim = meta.get("workspace_pvc")
    if claim and claim != workspace_pvc:
        raise InvalidInputError(
            f"dataset: it lies on claim {claim!r} but this step mounts {workspace_pvc!r}; use the same workspace_pvc"
        )
    return path


def replace_program(command: tuple[str, ...], default: tuple[str, ...], program: tuple[str, ...]) -> tuple[str, ...]:
    """`command` with the default training program replaced by `program`.

    Works for the plain form (`python -m kubetrain.train.x ...`), inside an `mpirun ...` line,
    and under torchrun (`python -m torch.distributed.run -m kubetrain.train.x`), where the
    replacement must be a Python program (`python script.py` or `python -m module`).
    """
    for i in range(len(command) - len(default) + 1):
        if command[i : i + len(default)] == default:
            return command[:i] + program + command[i + len(default) :]
    tail = default[1:]  # ("-m", "kubetrain.train.x") as torchrun receives it
    for i in range(len(command) - len(tail) + 1):
        if command[i : i + len(tail)] == tail:
            if not program or not program[0].startswith("python"):
                raise InvalidInputError(
                    f"command: got {shlex.join(program)!r}; an elastic job starts the program under torchrun, so "
                    "the command must be 'python SCRIPT' or 'python -m MODULE'"
                )
            return command[:i] + program[1:] + command[i + len(tail) :]
    raise InvalidInputError(f"command: cannot find the training program {shlex.join(default)!r} to replace")


def with_program(replica: ReplicaSpec, default: tuple[str, ...], program: tuple[str, ...]) -> ReplicaSpec:
    """`replica` running `program` instead of the default one (unchanged when `program` is empty)."""
    if not program:
        return replica
    return dataclasses.replace(replica, command=replace_program(replica.command, default, program))


def parse_command(command: str) -> tuple[str, ...]:
    """A command override as a shell-quoted string; empty means the default program."""
    try:
        return tuple(shlex.split(command))
    except ValueError as e:
        raise InvalidInputError(f"command: got {command!r}; expected a shell-quoted command line ({e})") from e


def _report_details(
    result: JobResult, plan: JobPlan, framework: str, image: str, job_seconds: float
) -> list[tuple[str, object]]:
    details: list[tuple[str, object]] = [
        ("framework", framework),
        ("job", f"{result.kind} {result.namespace}/{result.name}"),
        ("status", f"{result.phase.value} {result.reason}".strip()),
        ("backend", result.backend),
        ("image", image),
        ("model", plan.params.model),
        ("data", plan.params.data_dir),
        ("output", plan.params.output_dir),
    ]
    details.append(("submit to end (s)", round(job_seconds, 1)))
    return details


def launch_training(
    *,
    framework: Framework,
    image: str,
    build: SpecBuilder,
    hyper: Hyperparameters,
    settings: LaunchSettings,
    resources: ExplicitResources,
    task_config: object,
    outputs: StepArtifacts,
) -> tuple[str, str]:
    """Run one training job end to end and fill the step's outputs; returns (job name, final status)."""
    data_dir = dataset_location(outputs.dataset, workspace_pvc=settings.workspace_pvc)
    kind = backend_kind()
    workspace: WorkspaceView = open_workspace(settings.workspace_pvc, kind=kind)
    name = derive_job_name(prefix=framework, run_id=settings.run_id, task_id=settings.task_id, max_length=JOB_NAME_MAX)
    params = TrainingParams(
        data_dir=data_dir,
        output_dir=workspace.pod(RUNS_DIR, name, "output"),
        checkpoint_dir=workspace.pod(RUNS_DIR, name, "checkpoints"),
        epochs=hyper.epochs,
        batch_size=hyper.batch_size,
        lr=hyper.learning_rate,
        model=hyper.architecture,
        seed=hyper.seed,
    )
    pod = pod_options(
        task_config,
        explicit=resources,
        workspace_claim=settings.workspace_pvc,
        service_account=settings.service_account or None,
    )
    plan = JobPlan(name=name, params=params, pod=pod, settings=settings)
    manifest = build_manifest(build(plan))
    print(f"{framework}: job {name} on the {kind} backend, output {params.output_dir}", flush=True)
    backend = make_backend(kind, namespace=plan.namespace)
    started = time.monotonic()
    try:
        result = run_job(
            manifest,
            backend=backend,
            timeout_seconds=settings.timeout_seconds,
            delete_after=cast(DeleteAfter, settings.delete_after),
        )
    finally:
        backend.close()
    # Measured here rather than from the job's status times, which have one-second resolution.
    job_seconds = time.monotonic() - started
    output_dir = workspace.local(params.output_dir)
    metrics = artifacts.read_metrics(output_dir)
    model_meta: dict[str, Any] = {
        "framework": framework,
        "job_name": name,
        "job_kind": result.kind,
        "status": result.phase.value,
        "architecture": params.model,
        "image": image,
        "workspace_pvc": settings.workspace_pvc,
        "workspace_path": params.output_dir,
        "test_accuracy": float(metrics["test_accuracy"]),
        "world_size": int(metrics["world_size"]),
    }
    artifacts.copy_model(output_dir, outputs.model, metadata=model_meta)
    logged = artifacts.log_metrics(outputs.metrics, metrics, job_seconds=job_seconds)
    title = f"{framework} training: {name}"
    artifacts.write_text(
        outputs.report,
        report.training_report(
            title=title, metrics=metrics, details=_report_details(result, plan, framework, image, job_seconds)
        ),
    )
    print(f"{framework}: {result.phase.value}; " + ", ".join(f"{k} {v:.4g}" for k, v in logged.items()), flush=True)
    return name, result.phase.value
