"""Each pipeline end to end on this machine with real training: `kubetrain run/demo --json`.

The real CLI in a subprocess: kfp.local runs every step as a process, the launcher steps run
their PyTorchJob / MPIJob / JobSet on the local backend (real gloo, MPI and gRPC processes), and
the test reads the one JSON object stdout ends with. Every framework must reach 0.95 test
accuracy on the built-in digits.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kubetrain.errors import ExitCode

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

TARGET = 0.95
TRAINERS = {"pytorch-train": "pytorch", "chainermn-train": "chainermn", "ps-train": "ps"}


def kubetrain(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """Run the CLI with --json; returns the process and the JSON object that must be all of stdout."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "SETUPTOOLS_USE_DISTUTILS": "stdlib"}
    proc = subprocess.run(
        [sys.executable, "-m", "kubetrain", *args, "--json", "--runs-dir", str(tmp_path / "runs")],
        capture_output=True,
        text=True,
        timeout=840,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, (
        f"stdout must be one JSON object; got:\n{proc.stdout[-2000:]}\nstderr:\n{proc.stderr[-4000:]}"
    )
    return proc, json.loads(lines[0])


def processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that mention `text` (a run directory)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(cmdline)
    return found


def check_trainer(result: dict[str, Any], task_name: str) -> None:
    task = result["tasks"][task_name]
    framework = TRAINERS[task_name]
    assert task["state"] == "SUCCEEDED"
    assert task["parameters"]["status"] == "Succeeded"
    assert task["parameters"]["job_name"].startswith(f"{framework}-")
    accuracy = task["metrics"]["test_accuracy"]
    assert accuracy >= TARGET, f"{framework}: test accuracy {accuracy:.4f} < {TARGET}"
    for key in ("test_loss", "samples_per_second", "duration_seconds", "job_seconds", "world_size"):
        assert task["metrics"][key] > 0, f"{framework}: {key} = {task['metrics'][key]}"
    model_dir = Path(task["artifacts"]["model"])
    written = json.loads((model_dir / "metrics.json").read_text())
    assert written["test_accuracy"] == pytest.approx(accuracy)
    assert any(p.name.startswith("model.") for p in model_dir.iterdir())
    report = Path(task["reports"]["report"])
    assert report.suffix == ".html"
    assert '<figure class="charts" aria-label="loss and test accuracy curves">\n<svg ' in report.read_text()


def check_clean(result: dict[str, Any]) -> None:
    assert not processes_mentioning(result["run_dir"]), "processes of the run outlived it"


# The demo below runs the three trainers at their default sizes (PyTorch master + 1 worker,
# ChainerMN 2 workers, PS 2 servers + 3 workers) and holds each to 0.95. Here each pipeline of its
# own runs at the smallest size that shows its wiring: a non-default size passed as a run
# parameter, which the job's world size must show (the unit tier's CPU, docs/testing.md).
@pytest.mark.parametrize(
    ("pipeline", "params", "world_size"),
    [
        ("mnist_pytorch", ["workers=0"], 1),  # a master-only PyTorchJob: one process
        ("mnist_chainermn", [], 2),  # the defaults: one launcher, two ranks (the cheapest of the three)
        ("mnist_ps", ["ps_replicas=1", "workers=2"], 2),  # still asynchronous updates from two workers
    ],
    ids=["mnist_pytorch", "mnist_chainermn", "mnist_ps"],
)
def test_single_framework_pipeline(tmp_path: Path, pipeline: str, params: list[str], world_size: int) -> None:
    proc, result = kubetrain(tmp_path, "run", pipeline, *(arg for p in params for arg in ("--param", p)))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert result["pipeline"] == pipeline
    assert result["state"] == "SUCCEEDED"
    trainer = next(t for t, f in TRAINERS.items() if pipeline.endswith(f))
    assert list(result["tasks"]) == ["download-cache-key", "download-dataset", trainer]
    dataset = result["tasks"]["download-dataset"]
    assert dataset["state"] == "SUCCEEDED"
    assert Path(dataset["artifacts"]["dataset"]).is_file()
    check_trainer(result, trainer)
    assert result["tasks"][trainer]["metrics"]["world_size"] == world_size
    check_clean(result)


def test_a_diverging_ps_run_fails_at_once_with_one_line_naming_the_non_finite_loss(tmp_path: Path) -> None:
    # issue 33: learning_rate=1e38 used to end SUCCEEDED with an all-NaN model, then failed only after
    # every worker had crash-looped through the JobSet's restarts, with a generic line.
    # One server and one worker for one epoch: the first pushed gradient already diverges.
    small = ("--param", "ps_replicas=1", "--param", "workers=1", "--param", "epochs=1")
    proc, result = kubetrain(tmp_path, "run", "mnist_ps", "--param", "learning_rate=1e38", *small)
    assert proc.returncode == ExitCode.JOB_FAILED, proc.stderr[-4000:]
    task = result["tasks"]["ps-train"]
    assert (result["state"], task["state"], task["exit_code"]) == ("FAILED", "FAILED", ExitCode.JOB_FAILED)
    error = task["error"]
    assert "\n" not in error and "Traceback" not in error, error
    # The reason comes first, from the master; the JobSet was failed by its master, not restarted.
    assert re.match(r"JobFailedError: master-0: JobAbortedError: the model diverged: .*is not finite", error), error
    assert "at model version" in error and "ReachedMaxRestarts" not in error, error
    check_clean(result)


@pytest.mark.parametrize("pipeline", ["mnist_pytorch", "mnist_chainermn"])
def test_pipelines_train_through_kubeflow_trainer_v2(tmp_path: Path, pipeline: str) -> None:
    """job_api=trainjob: a TrainJob on torch-distributed / kubetrain-mpi, resolved as the Trainer does."""
    proc, result = kubetrain(tmp_path, "run", pipeline, "--param", "job_api=trainjob")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert result["state"] == "SUCCEEDED"
    task_name = list(result["tasks"])[-1]  # after the download-cache-key and download-dataset steps
    check_trainer(result, task_name)
    model_meta = json.loads((Path(result["tasks"][task_name]["artifacts"]["model"]) / "metrics.json").read_text())
    assert model_meta["world_size"] == 2
    assert f"TrainJob default/{result['tasks'][task_name]['parameters']['job_name']} submitted" in proc.stderr
    check_clean(result)


def test_demo_compares_the_three_frameworks(tmp_path: Path) -> None:
    proc, result = kubetrain(tmp_path, "demo")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert result["pipeline"] == "compare_frameworks"
    assert result["state"] == "SUCCEEDED"
    assert list(result["tasks"])[:2] == ["download-cache-key", "download-dataset"]
    assert list(result["tasks"])[-1] == "compare-summary"
    for task_name in TRAINERS:
        check_trainer(result, task_name)
    summary = result["tasks"]["compare-summary"]
    table = Path(summary["reports"]["summary"]).read_text()
    for task_name, framework in TRAINERS.items():
        job = result["tasks"][task_name]["parameters"]["job_name"]
        accuracy = result["tasks"][task_name]["metrics"]["test_accuracy"]
        assert f"| {framework} | {job} | Succeeded | {accuracy:.4f} |" in table
    assert summary["parameters"]["Output"] in TRAINERS.values()
    # The human-readable account goes to stderr with --json: the table and where the charts are.
    assert "test accuracy" in proc.stderr
    assert "charts (loss and accuracy curves)" in proc.stderr
    check_clean(result)


@pytest.mark.parametrize(
    ("param", "error"),
    [
        ("architecture=bogus", "architecture: got 'bogus'; expected one of mlp, cnn"),
        ("workers=-1", "workers: got -1; expected an integer >= 0"),  # the input the user typed, not `replicas`
    ],
)
def test_invalid_input_fails_the_run_before_any_step_starts(tmp_path: Path, param: str, error: str) -> None:
    """The stderr line, the JSON and the exit code say which step's input is wrong and why, before the download runs.

    (Issue 49.6: the run downloaded first and failed at the training step 40 s later. The step's own
    check, what a cluster run meets, is tests/unit/test_step_failures.py's.)
    """
    proc, result = kubetrain(tmp_path, "run", "mnist_pytorch", "--param", param)
    assert proc.returncode == ExitCode.INVALID_INPUT
    assert (result["state"], result["exit_code"], result["error_type"]) == ("FAILED", 2, "InvalidInputError")
    assert result["error"].startswith("step pytorch-train: ") and error in result["error"], result["error"]
    assert result["tasks"] == {} and result["run_dir"] is None  # nothing ran
    assert proc.stderr.rstrip().splitlines()[-1] == f"kubetrain run: {result['error']}"
    runs = tmp_path / "runs"
    assert not runs.exists() or not any(runs.iterdir()), "a step started despite invalid input"
