"""Every `--json` command ends with one object of one schema (issue 49.9): the same head, then the command's keys.

The head (state, exit_code, error, error_type, warnings) comes first whatever ended the command; the
command's own keys are there on success and on failure alike, null where it did not get that far.
"""

# No `from __future__ import annotations`: kfp reads the component's annotations as types.
import json
import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from kubetrain.cli import main
from kubetrain.commands import launch
from kubetrain.errors import ExitCode, JobFailedError
from kubetrain.status import JobPhase, JobResult
from kubetrain.tooling.outcome import RunOutcome, TaskOutcome
from kubetrain.tooling.result_json import HEAD

RUN_KEYS = ["pipeline", "run_dir", "log", "claims_dir", "wall_seconds", "arguments", "tasks"]
JOB_KEYS = list(launch._JOB_KEYS)


def _last(out: str) -> dict[str, Any]:
    obj = json.loads(out.strip().splitlines()[-1])
    assert isinstance(obj, dict)
    assert list(obj)[: len(HEAD)] == list(HEAD), list(obj)
    return obj


def test_a_run_that_fails_before_it_starts_has_the_runs_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["run", "mnist_pytorch", "--param", "epochs=0", "--json", "--runs-dir", str(tmp_path)])
    out = _last(capsys.readouterr().out)
    assert code == ExitCode.INVALID_INPUT == out["exit_code"]
    assert out["state"] == "FAILED" and out["error_type"] == "InvalidInputError" and out["warnings"] == []
    assert list(out)[len(HEAD) :] == RUN_KEYS
    assert out["pipeline"] == "mnist_pytorch" and out["arguments"] == {"epochs": 0} and out["tasks"] == {}


def test_a_dry_run_has_the_head_and_the_runs_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "mnist_pytorch", "--dry-run", "--json", "--runs-dir", str(tmp_path)]) == ExitCode.SUCCESS
    out = _last(capsys.readouterr().out)
    assert (out["state"], out["exit_code"], out["error"], out["error_type"]) == ("CHECKED", 0, None, None)
    assert list(out)[len(HEAD) :] == [*RUN_KEYS, "steps", "checked_steps"]


def test_a_failed_run_names_its_failed_task_at_the_top_and_gathers_every_warning(tmp_path: Path) -> None:
    done = TaskOutcome("download-dataset", "comp-download-dataset", "SUCCEEDED", exit_code=0, warnings=("no checksum",))
    failed = TaskOutcome(
        "pytorch-train", "comp-pytorch-train", "FAILED", error="rank 1: RuntimeError: boom", exit_code=1, recorded=True
    )
    outcome = RunOutcome(
        pipeline="p", state="FAILED", run_dir=tmp_path, claims_dir=tmp_path, wall_seconds=1.0, arguments={},
        tasks=(done, failed), notices=("step pytorch-train: locally, not used: accelerator nvidia.com/gpu: 1",),
    )  # fmt: skip
    out = _last(json.dumps(outcome.to_json()))
    assert out["error"] == "task pytorch-train: rank 1: RuntimeError: boom"
    assert out["exit_code"] == 1 and out["error_type"] is None
    assert out["warnings"] == [
        "step pytorch-train: locally, not used: accelerator nvidia.com/gpu: 1",
        "task download-dataset: no checksum",
    ]
    assert list(out)[len(HEAD) :] == RUN_KEYS
    succeeded = RunOutcome(
        pipeline="p", state="SUCCEEDED", run_dir=tmp_path, claims_dir=tmp_path, wall_seconds=1.0, arguments={},
        tasks=(done,),
    )  # fmt: skip
    assert succeeded.to_json()["error"] is None


NOTICED = """
from kfp import dsl


@dsl.component(base_image="python:3.11", install_kfp_package=False)
def hello() -> str:
    return "hello"


@dsl.pipeline(name="noticed")
def noticed():
    hello().set_accelerator_type("nvidia.com/gpu").set_accelerator_limit(1)
"""


def test_a_runs_locally_not_used_notices_are_in_its_warnings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "noticed.py"
    path.write_text(NOTICED)
    assert main(["run", str(path), "--json", "--runs-dir", str(tmp_path / "runs")]) == ExitCode.SUCCESS
    captured = capsys.readouterr()
    out = _last(captured.out)
    assert out["state"] == "SUCCEEDED"
    (notice,) = out["warnings"]
    assert notice.startswith("step hello: locally, not used: accelerator nvidia.com/gpu: 1")
    assert notice in captured.err  # what the console said


def _manifest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    assert main(["render", "pytorchjob", "--name", "schema", "-o", "json"]) == ExitCode.SUCCESS
    path = tmp_path / "job.json"
    path.write_text(capsys.readouterr().out)
    return path


class _Backend:
    def close(self) -> None:
        pass


def test_launch_has_one_schema_for_success_and_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = _manifest(tmp_path, capsys)
    now = datetime.now(UTC)
    result = JobResult(
        name="schema", namespace="default", kind="PyTorchJob", uid="u1", phase=JobPhase.SUCCEEDED, reason="Done",
        message="", start_time=now, completion_time=now, restarts=0, backend="local",
    )  # fmt: skip
    monkeypatch.setattr(launch, "make_backend", lambda args: _Backend())
    monkeypatch.setattr(launch, "run_job", lambda *a, **k: result)
    assert main(["launch", "-f", str(manifest), "--local", "--json"]) == ExitCode.SUCCESS
    ok = _last(capsys.readouterr().out)
    assert (ok["state"], ok["exit_code"], ok["error"], ok["phase"]) == ("SUCCEEDED", 0, None, "Succeeded")

    def fail(*args: object, **kwargs: object) -> JobResult:
        raise JobFailedError("job schema failed: BackoffLimitExceeded", reason="BackoffLimitExceeded")

    monkeypatch.setattr(launch, "run_job", fail)
    assert main(["launch", "-f", str(manifest), "--local", "--json"]) == ExitCode.JOB_FAILED
    bad = _last(capsys.readouterr().out)
    assert (bad["state"], bad["exit_code"], bad["phase"], bad["reason"]) == (
        "FAILED", 1, "Failed", "BackoffLimitExceeded"
    )  # fmt: skip
    assert (bad["name"], bad["kind"], bad["backend"]) == ("schema", "PyTorchJob", "local")
    assert list(ok)[len(HEAD) :] == list(bad)[len(HEAD) :] == JOB_KEYS

    assert main(["launch", "-f", str(tmp_path / "missing.yaml"), "--json"]) == ExitCode.INVALID_INPUT
    early = _last(capsys.readouterr().out)
    assert list(early)[len(HEAD) :] == JOB_KEYS and early["backend"] == "kubernetes"


def test_submit_and_list_have_the_head(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:  # a port that was free a moment ago and has no listener
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert main(["submit", "mnist_pytorch", "--host", f"http://127.0.0.1:{port}", "--json"]) == ExitCode.INFRASTRUCTURE
    out = _last(capsys.readouterr().out)
    assert "run_id" in out and out["run_id"] is None
    assert main(["list", "--runs-dir", str(tmp_path), "--json"]) == ExitCode.SUCCESS
    listed = _last(capsys.readouterr().out)
    assert (listed["state"], listed["exit_code"], listed["runs"]) == ("SUCCEEDED", 0, {})


def test_list_params_with_json_ends_with_the_object_too(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "mnist_pytorch", "--list-params", "--json"]) == ExitCode.SUCCESS
    captured = capsys.readouterr()
    out = _last(captured.out)
    assert (out["state"], out["exit_code"], out["pipeline"]) == ("SUCCEEDED", 0, "mnist_pytorch")
    assert out["parameters"]["epochs"]["type"] == "Integer"
    assert list(out)[len(HEAD) :] == [*RUN_KEYS, "parameters"]
    assert "epochs" in captured.err  # the table, for a person
