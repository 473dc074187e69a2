"""`kubetrain run`'s bookkeeping without running anything: arguments, task states, the JSON outcome."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kubetrain.cli import main
from kubetrain.errors import ExitCode
from kubetrain.kfp_runtime.exits import FAILURE_RECORD
from kubetrain.tooling.catalog import Entry
from kubetrain.tooling.outcome import RunOutcome, TaskOutcome, cancelled, collect, dag_tasks, describe


def test_unknown_pipeline_and_parameters_fail_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "nope", "--runs-dir", str(tmp_path)]) == ExitCode.INVALID_INPUT
    assert "expected one of mnist_pytorch, mnist_chainermn, mnist_ps, compare_frameworks" in capsys.readouterr().err
    assert main(["run", "mnist_ps", "--param", "epoch=1", "--runs-dir", str(tmp_path)]) == ExitCode.INVALID_INPUT
    assert "this pipeline has no such parameter" in capsys.readouterr().err
    assert not any(tmp_path.iterdir()), "a run directory was created for a run that never started"


def test_tasks_come_upstream_first() -> None:
    tasks = dag_tasks(Entry("pipeline", "compare_frameworks").load())
    names = [t.name for t in tasks]
    assert names[:2] == ["download-cache-key", "download-dataset"]
    assert names[-1] == "compare-summary"
    assert set(names[2:5]) == {"pytorch-train", "chainermn-train", "ps-train"}
    assert [t.directory for t in tasks] == names  # the root DAG's steps are reported by their task names
    outputs = {t.name: t.outputs for t in tasks}
    assert outputs["pytorch-train"] == {"model": "system.Model", "metrics": "system.Metrics", "report": "system.HTML"}


def test_task_states_are_read_from_the_kfp_output_tree(tmp_path: Path) -> None:
    root = tmp_path / "kfp" / "p-2026"
    done = root / "pytorch-train"
    done.mkdir(parents=True)
    (done / "report").write_text("<html>curves</html>")
    (done / "model").mkdir()
    (done / "executor_output.json").write_text(
        json.dumps(
            {
                "parameterValues": {"job_name": "pytorch-1", "status": "Succeeded"},
                "artifacts": {
                    "metrics": {"artifacts": [{"uri": str(done / "metrics"), "metadata": {"test_accuracy": 0.97}}]},
                    "model": {"artifacts": [{"uri": str(done / "model"), "metadata": {}}]},
                    "report": {"artifacts": [{"uri": str(done / "report"), "metadata": {}}]},
                },
            }
        )
    )
    (root / "ps-train").mkdir()  # started, no executor output: it failed
    outputs = {"model": "system.Model", "metrics": "system.Metrics", "report": "system.HTML"}
    reports = tmp_path / "reports"

    succeeded = collect("pytorch-train", "comp-pytorch-train", outputs, root, reports)
    assert succeeded.state == "SUCCEEDED"
    assert succeeded.parameters == {"job_name": "pytorch-1", "status": "Succeeded"}
    assert succeeded.metrics == {"test_accuracy": 0.97}
    assert succeeded.artifacts == {"model": str(done / "model"), "report": str(done / "report")}
    copy = Path(succeeded.reports["report"])
    assert copy == reports / "pytorch-train-report.html"
    assert copy.read_text() == "<html>curves</html>"
    assert collect("ps-train", "comp-ps-train", outputs, root, reports).state == "FAILED"
    assert collect("chainermn-train", "comp-chainermn-train", outputs, root, reports).state == "NOT_RUN"

    outcome = RunOutcome(
        pipeline="p",
        state="FAILED",
        run_dir=tmp_path,
        claims_dir=tmp_path / "local" / "claims",
        wall_seconds=12.345,
        arguments={"epochs": 2},
        tasks=(succeeded, collect("ps-train", "comp-ps-train", outputs, root, reports)),
    )
    as_json = json.loads(json.dumps(outcome.to_json()))
    assert as_json["state"] == "FAILED"
    assert as_json["tasks"]["pytorch-train"]["metrics"]["test_accuracy"] == 0.97
    assert as_json["tasks"]["ps-train"] == {
        "state": "FAILED",
        "component": "comp-ps-train",
        "error": "the step printed nothing; see the run's log",
        "exit_code": 1,
        "metrics": {},
        "parameters": {},
        "artifacts": {},
        "reports": {},
        "warnings": [],
    }
    text = describe(outcome)
    assert "pipeline p: FAILED in 12.3s" in text
    assert f"report: {copy}" in text


def _failed_task_dir(tmp_path: Path, record: dict[str, object] | None) -> Path:
    root = tmp_path / "kfp" / "p-2026"
    (root / "pytorch-train").mkdir(parents=True)
    if record is not None:
        (root / "pytorch-train" / FAILURE_RECORD).write_text(json.dumps(record))
    return root


def test_a_failed_task_carries_its_steps_error_and_exit_code(tmp_path: Path) -> None:
    root = _failed_task_dir(tmp_path, {"error": "SpecError: workers: got -1; expected >= 0", "exit_code": 2})
    task = collect("pytorch-train", "comp-pytorch-train", {}, root, tmp_path / "reports", last_line="ignored")
    assert (task.state, task.error, task.exit_code) == ("FAILED", "SpecError: workers: got -1; expected >= 0", 2)
    download = TaskOutcome("download-dataset", "comp-download-dataset", "SUCCEEDED", exit_code=0)
    outcome = RunOutcome(
        pipeline="p", state="FAILED", run_dir=tmp_path, claims_dir=tmp_path, wall_seconds=1.0, arguments={},
        tasks=(download, task), log_file=tmp_path / "run.log",
    )  # fmt: skip
    assert outcome.exit_code == 2  # the step's code, not a blanket 1
    as_json = outcome.to_json()
    assert as_json["exit_code"] == 2
    assert as_json["tasks"]["pytorch-train"]["error"] == "SpecError: workers: got -1; expected >= 0"
    assert as_json["tasks"]["pytorch-train"]["exit_code"] == 2
    text = describe(outcome)
    assert "task pytorch-train: FAILED\n    error: SpecError: workers: got -1; expected >= 0 (exit code 2)" in text
    assert f"full log: {tmp_path / 'run.log'}" in text


def test_a_step_without_a_record_is_described_by_its_last_line(tmp_path: Path) -> None:
    """A user's own component that raised: the traceback's last line is the error."""
    root = _failed_task_dir(tmp_path, None)
    task = collect("pytorch-train", "comp-pytorch-train", {}, root, tmp_path, last_line="ValueError: boom")
    assert (task.state, task.error, task.exit_code, task.recorded) == ("FAILED", "ValueError: boom", 1, False)
    # A component without output artifacts gets no directory before it fails: started says it ran.
    check = collect("check", "comp-check", {}, root, tmp_path, last_line="ValueError: low", started=True)
    assert (check.state, check.error, check.exit_code) == ("FAILED", "ValueError: low", 1)
    assert collect("check", "comp-check", {}, root, tmp_path).state == "NOT_RUN"


@pytest.mark.parametrize(
    ("record", "state", "code"),
    [
        ({"error": "JobCancelledError: SIGTERM", "exit_code": 5}, "CANCELLED", 5),  # stopped by the run
        (None, "CANCELLED", 5),  # killed past its grace period: no record
        ({"error": "JobTimeoutError: 60s", "exit_code": 3}, "FAILED", 3),  # failed on its own first
    ],
)
def test_in_a_cancelled_run_the_interrupted_task_is_cancelled(
    tmp_path: Path, record: dict[str, object] | None, state: str, code: int
) -> None:
    root = _failed_task_dir(tmp_path, record)
    task = cancelled(collect("pytorch-train", "comp-pytorch-train", {}, root, tmp_path), "SIGINT")
    assert (task.state, task.exit_code) == (state, code)
    done = TaskOutcome("download-dataset", "comp-download-dataset", "SUCCEEDED", exit_code=0)
    assert cancelled(done, "SIGINT") == done
    outcome = RunOutcome(
        pipeline="p", state="CANCELLED", run_dir=tmp_path, claims_dir=tmp_path, wall_seconds=1.0, arguments={},
        tasks=(done, task),
    )  # fmt: skip
    assert outcome.exit_code == ExitCode.CANCELLED


def test_a_steps_warnings_are_in_the_summary_and_the_json(tmp_path: Path) -> None:
    """Issue 34: an empty model or unreadable metrics were said only in the stream, the Model's metadata and the report."""
    root = tmp_path / "kfp" / "p-2026"
    done = root / "pytorch-train"
    done.mkdir(parents=True)
    said = "the job succeeded but the program left nothing in its output directory /workspace/out"
    (done / "executor_output.json").write_text(
        json.dumps(
            {
                "artifacts": {
                    "model": {"artifacts": [{"uri": str(done / "model"), "metadata": {"warnings": [said]}}]},
                    "metrics": {"artifacts": [{"uri": str(done / "metrics"), "metadata": {"job_seconds": 3.0}}]},
                }
            }
        )
    )
    task = collect("pytorch-train", "comp-pytorch-train", {"metrics": "system.Metrics"}, root, tmp_path / "r")
    assert task.warnings == (said,)
    outcome = RunOutcome("p", "SUCCEEDED", tmp_path, tmp_path, 1.0, {}, (task,))
    assert outcome.to_json()["tasks"]["pytorch-train"]["warnings"] == [said]
    assert f"    warning: {said}" in describe(outcome).splitlines()


def test_the_summarys_metrics_read_as_the_reports_do(tmp_path: Path) -> None:
    """Issue 34 item 9: the summary said `samples_per_second: 1.704e+04` and `world_size: 2` only by luck of %g."""
    metrics = {"samples_per_second": 17040.4, "world_size": 2.0, "job_seconds": 61.14, "test_accuracy": 0.89142}
    task = TaskOutcome("pytorch-train", "comp-pytorch-train", "SUCCEEDED", metrics=metrics)
    lines = describe(RunOutcome("p", "SUCCEEDED", tmp_path, tmp_path, 1.0, {}, (task,))).splitlines()
    assert "    samples_per_second: 17,040" in lines
    assert "    world_size: 2" in lines
    assert "    job_seconds: 61.1" in lines
    assert "    test_accuracy: 0.8914" in lines


def test_the_summary_shows_an_integer_metric_as_an_integer(tmp_path: Path) -> None:
    """Issue 49 item 11: `kubetrain run`'s summary printed a program's integer metric as `2.0000`."""
    root = tmp_path / "kfp" / "p-2026"
    done = root / "train"
    done.mkdir(parents=True)
    metadata = {"workers_seen": 2, "f1": 0.5}
    (done / "executor_output.json").write_text(
        json.dumps({"artifacts": {"metrics": {"artifacts": [{"uri": str(done / "metrics"), "metadata": metadata}]}}})
    )
    task = collect("train", "comp-train", {"metrics": "system.Metrics"}, root, tmp_path / "reports")
    outcome = RunOutcome(
        pipeline="p", state="SUCCEEDED", run_dir=tmp_path, claims_dir=tmp_path, wall_seconds=1.0, arguments={},
        tasks=(task,),
    )  # fmt: skip
    assert "    workers_seen: 2\n    f1: 0.5000" in describe(outcome)
    assert json.loads(json.dumps(outcome.to_json()))["tasks"]["train"]["metrics"] == metadata
