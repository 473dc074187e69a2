"""Component steps end with the launcher's documented exit codes, not a traceback.

A KFP step fails on any non-zero exit; the code says why (kubetrain.errors.ExitCode: 1 the job
failed, 2 invalid input and nothing submitted, 3 timed out, 4 API errors after retries,
5 cancelled), readable in the pod's status and the step's log. Errors kubetrain raises on
purpose end in one line; anything else is a bug and keeps its traceback.

`kfp.local` keeps neither: it reads a step's exit code as failed-or-not and mixes its output
into the run's log. So under `kubetrain run` (which sets :data:`RECORD_ENV`) a failing step also
leaves a failure record, :data:`FAILURE_RECORD`, in its task directory beside where its
`executor_output.json` would have gone: the one-line error and the exit code, which the run's
summary reports. On a cluster nothing is written; the pod's status and log say it there.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ParamSpec, TypeVar

from kubetrain.errors import ExitCode, JobFailedError, KubetrainError
from kubetrain.kfp_runtime.usage import usage_line
from kubetrain.urls import redact_text

P = ParamSpec("P")
R = TypeVar("R")

RECORD_ENV = "KUBETRAIN_STEP_FAILURE_RECORDS"
FAILURE_RECORD = "kubetrain-failure.json"


@dataclass(frozen=True)
class StepFailure:
    """Why a step failed: its one-line error and the exit code it ended with."""

    error: str
    exit_code: int

    def __post_init__(self) -> None:
        if "\n" in self.error:
            raise ValueError(f"StepFailure.error: got {self.error!r}; expected one line")


def one_line(error: KubetrainError) -> str:
    """`Type: message`, cut at the message's first line (job failures carry log tails below it).

    A failed job leads with its program's own error (`JobFailedError: rank 1: RuntimeError: boom; ...`).
    Secrets in URLs are redacted.
    """
    if isinstance(error, JobFailedError):
        return f"{type(error).__name__}: {redact_text(error.headline())}"
    message = redact_text(str(error)).strip().splitlines()
    return f"{type(error).__name__}: {message[0] if message else ''}".rstrip(": ")


def task_directory(argv: Sequence[str]) -> Path | None:
    """The step's task directory: where kfp's executor was told to write its output file."""
    args = list(argv)
    try:
        executor_input = json.loads(args[args.index("--executor_input") + 1])
        output_file = executor_input["outputs"]["outputFile"]
    except (ValueError, IndexError, KeyError, TypeError):
        return None  # not started by kfp's executor (a direct call, a test)
    return Path(str(output_file)).parent


def write_failure(failure: StepFailure, directory: Path) -> None:
    """Leave the failure record in `directory` (best effort: the step's exit code stands anyway)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / FAILURE_RECORD).write_text(
            json.dumps({"error": failure.error, "exit_code": failure.exit_code}), encoding="utf-8"
        )
    except OSError as e:
        print(f"kubetrain: could not write {directory / FAILURE_RECORD}: {e}", file=sys.stderr, flush=True)


def read_failure(directory: Path) -> StepFailure | None:
    """The failure record a step left in its task directory, if any."""
    path = directory / FAILURE_RECORD
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return StepFailure(error=str(data["error"]), exit_code=int(data["exit_code"]))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as e:
        return StepFailure(error=f"unreadable failure record {path}: {e}", exit_code=int(ExitCode.JOB_FAILED))


def _record(failure: StepFailure, environ: Mapping[str, str], argv: Sequence[str]) -> None:
    if environ.get(RECORD_ENV) != "1":
        return
    directory = task_directory(argv)
    if directory is not None:
        write_failure(failure, directory)


def step(func: Callable[P, R]) -> Callable[P, R]:
    """Wrap a component step: KubetrainError → one line on stderr and SystemExit(exit code).

    However it ends, the step's last line says what its process cost (:mod:`.usage`).
    """

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        started = time.monotonic()
        try:
            return func(*args, **kwargs)
        except KubetrainError as e:
            # A failed job's log tails were printed as the launcher read them: not a second time here.
            text = one_line(e) if isinstance(e, JobFailedError) and e.shown else f"{type(e).__name__}: {e}"
            print(f"kubetrain: {redact_text(text)}", file=sys.stderr, flush=True)
            _record(StepFailure(one_line(e), int(e.exit_code)), os.environ, sys.argv)
            raise SystemExit(int(e.exit_code)) from e
        finally:
            print(usage_line(started), file=sys.stderr, flush=True)

    return wrapper
