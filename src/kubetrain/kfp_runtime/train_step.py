"""The training steps' shared flow: request → spec → manifest → launcher → KFP output artifacts.

Each of `pytorch_train`, `chainermn_train` and `ps_train` ends in :func:`launch_training` with its
validated request: derive the job name from the KFP run and task ids, build the spec from the
request (through :mod:`kubetrain.presets`, so `kubetrain render` shows exactly what is
submitted), apply the task's TaskConfig to the training pods, run the job with the launcher on
the selected backend, then copy the model and metrics from the workspace into the step's
artifacts and write the HTML report.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from kubetrain.backends import open_backend
from kubetrain.errors import InvalidInputError
from kubetrain.kfp_runtime import artifacts, report
from kubetrain.kfp_runtime.artifacts import ArtifactLike, MetricsLike
from kubetrain.kfp_runtime.passthrough import passthrough_warning
from kubetrain.kfp_runtime.request_base import JobPlan, TrainingRequest
from kubetrain.kfp_runtime.workspace import WorkspaceView, backend_kind, local_root, open_workspace
from kubetrain.launcher import AwaitOptions, run_job, timestamped_stderr_sink
from kubetrain.launcher.signals import hold_signals
from kubetrain.manifests import build_manifest
from kubetrain.manifests.patch import apply_manifest_patch
from kubetrain.names import derive_job_name
from kubetrain.status import JobResult

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


def job_name(request: TrainingRequest) -> str:
    """The job name of this task: from the run id, the task id and the task's name (retries re-attach)."""
    return derive_job_name(
        prefix=request.framework,
        run_id=request.run_id,
        task_id=request.task_id,
        task_name=request.task_name,
        max_length=JOB_NAME_MAX,
    )


def _report_details(
    result: JobResult, request: TrainingRequest, plan: JobPlan, job_seconds: float
) -> list[tuple[str, object]]:
    return [
        ("framework", request.framework),
        ("job", f"{result.kind} {result.namespace}/{result.name}"),
        ("status", f"{result.phase.value} {result.reason}".strip()),
        ("backend", result.backend),
        ("image", request.chosen_image),
        ("model", request.model_name),
        ("data", plan.params.data_dir),
        ("output", plan.params.output_dir),
        ("submit to end (s)", round(job_seconds, 1)),
    ]


# Not shown among the inputs: the job's name (under Job) comes from them.
_NAMING_INPUTS = ("run_id", "task_id", "task_name")
# kubetrain's trainer gets these as flags; a user's own program does not, so its page leaves them out.
_TRAINER_INPUTS = ("epochs", "batch_size", "learning_rate", "architecture", "seed")


def _report_inputs(request: TrainingRequest, *, user_program: bool) -> list[tuple[str, object]]:
    """The step's inputs that made the run, for the report (hyperparameters, command and args, resources...)."""
    hidden = _NAMING_INPUTS + (_TRAINER_INPUTS if user_program else ())
    values = {f.name: getattr(request, f.name) for f in fields(request) if f.name not in hidden}
    return report.input_rows(values)


def _meta(result: JobResult, request: TrainingRequest, plan: JobPlan) -> dict[str, Any]:
    return {
        "framework": request.framework,
        "job_name": plan.name,
        "job_kind": result.kind,
        "status": result.phase.value,
        "image": request.chosen_image,
        "workspace_pvc": request.workspace_pvc,
        "workspace_path": plan.params.output_dir,
    }


def _fill_trainer_outputs(
    output_dir: Path, *, result: JobResult, request: TrainingRequest, plan: JobPlan, outputs: StepArtifacts,
    job_seconds: float,
) -> dict[str, float]:  # fmt: skip
    """kubetrain's trainer: model.* and a metrics.json with the documented keys."""
    metrics = artifacts.read_metrics(output_dir)
    model_meta = {
        **_meta(result, request, plan),
        "architecture": request.model_name,
        "test_accuracy": float(metrics["test_accuracy"]),
        "world_size": int(metrics["world_size"]),
    }
    artifacts.copy_model(output_dir, outputs.model, metadata=model_meta)
    logged = artifacts.log_metrics(outputs.metrics, metrics, job_seconds=job_seconds)
    page = report.training_report(
        title=f"{request.framework} training: {plan.name}",
        metrics=metrics,
        details=_report_details(result, request, plan, job_seconds),
        inputs=_report_inputs(request, user_program=False),
    )
    artifacts.write_text(outputs.report, page)
    return logged


def _fill_user_outputs(
    output_dir: Path, *, result: JobResult, request: TrainingRequest, plan: JobPlan, outputs: StepArtifacts,
    job_seconds: float,
) -> dict[str, float]:  # fmt: skip
    """A user's own program: whatever it left in its output directory, and any numbers in its metrics.json."""
    metrics = artifacts.read_user_metrics(output_dir)
    history = metrics.get("history")
    if history is not None and not (isinstance(history, list) and all(isinstance(h, dict) for h in history)):
        print(f"{request.framework}: metrics.json history is not a list of objects; no curves", flush=True)
        metrics = {k: v for k, v in metrics.items() if k != "history"}
    program = request.user_program
    model_meta = {**_meta(result, request, plan), "command": list(program.command) if program else []}
    artifacts.copy_outputs(output_dir, outputs.model, metadata=model_meta)
    logged = {**artifacts.numeric_metrics(metrics), "job_seconds": float(job_seconds)}
    for key, value in logged.items():
        outputs.metrics.log_metric(key, value)
    details = [(k, v) for k, v in _report_details(result, request, plan, job_seconds) if k != "model"]
    page = report.training_report(
        title=f"{request.framework} training: {plan.name}",
        metrics=metrics,
        details=[*details, ("command", " ".join(program.command) if program else "")],
        rows=sorted(artifacts.numeric_metrics(metrics).items()),
        inputs=_report_inputs(request, user_program=True),
    )
    artifacts.write_text(outputs.report, page)
    return logged


def launch_training(request: TrainingRequest, *, outputs: StepArtifacts, task_config: object) -> tuple[str, str]:
    """Run one training job end to end and fill the step's outputs; returns (job name, final status)."""
    framework = request.framework
    data_dir = dataset_location(outputs.dataset, workspace_pvc=request.workspace_pvc)
    kind = backend_kind()
    if kind == "kubernetes" and (warning := passthrough_warning(task_config)) is not None:
        print(warning, file=sys.stderr, flush=True)
    workspace: WorkspaceView = open_workspace(request.workspace_pvc, kind=kind)
    name = job_name(request)
    params = request.training_params(
        data_dir=data_dir,
        output_dir=workspace.pod(RUNS_DIR, name, "output"),
        checkpoint_dir=workspace.pod(RUNS_DIR, name, "checkpoints"),
    )
    plan = JobPlan(name=name, params=params, pod=request.pod_options(task_config))
    request.preflight(kind)
    manifest = build_manifest(request.to_spec(plan))
    if request.manifest_patch:
        manifest = apply_manifest_patch(manifest, request.manifest_patch)  # checked before anything is submitted
    print(f"{framework}: job {name} on the {kind} backend, output {params.output_dir}", flush=True)
    backend = open_backend(kind, namespace=request.job_namespace, local_root=local_root())
    # The report's plotting library loads while the job runs, not after it, when the step should end.
    threading.Thread(target=report.load_plotting, name="kubetrain-load-plotting", daemon=True).start()
    started = time.monotonic()
    try:
        result = run_job(
            manifest,
            backend=backend,
            options=AwaitOptions(timeout_seconds=request.timeout_seconds, delete_after=request.delete_policy),
            log_sink=timestamped_stderr_sink,
            cancel=hold_signals(),  # KFP's SIGTERM (a cancelled run) deletes the job, however late it comes
        )
    finally:
        backend.close()
    # Measured here rather than from the job's status times, which have one-second resolution.
    job_seconds = time.monotonic() - started
    output_dir = workspace.local(params.output_dir)
    fill = _fill_user_outputs if request.user_program is not None else _fill_trainer_outputs
    logged = fill(output_dir, result=result, request=request, plan=plan, outputs=outputs, job_seconds=job_seconds)
    print(f"{framework}: {result.phase.value}; " + ", ".join(f"{k} {v:.4g}" for k, v in logged.items()), flush=True)
    return name, result.phase.value
