"""`kubetrain run`: a pipeline end to end on this machine, through `kfp.local`'s SubprocessRunner.

Every step runs as a subprocess of this Python (no containers, `use_venv=False`), with
``KUBETRAIN_BACKEND=local`` so the launcher steps run their jobs on the local backend, and
``KUBETRAIN_LOCAL_ROOT`` pointing into this run's directory, so the workspace claim is a fresh
directory per run. Layout of a run directory::

    <runs>/<pipeline>-<timestamp>/
        run.log                            everything kfp.local and the steps printed
        kfp/<pipeline>-<time>/<task>/...   kfp.local's outputs: each task's artifacts
        local/claims/<workspace_pvc>/...   the workspace claim: datasets, checkpoints, models
        local/jobs/...                     the local backend's per-job logs
        reports/<task>-<output>.html|.md   copies of the HTML/Markdown outputs, ready to open

The console gets the steps' progress only (:mod:`.progress`); afterwards each task's state, and
why it failed, is read back from kfp.local's output tree (:mod:`.outcome`). SIGTERM or SIGINT
stops the run: its running step deletes its job, no further step starts, and the outcome says
CANCELLED (:mod:`.cancel`).
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from kubetrain.errors import BackendError
from kubetrain.kfp_runtime.exits import RECORD_ENV
from kubetrain.kfp_runtime.workspace import BACKEND_ENV, LOCAL_ROOT_ENV
from kubetrain.tooling.cancel import RunCancelled, RunGuard
from kubetrain.tooling.catalog import Entry
from kubetrain.tooling.local_runs import mark_ended, mark_running
from kubetrain.tooling.local_settings import unused_task_settings
from kubetrain.tooling.outcome import (
    RunOutcome,
    RunState,
    TaskOutcome,
    cancelled,
    collect_tasks,
    dag_tasks,
    describe,
)
from kubetrain.tooling.progress import RUN_LOG, RunLog, RunLogHandler
from kubetrain.urls import redact_text, redact_values

__all__ = ["RunOutcome", "TaskOutcome", "describe", "run_locally", "run_pipeline_locally"]


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


@contextlib.contextmanager
def _removed(directory: Path) -> Iterator[None]:
    """Remove `directory` and everything in it at the end, however the block ends."""
    try:
        yield
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@contextlib.contextmanager
def _captured(stream: RunLog) -> Iterator[None]:
    """This process's stdout, logging and warnings go through `stream` while the pipeline runs."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    # kfp.local indents a step's output by swapping builtins.print; the ParallelFor iterations it
    # runs in threads swap it concurrently and can leave it indented for good (the summary too).
    original_print = builtins.print
    root.handlers[:] = [RunLogHandler(stream)]
    root.setLevel(logging.INFO)

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        # kfp.local's warnings (a non-Python base image, resources without effect here) are about
        # running on a cluster, which the steps do not: kept in the log, off the console.
        stream.write_log_only(warnings.formatwarning(message, category, filename, lineno, line))

    try:
        with contextlib.redirect_stdout(stream), warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = show
            yield
    finally:
        builtins.print = original_print
        stream.finish()
        root.handlers[:] = handlers
        root.setLevel(level)


def run_locally(
    entry: Entry,
    arguments: Mapping[str, Any],
    *,
    runs_dir: Path,
    logs_to_stderr: bool = False,
    cancel: threading.Event | None = None,
    verbose: bool = False,
    command: str = "run",
) -> RunOutcome:
    """Run one of kubetrain's pipelines on this machine; see :func:`run_pipeline_locally`."""
    return run_pipeline_locally(
        entry.load(),
        name=entry.name,
        arguments=arguments,
        runs_dir=runs_dir,
        logs_to_stderr=logs_to_stderr,
        cancel=cancel,
        verbose=verbose,
        command=command,
    )


def run_pipeline_locally(
    pipeline: Any,
    *,
    name: str,
    arguments: Mapping[str, Any],
    runs_dir: Path,
    logs_to_stderr: bool = False,
    cancel: threading.Event | None = None,
    verbose: bool = False,
    command: str = "run",
    python_path: tuple[str, ...] = (),
) -> RunOutcome:
    """Run any KFP pipeline of lightweight components here; returns its outcome (FAILED, no raise, on failure).

    Progress goes to stdout (stderr with `logs_to_stderr`), everything to the run's `run.log`
    (to the console too with `verbose`). A SIGTERM or SIGINT stops the running step (its job is
    deleted) and ends the run CANCELLED. `cancel` is the caller's event of signals that came before
    (`launcher.signals.hold_signals`): if it is set, no step starts and the run is CANCELLED.
    `command`: the kubetrain command the user typed (`run`, `demo`), as the lines printed name it.
    `python_path`: directories put first on the steps' and their pods' PYTHONPATH (the pipeline
    file's own, so its modules, a `model_module` among them, import from any working directory).
    """
    from kfp import local

    stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    run_dir = (runs_dir / f"{name}-{stamp}").resolve()
    kfp_root = run_dir / "kfp"
    local_root = run_dir / "local"
    kfp_root.mkdir(parents=True)
    mark_running(run_dir)  # `kubetrain list` and `cancel` find the run by it
    env = {BACKEND_ENV: "local", LOCAL_ROOT_ENV: str(local_root), "PYTHONUNBUFFERED": "1", RECORD_ENV: "1"}
    if python_path:
        env["PYTHONPATH"] = os.pathsep.join([*python_path, *filter(None, [os.environ.get("PYTHONPATH")])])
    start = time.monotonic()
    console: TextIO = sys.stderr if logs_to_stderr else sys.stdout
    guard = RunGuard(cancel=cancel)
    log_file = run_dir / RUN_LOG
    print(f"running {name} in {run_dir} (full log: {log_file.name} there)", file=console, flush=True)
    notices = tuple(f"step {task}: {notice}" for task, notice in unused_task_settings(pipeline).items())
    for notice in notices:
        print(notice, file=console, flush=True)
    # kfp.local's steps write their code to `mktemp -d` and never remove it: the steps (and their
    # pods) get a temporary directory of the run's own, removed when the run ends. Short, under the
    # system's: Open MPI puts its session directory's sockets there.
    scratch = Path(tempfile.mkdtemp(prefix="kubetrain-run-"))
    with log_file.open("w", encoding="utf-8") as log, _removed(scratch):
        stream = RunLog(log, console, verbose=verbose)
        with guard, _environment({**env, **guard.environment, "TMPDIR": str(scratch)}), _captured(stream):
            local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(kfp_root), raise_on_error=False)
            try:
                with guard.running_steps():
                    pipeline(**arguments)
            except RunCancelled as c:
                done = "before any step started" if c.before_any_step else "the running step stopped its job"
                print(f"kubetrain {command}: cancelled ({c.signal_name}); {done}", flush=True)
            except (RuntimeError, ValueError) as e:
                raise BackendError(f"kfp.local could not run {name}: {e}") from e
    wall = time.monotonic() - start
    roots = [p for p in kfp_root.iterdir() if p.is_dir()]
    if len(roots) > 1:
        raise BackendError(f"{kfp_root}: expected one pipeline run directory from kfp.local, found {len(roots)}")
    # None there when no step made its directory: stopped before the first step, or the steps that
    # ran failed before writing anything (a step without output artifacts gets one only on success).
    root = roots[0] if roots else kfp_root / name
    progress = stream.progress
    tasks = collect_tasks(
        dag_tasks(pipeline),
        root,
        run_dir / "reports",
        last_lines={step: progress.last_line(step) for step in progress.started},
        started=progress.started,
        skipped_groups=progress.skipped_groups,
        pipeline_succeeded=progress.pipeline_status == "SUCCESS",
        finished=progress.finished,
    )
    # What the run keeps and prints (--json, outcome.json, the summary) shows no URL's secrets.
    tasks = tuple(
        replace(t, parameters=redact_values(dict(t.parameters)), error=t.error and redact_text(t.error)) for t in tasks
    )
    state: RunState = "SUCCEEDED" if tasks and all(t.state in ("SUCCEEDED", "SKIPPED") for t in tasks) else "FAILED"
    if guard.cancelled:
        state = "CANCELLED"
        tasks = tuple(cancelled(t, guard.signal_name or "SIGTERM") for t in tasks)
    from kubetrain.backends.local.backend import claim_directory

    outcome = RunOutcome(
        pipeline=name,
        state=state,
        run_dir=run_dir,
        claims_dir=claim_directory(local_root, "_").parent,
        wall_seconds=wall,
        arguments=redact_values(dict(arguments)),
        tasks=tasks,
        log_file=log_file,
        notices=notices,
    )
    mark_ended(run_dir, outcome.to_json())
    return outcome
