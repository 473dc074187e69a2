"""`kubetrain run`'s bookkeeping without running anything: arguments, task states, the JSON outcome."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kubetrain.cli import main
from kubetrain.errors import ExitCode
from kubetrain.tooling.catalog import Entry
from kubetrain.tooling.local_run import RunOutcome, _collect, _dag_tasks, describe


def test_unknown_pipeline_and_parameters_fail_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "nope", "--runs-dir", str(tmp_path)]) == ExitCode.INVALID_INPUT
    assert "expected one of mnist_pytorch, mnist_chainermn, mnist_ps, compare_frameworks" in capsys.readouterr().err
    assert main(["run", "mnist_ps", "--param", "epoch=1", "--runs-dir", str(tmp_path)]) == ExitCode.INVALID_INPUT
    assert "this pipeline has no such parameter" in capsys.readouterr().err
    assert not any(tmp_path.iterdir()), "a run directory was created for a run that never started"


def test_tasks_come_upstream_first() -> None:
    tasks = _dag_tasks(Entry("pipeline", "compare_frameworks").load())
    names = [name for name, _, _ in tasks]
    assert names[0] == "download-dataset"
    assert names[-1] == "compare-summary"
    assert set(names[1:4]) == {"pytorch-train", "chainermn-train", "ps-train"}
    outputs = {name: outs for name, _, outs in tasks}
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

    succeeded = _collect("pytorch-train", "comp-pytorch-train", outputs, root, reports)
    assert succeeded.state == "SUCCEEDED"
    assert succeeded.parameters == {"job_name": "pytorch-1", "status": "Succeeded"}
    assert succeeded.metrics == {"test_accuracy": 0.97}
    assert succeeded.artifacts == {"model": str(done / "model"), "report": str(done / "report")}
    copy = Path(succeeded.reports["report"])
    assert copy == reports / "pytorch-train-report.html"
    assert copy.read_text() == "<html>curves</html>"
    assert _collect("ps-train", "comp-ps-train", outputs, root, reports).state == "FAILED"
    assert _collect("chainermn-train", "comp-chainermn-train", outputs, root, reports).state == "NOT_RUN"

    outcome = RunOutcome(
        pipeline="p",
        state="FAILED",
        run_dir=tmp_path,
        claims_dir=tmp_path / "local" / "claims",
        wall_seconds=12.345,
        arguments={"epochs": 2},
        tasks=(succeeded, _collect("ps-train", "comp-ps-train", outputs, root, reports)),
    )
    as_json = json.loads(json.dumps(outcome.to_json()))
    assert as_json["state"] == "FAILED"
    assert as_json["tasks"]["pytorch-train"]["metrics"]["test_accuracy"] == 0.97
    assert as_json["tasks"]["ps-train"] == {
        "state": "FAILED",
        "component": "comp-ps-train",
        "metrics": {},
        "parameters": {},
        "artifacts": {},
        "reports": {},
    }
    text = describe(outcome)
    assert "pipeline p: FAILED in 12.3s" in text
    assert f"report: {copy}" in text
