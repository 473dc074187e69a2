"""What `kubetrain run` prints by default: the steps' progress, not kfp.local's dumps; all of it in run.log.

The input is what kfp.local 2.17 printed for a real `kubetrain run mnist_pytorch --param epochs=1`
(data/kfp_local_mnist_pytorch.txt, paths shortened): 213 lines, 153 of them the executor inputs.
"""

from __future__ import annotations

import io
import logging
from pathlib import Path

from kubetrain.tooling.progress import RunLog, RunLogHandler

TRANSCRIPT = (Path(__file__).parent / "data" / "kfp_local_mnist_pytorch.txt").read_text(encoding="utf-8")


def _through(text: str, *, verbose: bool = False, chunk: int = 37) -> tuple[RunLog, str, str]:
    log, console = io.StringIO(), io.StringIO()
    stream = RunLog(log, console, verbose=verbose)
    for i in range(0, len(text), chunk):  # kfp.local writes in pieces, not whole lines
        stream.write(text[i : i + chunk])
    return stream, log.getvalue(), console.getvalue()


def test_the_console_gets_the_steps_progress_only() -> None:
    _, log, console = _through(TRANSCRIPT)
    assert log == TRANSCRIPT  # the run log keeps every byte
    j = "pytorch-80994a9fe454"
    assert console.splitlines() == [
        "step download-dataset: running",
        "    dataset digits: downloaded at /workspace/datasets/digits-d809e078 on claim kubetrain-workspace; "
        "train 1438 records, test 359 records",
        "step download-dataset: done",
        "step pytorch-train: running",
        f"    pytorch: job {j} on the local backend, output /workspace/runs/{j}/output",
        f"    13:22:05.344 PyTorchJob default/{j} submitted (local)",
        f"    13:22:05.348 PyTorchJob default/{j}: submitted → Created (PyTorchJobCreated: PyTorchJob {j} is created.)",
        f"    13:22:05.370 pod {j}-master-0 [Master 0]: Running",
        f"    13:22:05.370 pod {j}-worker-0 [Worker 0]: Running",
        f"    13:22:05.374 following the log of pod {j}-master-0 [Master 0], container pytorch",
        f"    13:22:05.374 PyTorchJob default/{j}: Created → Running (PyTorchJobRunning: PyTorchJob {j} is running.)",
        f"    13:22:09.158 [{j}-master-0] [rank 0] operator: rank 0/2 gloo on cpu",
        f"    13:22:12.223 [{j}-master-0] [rank 0] epoch 0: loss 1.5030 test accuracy 0.8579",
        f"    13:22:12.273 [{j}-master-0] [rank 0] done: test accuracy 0.8579, wrote "
        f"/home/me/runs/mnist_pytorch-20261124-132202-295766/local/claims/kubetrain-workspace/runs/{j}/output",
        f"    13:22:14.626 pod {j}-worker-0 [Worker 0]: Running → Succeeded (Completed)",
        f"    13:22:14.629 PyTorchJob default/{j}: Running → Succeeded (PyTorchJobSucceeded: PyTorchJob {j} is "
        "successfully completed.)",
        f"    13:22:14.630 pod {j}-master-0 [Master 0]: Running → Succeeded (Completed)",
        f"    13:22:14.634 PyTorchJob default/{j} succeeded in 9.0s",
        f"    13:22:14.634 deleted PyTorchJob default/{j}: it succeeded and --delete-after is success",
        "    pytorch: Succeeded; test_accuracy 0.8579, test_loss 0.589, train_loss 1.503, samples_per_second "
        "1.513e+04, duration_seconds 3.135, world_size 2, epochs 1, job_seconds 9.357",
        "step pytorch-train: done",
    ]


def test_verbose_shows_everything() -> None:
    _, _, console = _through(TRANSCRIPT, verbose=True)
    assert console == TRANSCRIPT


def test_a_failing_steps_traceback_is_shown_and_its_last_line_kept() -> None:
    text = (
        "10:00:00.000 - INFO - Executing task \x1b[96m'my-step'\x1b[0m\n"
        "10:00:00.001 - INFO - Streamed logs:\n\n"
        "    [KFP Executor 2026-01-01 10:00:00,100 INFO]: Got executor_input:\n"
        "    {\n"
        '        "inputs": {}\n'
        "    }\n"
        "    Traceback (most recent call last):\n"
        '      File "/tmp/x/ephemeral_component.py", line 9, in my_step\n'
        "    ValueError: the input is empty\n"
        "    \n\n"
        "10:00:00.500 - ERROR - Task \x1b[96m'my-step'\x1b[0m finished with status \x1b[91mFAILURE\x1b[0m\n"
    )
    stream, _, console = _through(text)
    assert console.splitlines() == [
        "step my-step: running",
        "    Traceback (most recent call last):",
        '      File "/tmp/x/ephemeral_component.py", line 9, in my_step',
        "    ValueError: the input is empty",
        "step my-step: failed",
    ]
    assert stream.progress.last_line("my-step") == "ValueError: the input is empty"
    assert stream.progress.last_line("never-ran") == ""
    assert stream.progress.started == {"my-step"}


def test_logging_during_the_run_info_to_the_log_only_warnings_shown() -> None:
    log, console = io.StringIO(), io.StringIO()
    stream = RunLog(log, console)
    logger = logging.getLogger("test-run-progress")
    logger.propagate = False
    logger.addHandler(RunLogHandler(stream))
    logger.setLevel(logging.INFO)
    logger.info("Cleaned up workspace: /tmp/kfp-workspace-x")
    logger.warning("the disk is nearly full")
    assert "Cleaned up workspace" in log.getvalue()
    assert "Cleaned up workspace" not in console.getvalue()
    assert "the disk is nearly full" in console.getvalue()
