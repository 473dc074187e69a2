"""`kubetrain run`: a pipeline end to end on this machine, through `kfp.local`'s SubprocessRunner.

Every step runs as a subprocess of this Python (no containers, `use_venv=False`), with
``KUBETRAIN_BACKEND=local`` so the launcher steps run their jobs on the local backend, and
``KUBETRAIN_LOCAL_ROOT`` pointing into this run's directory, so the workspace claim is a fresh
directory per run. Layout of a run directory::

    <runs>/<pipeline>-<timestamp>/
        kfp/<pipeline>-<time>/<task>/...   kfp.local's outputs: each task's artifacts
        local/claims/<workspace_pvc>/...   the workspace claim: datasets, checkpoints, models
        local/jobs/...                     the local backend's per-job logs
        reports/<task>-<output>.html|.md   copies of the HTML/Markdown outputs, ready to open

Afterwards each task's state is read back from kfp.local's output tree: a task directory with
an `executor_output.json` succeeded, one without it failed, a task without a directory never ran.
SIGTERM or SIGINT stops the run: its running step deletes its job, no further step starts, and
the outcome says CANCELLED (:mod:`.cancel`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import threading
import time
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from kubetrain.errors import BackendError
from kubetrain.kfp_runtime.workspace import BACKEND_ENV, LOCAL_ROOT_ENV
from kubetrain.tooling.cancel import RunCancelled, RunGuard
from kubetrain.tooling.catalog import Entry

TaskState = Literal["SUCCEEDED", "FAILED", "NOT_RUN"]
RunState = Literal["SUCCEEDED", "FAILED", "CANCELLED"]
EXECUTOR_OUTPUT = "executor_output.json"
# Output artifact types copied to reports/ with the file extension a browser or editor expects.
_REPORT_SUFFIXES = {"system.HTML": ".html", "system.Markdown": ".md"}


@dataclass(frozen=True)
class TaskOutcome:
    """One task of a local run: its state and where its outputs are."""

    name: str
    component: str
    state: TaskState
    artifacts: Mapping[str, str] = field(default_factory=dict)
    parameters: Mapping[str, Any] = field(default_factory=dict)
    metrics: Mapping[str, float] = field(default_factory=dict)
    reports: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "state": self.state,
            "component": self.component,
            "metrics": dict(self.metrics),
            "parameters": dict(self.parameters),
            "artifacts": dict(self.artifacts),
            "reports": dict(self.reports),
        }


@dataclass(frozen=True)
class RunOutcome:
    """A whole local run."""

    pipeline: str
    state: RunState
    run_dir: Path
    claims_dir: Path  # one directory per PersistentVolumeClaim (the workspace claim among them)
    wall_seconds: float
    arguments: Mapping[str, Any]
    tasks: tuple[TaskOutcome, ...]

    def task(self, name: str) -> TaskOutcome:
        """The task called `name` (KeyError naming the tasks if absent)."""
        for t in self.tasks:
            if t.name == name:
                return t
        raise KeyError(f"no task {name!r}; tasks: {[t.name for t in self.tasks]}")

    def to_json(self) -> dict[str, Any]:
        """The one JSON object `kubetrain run --json` prints last."""
        return {
            "pipeline": self.pipeline,
            "state": self.state,
            "run_dir": str(self.run_dir),
            "claims_dir": str(self.claims_dir),
            "wall_seconds": round(self.wall_seconds, 2),
            "arguments": dict(self.arguments),
            "tasks": {t.name: t.to_json() for t in self.tasks},
        }


@contextlib.contextmanager
def _environment(values: Mapping[str, str]) -> Iterator[None]:
    """Set environment variables for the steps (they inherit this process's environment)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


def _dag_tasks(pipeline: Any) -> list[tuple[str, str, dict[str, str]]]:
    """(task name, component name, {output artifact: type}) per task of the root DAG, upstream first."""
    spec = pipeline.pipeline_spec
    tasks = dict(spec.root.dag.tasks.items())
    ordered: list[str] = []
    while len(ordered) < len(tasks):
        ready = sorted(
            name
            for name, task in tasks.items()
            if name not in ordered and all(dep in ordered for dep in task.dependent_tasks)
        )
        if not ready:  # a cycle cannot be compiled; keep whatever is left rather than loop
            ready = sorted(set(tasks) - set(ordered))
        ordered += ready
    out = []
    for task_name in ordered:
        component = tasks[task_name].component_ref.name
        outputs = spec.components[component].output_definitions.artifacts
        out.append((task_name, component, {k: v.artifact_type.schema_title for k, v in outputs.items()}))
    return out


def _collect(task_name: str, component: str, outputs: Mapping[str, str], root: Path, reports: Path) -> TaskOutcome:
    # kfp.local names a task's directory after its component, without the "comp-" prefix.
    task_dir = root / component.removeprefix("comp-")
    if not task_dir.is_dir():
        return TaskOutcome(task_name, component, "NOT_RUN")
    output_file = task_dir / EXECUTOR_OUTPUT
    if not output_file.is_file():
        return TaskOutcome(task_name, component, "FAILED")
    executor_output = json.loads(output_file.read_text(encoding="utf-8"))
    artifacts: dict[str, str] = {}
    metrics: dict[str, float] = {}
    copies: dict[str, str] = {}
    for name, entry in (executor_output.get("artifacts") or {}).items():
        for artifact in entry.get("artifacts") or ():
            path = Path(artifact.get("uri", ""))
            kind = outputs.get(name, "")
            if kind == "system.Metrics":
                metrics.update({k: float(v) for k, v in (artifact.get("metadata") or {}).items()})
            if path.exists():
                artifacts[name] = str(path)
            if kind in _REPORT_SUFFIXES and path.is_file():
                reports.mkdir(parents=True, exist_ok=True)
                copy = reports / f"{task_name}-{name}{_REPORT_SUFFIXES[kind]}"
                shutil.copyfile(path, copy)
                copies[name] = str(copy)
    return TaskOutcome(
        task_name,
        component,
        "SUCCEEDED",
        artifacts=artifacts,
        parameters=dict(executor_output.get("parameterValues") or {}),
        metrics=metrics,
        reports=copies,
    )


def run_locally(
    entry: Entry,
    arguments: Mapping[str, Any],
    *,
    runs_dir: Path,
    logs_to_stderr: bool = False,
    cancel: threading.Event | None = None,
) -> RunOutcome:
    """Run one of kubetrain's pipelines on this machine; see :func:`run_pipeline_locally`."""
    return run_pipeline_locally(
        entry.load(),
        name=entry.name,
        arguments=arguments,
        runs_dir=runs_dir,
        logs_to_stderr=logs_to_stderr,
        cancel=cancel,
    )


def run_pipeline_locally(
    pipeline: Any,
    *,
    name: str,
    arguments: Mapping[str, Any],
    runs_dir: Path,
    logs_to_stderr: bool = False,
    cancel: threading.Event | None = None,
) -> RunOutcome:
    """Run any KFP pipeline of lightweight components here; returns its outcome (FAILED, no raise, on failure).

    A SIGTERM or SIGINT stops the running step (its job is deleted) and ends the run CANCELLED.
    `cancel` is the caller's event of signals that came before (`launcher.signals.hold_signals`):
    if it is set, no step starts and the run is CANCELLED.
    """
    from kfp import local

    stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    run_dir = (runs_dir / f"{name}-{stamp}").resolve()
    kfp_root = run_dir / "kfp"
    local_root = run_dir / "local"
    kfp_root.mkdir(parents=True)
    env = {BACKEND_ENV: "local", LOCAL_ROOT_ENV: str(local_root), "PYTHONUNBUFFERED": "1"}
    start = time.monotonic()
    out_stream = sys.stderr if logs_to_stderr else sys.stdout
    guard = RunGuard(cancel=cancel)
    with guard, _environment({**env, **guard.environment}), contextlib.redirect_stdout(out_stream), \
            warnings.catch_warnings():  # fmt: skip
        # The launcher image's name has no "python" in it, which kfp.local warns about; the
        # steps do run in this Python, with kubetrain installed, as intended.
        warnings.filterwarnings("ignore", message=".*non-Python base image.*", category=RuntimeWarning)
        local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(kfp_root), raise_on_error=False)
        try:
            with guard.running_steps():
                pipeline(**arguments)
        except RunCancelled as c:
            done = "before any step started" if c.before_any_step else "the running step stopped its job"
            print(f"kubetrain run: cancelled ({c.signal_name}); {done}", flush=True)
        except (RuntimeError, ValueError) as e:
            raise BackendError(f"kfp.local could not run {name}: {e}") from e
    wall = time.monotonic() - start
    roots = [p for p in kfp_root.iterdir() if p.is_dir()]
    if guard.cancelled and not roots:
        roots = [kfp_root]  # stopped before kfp.local made its run directory: no task ran
    if len(roots) != 1:
        raise BackendError(f"{kfp_root}: expected one pipeline run directory from kfp.local, found {len(roots)}")
    reports = run_dir / "reports"
    tasks = tuple(_collect(name, comp, outs, roots[0], reports) for name, comp, outs in _dag_tasks(pipeline))
    state: RunState = "SUCCEEDED" if tasks and all(t.state == "SUCCEEDED" for t in tasks) else "FAILED"
    if guard.cancelled:
        state = "CANCELLED"
    from kubetrain.backends.local.backend import claim_directory

    return RunOutcome(
        pipeline=name,
        state=state,
        run_dir=run_dir,
        claims_dir=claim_directory(local_root, "_").parent,
        wall_seconds=wall,
        arguments=dict(arguments),
        tasks=tasks,
    )


def describe(outcome: RunOutcome) -> str:
    """A human-readable account: state per task, where its outputs are, its final metrics."""
    lines = [
        f"pipeline {outcome.pipeline}: {outcome.state} in {outcome.wall_seconds:.1f}s",
        f"  run directory: {outcome.run_dir}",
        f"  workspace claims: {outcome.claims_dir}",
    ]
    for task in outcome.tasks:
        lines.append(f"  task {task.name}: {task.state}")
        for key, value in task.parameters.items():
            lines.append(f"    {key}: {value}")
        for key, value in task.metrics.items():
            lines.append(f"    {key}: {value:.4g}")
        for name, path in task.artifacts.items():
            lines.append(f"    {name}: {task.reports.get(name, path)}")
    return "\n".join(lines)
