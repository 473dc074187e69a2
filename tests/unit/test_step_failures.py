"""A failing step's failure record: what `kubetrain run` reads to say why a step failed, and its exit code."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from kubetrain.errors import ExitCode, JobFailedError, JobTimeoutError, SpecError
from kubetrain.kfp_runtime.exits import FAILURE_RECORD, RECORD_ENV, StepFailure, read_failure, step


def _executor_argv(task_dir: Path) -> list[str]:
    """The command line kfp's executor_main is started with (the parts the record reads)."""
    executor_input = {"outputs": {"outputFile": str(task_dir / "executor_output.json")}}
    return ["executor_main.py", "--executor_input", json.dumps(executor_input), "--function_to_execute", "f"]


@step
def _invalid() -> None:
    raise SpecError("workers", -1, "a non-negative integer")


@step
def _failed_with_logs() -> None:
    raise JobFailedError("PyTorchJob default/p failed: BackoffLimitExceeded\nmaster-0 log tail:\nTraceback ...")


@step
def _timed_out() -> None:
    raise JobTimeoutError("the job did not finish within 60s; deleted")


@pytest.mark.parametrize(
    ("func", "error", "code"),
    [
        (_invalid, "SpecError: workers: got -1; expected a non-negative integer", ExitCode.INVALID_INPUT),
        (_failed_with_logs, "JobFailedError: PyTorchJob default/p failed: BackoffLimitExceeded", ExitCode.JOB_FAILED),
        (_timed_out, "JobTimeoutError: the job did not finish within 60s; deleted", ExitCode.TIMEOUT),
    ],
)
def test_a_failing_step_under_kubetrain_run_leaves_its_error_and_exit_code(
    func: Callable[[], object], error: str, code: ExitCode, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.setenv(RECORD_ENV, "1")
    monkeypatch.setattr("sys.argv", _executor_argv(tmp_path / "task"))
    with pytest.raises(SystemExit) as exited:
        func()
    assert exited.value.code == code
    assert read_failure(tmp_path / "task") == StepFailure(error=error, exit_code=int(code))
    assert capsys.readouterr().err.startswith(f"kubetrain: {error}")


def test_outside_kubetrain_run_no_record_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a cluster the pod's status and log say it; the step writes nothing beside its outputs."""
    monkeypatch.delenv(RECORD_ENV, raising=False)
    monkeypatch.setattr("sys.argv", _executor_argv(tmp_path / "task"))
    with pytest.raises(SystemExit):
        _invalid()
    assert not (tmp_path / "task" / FAILURE_RECORD).exists()


def test_no_record_and_none_read_when_not_started_by_kfp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RECORD_ENV, "1")
    monkeypatch.setattr("sys.argv", ["python", "-c", "..."])
    with pytest.raises(SystemExit):
        _invalid()
    assert read_failure(tmp_path) is None


@step
def _failed_and_shown() -> None:
    raise JobFailedError(
        "PyTorchJob default/p failed: BackoffLimitExceeded\n--- last 20 lines of p-worker-0/pytorch ---\nTraceback ...",
        program_error="rank 1: RuntimeError: boom",
        shown=True,
    )


def test_a_failed_jobs_tails_already_printed_by_the_launcher_are_not_printed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 34: the step printed the whole error, tails included, after the launcher had printed them."""
    monkeypatch.setenv(RECORD_ENV, "1")
    monkeypatch.setattr("sys.argv", _executor_argv(tmp_path / "task"))
    with pytest.raises(SystemExit):
        _failed_and_shown()
    err = capsys.readouterr().err
    expected = "JobFailedError: rank 1: RuntimeError: boom; PyTorchJob default/p failed: BackoffLimitExceeded"
    lines = err.splitlines()
    # The one line, then the step's own CPU line (kfp_runtime.usage): no tails a second time.
    assert lines[0] == f"kubetrain: {expected}"
    assert len(lines) == 2 and lines[1].startswith("launcher: cpu ")
    assert read_failure(tmp_path / "task") == StepFailure(error=expected, exit_code=1)
