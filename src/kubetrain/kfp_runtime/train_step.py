"""The training steps' shared flow: request → spec → manifest → launcher → KFP output artifacts.

Each of `pytorch_train`, `chainermn_train` and `ps_train` ends in :func:`launch_training` with its
validated request: derive the job name from the KFP run and task ids, build the spec from the
request (through :mod:`kubetrain.presets`, so `kubetrain render` shows exactly what is
submitted), apply the task's TaskConfig to the training pods, run the job with the launcher on
the selected backend, then copy the model and metrics from the workspace into the step's
artifacts and write the HTML report.
"""

from __future__ import annotations

import posixpath
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from kubetrain.backends import open_backend
from kubetrain.errors import DivergedError, InvalidInputError
from kubetrain.kfp_runtime import artifacts, report
from kubetrain.kfp_runtime.artifacts import ArtifactLike, MetricsLike
from kubetrain.kfp_runtime.local_notice import local_notice
from kubetrain.kfp_runtime.passthrough import passthrough_warning
from kubetrain.kfp_runtime.request_base import JobPlan, TrainingRequest
from kubetrain.kfp_runtime.workspace import WorkspaceView, backend_kind, local_root, open_workspace
from kubetrain.launcher import run_job, timestamped_stderr_sink
from kubetrain.launcher.signals import hold_signals
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


def check_data_dir(data_dir: object, *, mount_path: str, field: str) -> None:
    """The dataset directory must lie on the workspace volume: absolute, under `mount_path`, no '.' or '..'.

    Every pod mounts the workspace claim at `mount_path`, and the local backend maps exactly that
    prefix to the claim's directory: `/workspace/../etc` would read the image's (or, locally, this
    machine's) /etc instead of the data set.
    """
    parts = data_dir.split("/") if isinstance(data_dir, str) else [".."]
    under = isinstance(data_dir, str) and (data_dir + "/").startswith(mount_path.rstrip("/") + "/")
    if not under or any(part in (".", "..") for part in parts):
        raise InvalidInputError(
            f"{field}: got {data_dir!r}; expected the data set's directory on the workspace volume, an absolute "
            f"path under {mount_path} without '.' or '..' segments (e.g. {mount_path}/datasets/digits)"
        )


def plan_job(
    request: TrainingRequest,
    *,
    name: str,
    data_dir: str,
    task_config: object,
    mount_path: str,
    data_field: str = "data",
) -> JobPlan:
    """The job's plan: its name, the program's directories under the workspace mount, the pods' options.

    The step's outputs go to `runs/NAME/output` on the workspace, its checkpoints to
    `runs/NAME/checkpoints`; `kubetrain render` plans with this same function. `data_field` names
    where `data_dir` came from, for the error when it is not on the workspace.
    """
    check_data_dir(data_dir, mount_path=mount_path, field=data_field)
    params = request.training_params(
        data_dir=data_dir,
        output_dir=posixpath.join(mount_path, RUNS_DIR, name, "output"),
        checkpoint_dir=posixpath.join(mount_path, RUNS_DIR, name, "checkpoints"),
    )
    return JobPlan(name=name, params=params, pod=request.pod_options(task_config))


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


def warn(request: TrainingRequest, outputs: StepArtifacts, text: str) -> str:
    """A warning in the step's log, loud enough to be found, and on the Model artifact's metadata; returns `text`."""
    print(f"WARNING: {request.framework}: {text}", file=sys.stderr, flush=True)
    outputs.model.metadata.setdefault("warnings", []).append(text)
    return text


def _metrics_warning(read: artifacts.MetricsRead, logged: Mapping[str, float]) -> str:
    kept = [k for k in logged if k != "job_seconds"]
    what = f"only what could be read was logged ({', '.join(kept)})" if kept else "no metrics were logged from it"
    return f"{'; '.join(read.problems)}; the model was kept, and {what}"


def _refuse_divergence(metrics: Mapping[str, Any], plan: JobPlan) -> None:
    """DivergedError when the metrics say the model diverged: the step fails, as a diverged PS job does."""
    why = artifacts.divergence(metrics)
    if why is not None:
        raise DivergedError(f"{why}; the job's files stay in {plan.params.output_dir}")


def _unlogged_warning(metrics: Mapping[str, Any]) -> str | None:
    """Never dropped in silence: the numbers the Metrics artifact cannot hold, named."""
    dropped = artifacts.non_finite(metrics)
    if not dropped:
        return None
    return f"{artifacts.METRICS_JSON}: {', '.join(dropped)}: not finite, so not logged on the Metrics artifact"


def _fill_trainer_outputs(
    output_dir: Path, *, result: JobResult, request: TrainingRequest, plan: JobPlan, outputs: StepArtifacts,
    job_seconds: float,
) -> dict[str, float]:  # fmt: skip
    """kubetrain's trainer: model.* and a metrics.json with the documented keys."""
    read = artifacts.read_metrics(output_dir, required=artifacts.REQUIRED_METRICS)
    metrics = read.metrics
    _refuse_divergence(metrics, plan)
    model_meta = {**_meta(result, request, plan), "architecture": request.model_name}
    for key, kind in (("test_accuracy", float), ("world_size", int)):
        if key in artifacts.numeric_metrics({key: metrics.get(key)}):
            model_meta[key] = kind(metrics[key])
    # The model first: a metrics file that cannot be read must not cost the trained model.
    artifacts.copy_model(output_dir, outputs.model, metadata=model_meta)
    logged = artifacts.log_metrics(outputs.metrics, metrics, job_seconds=job_seconds)
    details = _report_details(result, request, plan, job_seconds)
    if read.problems:
        details.append(("warning", warn(request, outputs, _metrics_warning(read, logged))))
    if (unlogged := _unlogged_warning(metrics)) is not None:
        details.append(("warning", warn(request, outputs, unlogged)))
    page = report.training_report(
        title=f"{request.framework} training: {plan.name}",
        metrics=metrics,
        details=details,
        inputs=_report_inputs(request, user_program=False),
    )
    artifacts.write_text(outputs.report, page)
    return logged


def _fill_user_outputs(
    output_dir: Path, *, result: JobResult, request: TrainingRequest, plan: JobPlan, outputs: StepArtifacts,
    job_seconds: float,
) -> dict[str, float]:  # fmt: skip
    """A user's own program: whatever it left in its output directory, and any numbers in its metrics.json."""
    read = artifacts.read_metrics(output_dir, missing_ok=True)
    metrics = read.metrics
    _refuse_divergence(metrics, plan)
    program = request.user_program
    model_meta = {**_meta(result, request, plan), "command": list(program.command) if program else []}
    names = artifacts.copy_outputs(output_dir, outputs.model, metadata=model_meta)
    details = [(k, v) for k, v in _report_details(result, request, plan, job_seconds) if k != "model"]
    details.append(("command", " ".join(program.command) if program else ""))
    if not names:
        where = plan.params.output_dir
        here = f" (on this machine {output_dir})" if str(output_dir) != where else ""
        empty = (
            f"the job succeeded but the program left nothing in its output directory {where}{here}: the Model "
            "artifact is empty and no metrics were logged. Expected the model's files there and, for the Metrics "
            f"artifact, a {artifacts.METRICS_JSON} of numbers; the program finds the directory in "
            "KUBETRAIN_OUTPUT_DIR"
        )
        details.append(("warning", warn(request, outputs, empty)))
    logged = {**artifacts.numeric_metrics(metrics), "job_seconds": float(job_seconds)}
    for key, value in logged.items():
        outputs.metrics.log_metric(key, value)
    if read.problems:
        details.append(("warning", warn(request, outputs, _metrics_warning(read, logged))))
    if (unlogged := _unlogged_warning(metrics)) is not None:
        details.append(("warning", warn(request, outputs, unlogged)))
    page = report.training_report(
        title=f"{request.framework} training: {plan.name}",
        metrics=metrics,
        details=details,
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
    plan = plan_job(
        request,
        name=name,
        data_dir=data_dir,
        task_config=task_config,
        mount_path=workspace.mount_path,
        data_field="dataset (the Dataset artifact's 'path' metadata)",
    )
    params = plan.params
    request.preflight(kind)
    manifest = request.manifest(plan)  # patched and validated: checked before anything is submitted
    if kind == "local" and (unused := local_notice(manifest)) is not None:
        print(f"{framework}: {unused}", file=sys.stderr, flush=True)
    print(f"{framework}: job {name} on the {kind} backend, output {params.output_dir}", flush=True)
    if (waits := request.start_notice()) is not None:
        print(f"{framework}: {waits}", flush=True)
    backend = open_backend(kind, namespace=request.job_namespace, local_root=local_root())
    started = time.monotonic()
    try:
        result = run_job(
            manifest,
            backend=backend,
            options=request.await_options(),
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
    print(
        f"{framework}: {result.phase.value}; "
        + ", ".join(f"{k} {report.format_value(report.display_value(k, v))}" for k, v in logged.items()),
        flush=True,
    )
    return name, result.phase.value
