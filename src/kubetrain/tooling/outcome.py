"""The outcome of a local run, read back from kfp.local's output tree, and its summary.

A task directory with an `executor_output.json` succeeded; one without it failed, and its failure
record (:mod:`kubetrain.kfp_runtime.exits`) says why and with which exit code; a step that left no
record (a bug's traceback, a user's own component) is described by the last line it printed, exit
code 1 (kfp.local keeps no step's own exit code); a task kfp.local ran in this process (a `dsl.importer`: no
directory, no executor output) is SUCCEEDED when kfp.local said so; a task kfp.local never started
(no directory, no start in its output) never ran: SKIPPED when control flow left it out (its `dsl.If` branch's
condition was false, or its `dsl.ParallelFor` had no items), else NOT_RUN (an upstream step failed,
or the run stopped first). In a cancelled run, a step that stopped because of the cancellation (exit
5, or no record at all: killed) is CANCELLED, not FAILED.

The tasks reported are the pipeline's steps, wherever they sit: inside `dsl.If`/`Elif`/`Else`,
`dsl.ParallelFor` (one outcome per iteration, `NAME[i]`), `dsl.ExitHandler` or a nested pipeline.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from kubetrain.errors import ExitCode
from kubetrain.kfp_runtime.artifacts import as_metric
from kubetrain.kfp_runtime.exits import read_failure
from kubetrain.kfp_runtime.report import display_value, format_value
from kubetrain.tooling.result_json import result_json
from kubetrain.urls import redact_values

# SKIPPED: control flow left the step out (a false dsl.If condition, a ParallelFor over no items).
TaskState = Literal["SUCCEEDED", "FAILED", "CANCELLED", "SKIPPED", "NOT_RUN"]
RunState = Literal["SUCCEEDED", "FAILED", "CANCELLED"]
EXECUTOR_OUTPUT = "executor_output.json"
# Output artifact types copied to reports/ with the file extension a browser or editor expects.
_REPORT_SUFFIXES = {"system.HTML": ".html", "system.Markdown": ".md"}


@dataclass(frozen=True)
class TaskOutcome:
    """One task of a local run: its state, why it failed, and where its outputs are."""

    name: str
    component: str
    state: TaskState
    artifacts: Mapping[str, str] = field(default_factory=dict)
    parameters: Mapping[str, Any] = field(default_factory=dict)
    metrics: Mapping[str, float] = field(default_factory=dict)
    reports: Mapping[str, str] = field(default_factory=dict)
    error: str | None = None  # one line, for a task that did not succeed
    exit_code: int | None = None  # the step's exit code (kubetrain.errors.ExitCode); None if it never ran
    recorded: bool = False  # the failed step left its failure record (else error/exit code are read from its log)
    # What the step warned about (an empty model, unreadable metrics), from its artifacts' `warnings` metadata.
    warnings: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "state": self.state,
            "component": self.component,
            "error": self.error,
            "exit_code": self.exit_code,
            "metrics": dict(self.metrics),
            "parameters": dict(self.parameters),
            "artifacts": dict(self.artifacts),
            "reports": dict(self.reports),
            "warnings": list(self.warnings),
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
    log_file: Path | None = None  # everything kfp.local and the steps printed
    notices: tuple[str, ...] = ()  # said before the run: a step's settings that do nothing here

    def task(self, name: str) -> TaskOutcome:
        """The task called `name` (KeyError naming the tasks if absent)."""
        for t in self.tasks:
            if t.name == name:
                return t
        raise KeyError(f"no task {name!r}; tasks: {[t.name for t in self.tasks]}")

    @property
    def exit_code(self) -> int:
        """The process's exit code: 0, 5 when cancelled, else the failed step's code (1 if unknown).

        A step that recorded its failure (its own exit code) comes before one judged by its log alone.
        """
        if self.state == "SUCCEEDED":
            return int(ExitCode.SUCCESS)
        if self.state == "CANCELLED":
            return int(ExitCode.CANCELLED)
        codes = sorted(
            ((not t.recorded, t.exit_code) for t in self.tasks if t.state == "FAILED" and t.exit_code),
            key=lambda pair: pair[0],
        )
        return codes[0][1] if codes else int(ExitCode.JOB_FAILED)

    @property
    def error(self) -> str | None:
        """One line for a run that did not succeed: the task its exit code comes from, and its error."""
        if self.state == "SUCCEEDED":
            return None
        ended = [t for t in self.tasks if t.state == self.state]
        # The task exit_code took its code from: a recorded failure before one judged by its log.
        ended.sort(key=lambda t: (t.exit_code != self.exit_code, not t.recorded))
        if not ended:
            return "cancelled before any step started" if self.state == "CANCELLED" else "no step ran; see the log"
        return f"task {ended[0].name}: {ended[0].error or 'see the log'}"

    @property
    def warnings(self) -> tuple[str, ...]:
        """The run's notices, then every task's warnings, each naming its task."""
        return self.notices + tuple(f"task {t.name}: {w}" for t in self.tasks for w in t.warnings)

    def to_json(self) -> dict[str, Any]:
        """The one JSON object `kubetrain run --json` prints last (:mod:`.result_json`'s head, then the run's)."""
        return result_json(
            state=self.state,
            exit_code=self.exit_code,
            error=self.error,
            warnings=self.warnings,
            fields=run_fields(
                self.pipeline,
                self.arguments,
                run_dir=str(self.run_dir),
                log=str(self.log_file) if self.log_file else None,
                claims_dir=str(self.claims_dir),
                wall_seconds=round(self.wall_seconds, 2),
                tasks={t.name: t.to_json() for t in self.tasks},
            ),
        )


def run_fields(pipeline: str | None = None, arguments: Mapping[str, Any] | None = None, **known: Any) -> dict[str, Any]:
    """The keys of `kubetrain run --json` after the head, null (or empty) unless known."""
    fields: dict[str, Any] = {
        "pipeline": pipeline,
        "run_dir": None,
        "log": None,
        "claims_dir": None,
        "wall_seconds": None,
        "arguments": redact_values(dict(arguments or {})),  # a presigned URL's signature is not printed
        "tasks": {},
    }
    unknown = sorted(set(known) - set(fields))
    if unknown:
        raise ValueError(f"run_fields: no such keys {unknown}")
    return {**fields, **known}


@dataclass(frozen=True)
class DagTask:
    """One step of a pipeline (a component's task), wherever it sits in the pipeline's DAGs."""

    name: str  # the task's name in its DAG (two DAGs may each have a task of the same name)
    component: str  # its component's name in the pipeline spec ("comp-...", unique in the pipeline)
    outputs: Mapping[str, str]  # output artifact name -> artifact type (schema title)
    conditions: tuple[str, ...] = ()  # the enclosing dsl.If/Elif/Else groups' DAG tasks, outermost first
    loops: tuple[str, ...] = ()  # the enclosing dsl.ParallelFor groups' DAG tasks, outermost first

    @property
    def directory(self) -> str:
        """The step's name as kfp.local logs it and names its directory: its component's, without "comp-".

        Unique in the pipeline, unlike :attr:`name`, so the outcome reports every step by it; for a
        task of the pipeline's own DAG it is the task's name.
        """
        return self.component.removeprefix("comp-")


def upstream_first(tasks: Mapping[str, Any]) -> list[str]:
    """The names of a DAG's tasks, each after the tasks it depends on, ties in name order (the same every time)."""
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
    return ordered


def _walk(spec: Any, dag: Any, conditions: tuple[str, ...], loops: tuple[str, ...]) -> list[DagTask]:
    tasks = dict(dag.tasks.items())
    out: list[DagTask] = []
    for task_name in upstream_first(tasks):
        task = tasks[task_name]
        component = spec.components[task.component_ref.name]
        if component.WhichOneof("implementation") == "dag":
            # A control-flow group or a nested pipeline: its own steps are what runs.
            inner_conditions = conditions + ((task_name,) if task.trigger_policy.condition else ())
            inner_loops = loops + ((task_name,) if task.WhichOneof("iterator") else ())
            out += _walk(spec, component.dag, inner_conditions, inner_loops)
            continue
        outputs = {k: v.artifact_type.schema_title for k, v in component.output_definitions.artifacts.items()}
        out.append(DagTask(task_name, task.component_ref.name, outputs, conditions, loops))
    return out


def dag_tasks(pipeline: Any) -> list[DagTask]:
    """Every step of the pipeline, sub-DAGs (control flow, nested pipelines) included, upstream first."""
    spec = pipeline.pipeline_spec
    return _walk(spec, spec.root.dag, (), ())


def _iteration_index(path: Path) -> int:
    return int(path.name.rpartition("-iteration-")[2])


def instances(task: DagTask, root: Path) -> list[tuple[str, Path]]:
    """(name to report, directory its step's directory is in) per run of `task`: one per ParallelFor iteration.

    The name is :attr:`DagTask.directory`, with `[i]` for iteration i (`[i,j]` in nested loops).

    kfp.local runs iteration i of a loop under `<dir>/<loop task>-iteration-<i>/`. A loop with no
    iteration directory (it never ran, or had no items) leaves one instance that has no directory.
    """
    found = [(task.directory, root, "")]
    for loop in task.loops:
        deeper = []
        for name, base, index in found:
            iterations = sorted(
                (p for p in base.glob(f"{loop}-iteration-*") if p.name.rpartition("-")[2].isdigit()),
                key=_iteration_index,
            )
            deeper += [(name, p, ",".join(filter(None, (index, str(_iteration_index(p)))))) for p in iterations]
            if not iterations:
                deeper.append((name, base / loop, index))  # never exists: no iteration ran
        found = deeper
    return [(f"{name}[{index}]" if index else name, base) for name, base, index in found]


def collect_tasks(
    tasks: list[DagTask],
    root: Path,
    reports: Path,
    *,
    last_lines: Mapping[str, str],
    started: Collection[str],
    skipped_groups: Collection[str],
    pipeline_succeeded: bool,
    finished: Mapping[str, str] | None = None,
) -> tuple[TaskOutcome, ...]:
    """Every step's outcome (one per loop iteration) from kfp.local's run directory `root`.

    `last_lines` and `started` are keyed by the name kfp.local logs a step by (:attr:`DagTask.directory`);
    `skipped_groups`: the dsl.If groups kfp.local skipped (their condition was false);
    `pipeline_succeeded`: kfp.local said the pipeline succeeded, so a step that did not run was left
    out by control flow; `finished`: kfp.local's verdict (SUCCESS, FAILURE) per step it logged one for.
    """
    verdicts = finished or {}
    out: list[TaskOutcome] = []
    for task in tasks:
        skipped = pipeline_succeeded or any(group in skipped_groups for group in task.conditions)
        for name, base in instances(task, root):
            out.append(
                collect(
                    name,
                    task.component,
                    task.outputs,
                    base,
                    reports,
                    last_line=last_lines.get(task.directory, ""),
                    started=task.directory in started,
                    skipped=skipped,
                    succeeded=verdicts.get(task.directory) == "SUCCESS",
                )
            )
    return tuple(out)


def collect(
    task_name: str,
    component: str,
    outputs: Mapping[str, str],
    root: Path,
    reports: Path,
    *,
    last_line: str = "",
    started: bool = False,
    skipped: bool = False,
    succeeded: bool = False,
) -> TaskOutcome:
    """One task's outcome from its directory under `root`.

    `last_line`: what the step printed last; `started`: kfp.local said it started the step (one
    without output artifacts that fails has no directory); `skipped`: control flow left the task
    out if it did not run (its dsl.If group was skipped); `succeeded`: kfp.local said the step
    succeeded (what an importer, which leaves no directory, is judged by).
    """
    # kfp.local names a task's directory after its component, without the "comp-" prefix.
    task_dir = root / component.removeprefix("comp-")
    if not task_dir.is_dir():
        if succeeded:
            return TaskOutcome(task_name, component, "SUCCEEDED", exit_code=int(ExitCode.SUCCESS))
        if skipped:
            return TaskOutcome(task_name, component, "SKIPPED")
        if not started:
            return TaskOutcome(task_name, component, "NOT_RUN")
    output_file = task_dir / EXECUTOR_OUTPUT
    if not output_file.is_file():
        failure = read_failure(task_dir)
        if failure is not None:
            return TaskOutcome(
                task_name, component, "FAILED", error=failure.error, exit_code=failure.exit_code, recorded=True
            )
        error = last_line or "the step printed nothing; see the run's log"
        return TaskOutcome(task_name, component, "FAILED", error=error, exit_code=int(ExitCode.JOB_FAILED))
    executor_output = json.loads(output_file.read_text(encoding="utf-8"))
    artifacts: dict[str, str] = {}
    metrics: dict[str, float] = {}
    copies: dict[str, str] = {}
    warned: list[str] = []
    for name, entry in (executor_output.get("artifacts") or {}).items():
        for artifact in entry.get("artifacts") or ():
            path = Path(artifact.get("uri", ""))
            kind = outputs.get(name, "")
            said = (artifact.get("metadata") or {}).get("warnings") if kind != "system.Metrics" else None
            if isinstance(said, list):
                warned += [str(w) for w in said if str(w) not in warned]
            if kind == "system.Metrics":
                metrics.update({k: as_metric(v) for k, v in (artifact.get("metadata") or {}).items()})
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
        exit_code=int(ExitCode.SUCCESS),
        warnings=tuple(warned),
    )


def cancelled(task: TaskOutcome, signal_name: str) -> TaskOutcome:
    """A failed task of a cancelled run, as CANCELLED when the cancellation is what stopped it."""
    if task.state != "FAILED":
        return task
    # A step stopped by the run's SIGTERM exits 5 with its record; one killed past its grace leaves
    # none. A record with another code is a failure of its own, before the cancellation reached it.
    if task.recorded and task.exit_code != int(ExitCode.CANCELLED):
        return task
    return replace(task, state="CANCELLED", exit_code=int(ExitCode.CANCELLED), error=f"cancelled ({signal_name})")


def describe(outcome: RunOutcome) -> str:
    """A human-readable account: state per task, why a task failed, where its outputs are, its final metrics."""
    lines = [
        f"pipeline {outcome.pipeline}: {outcome.state} in {outcome.wall_seconds:.1f}s",
        f"  run directory: {outcome.run_dir}",
    ]
    if outcome.log_file is not None:
        lines.append(f"  full log: {outcome.log_file}")
    lines.append(f"  workspace claims: {outcome.claims_dir}")
    for task in outcome.tasks:
        lines.append(f"  task {task.name}: {task.state}")
        if task.state in ("FAILED", "CANCELLED") and task.error:
            lines.append(f"    error: {task.error} (exit code {task.exit_code})")
        lines += [f"    warning: {w}" for w in task.warnings]
        for key, value in task.parameters.items():
            lines.append(f"    {key}: {value}")
        for key, value in task.metrics.items():
            lines.append(f"    {key}: {format_value(display_value(key, value))}")
        for name, path in task.artifacts.items():
            lines.append(f"    {name}: {task.reports.get(name, path)}")
    return "\n".join(lines)
