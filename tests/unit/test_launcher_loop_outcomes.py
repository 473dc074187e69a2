"""The await loop's endings: success (transitions, log, delete), failure (log tails read before
any delete, the program's own error first), and what is kept.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from kubetrain.backends.base import JobRef, PodInfo, PodWatch
from kubetrain.errors import (
    JobFailedError,
)
from kubetrain.launcher import AwaitOptions, Tuning, run_job
from kubetrain.status import JobPhase
from tests.unit.launcher_memory_backend import FAST, MemoryBackend, Scenario, cond, launch, manifest, pod

pytestmark = pytest.mark.timeout(60)


def test_success_reports_transitions_follows_log_and_deletes() -> None:
    backend = MemoryBackend()

    def script(b: MemoryBackend) -> None:
        b.wait_for_line("submitted → Pending")
        b.set_pods(pod("train-abc-master-0", "Master", 0, "Pending", reason="ContainerCreating"))
        b.set_conditions(cond("Created"))
        b.wait_for_line("Pending (ContainerCreating)")
        b.set_pods(pod("train-abc-master-0", "Master", 0, "Running"))
        b.set_conditions(cond("Created"), cond("Running"))
        b.add_log("train-abc-master-0", "epoch 1 loss 0.5", "epoch 2 loss 0.2")
        b.wait_for_line("epoch 2 loss 0.2")
        b.set_pods(pod("train-abc-master-0", "Master", 0, "Succeeded", exit_code=0))
        b.set_conditions(
            cond("Created"), cond("Running", "False"), cond("Succeeded", reason="PyTorchJobSucceeded"),
            startTime="2025-01-01T00:00:00Z", completionTime="2025-01-01T00:01:00Z",
        )  # fmt: skip

    scenario = Scenario(backend, script)
    scenario.start()
    result = run_job(
        manifest(), backend=backend, options=AwaitOptions(timeout_seconds=30, tuning=Tuning(**FAST)),
        log_sink=backend.sink,
    )  # fmt: skip
    scenario.check()
    lines = backend.lines
    assert result.phase == JobPhase.SUCCEEDED
    assert (result.name, result.namespace, result.uid, result.backend) == ("train-abc", "ns", "uid-1", "memory")
    assert result.duration_seconds == 60.0
    text = "\n".join(lines)
    assert "PyTorchJob ns/train-abc: submitted → Pending" in text
    assert "Created → Running" in text
    assert "Running → Succeeded (PyTorchJobSucceeded)" in text
    assert "pod train-abc-master-0 [Master 0]: Pending (ContainerCreating)" in text
    assert "pod train-abc-master-0 [Master 0]: Pending → Running after" in text
    assert "[train-abc-master-0] epoch 1 loss 0.5" in lines
    assert lines.count("[train-abc-master-0] epoch 2 loss 0.2") == 1
    assert backend.calls[-1] == "delete"


def test_failure_raises_with_log_tails_captured_before_delete() -> None:
    backend = MemoryBackend()

    def script(b: MemoryBackend) -> None:
        b.add_log("train-abc-worker-1", *[f"line {i}" for i in range(100)], "RuntimeError: NCCL timeout")
        b.set_pods(
            pod("train-abc-master-0", "Master", 0, "Running"),
            pod("train-abc-worker-1", "Worker", 1, "Failed", reason="Error", exit_code=1),
        )
        b.set_conditions(cond("Created"), cond("Failed", reason="PyTorchJobFailed", message="Worker 1 failed"))

    with pytest.raises(JobFailedError) as info:
        launch(backend, script, delete_after="always", tuning={"log_tail_lines": 5})
    err = info.value
    assert err.reason == "PyTorchJobFailed"
    assert "Worker 1 failed" in str(err)
    tail = err.log_tails["train-abc-worker-1/pytorch"]
    assert tail.splitlines() == ["line 96", "line 97", "line 98", "line 99", "RuntimeError: NCCL timeout"]
    log_read = backend.calls.index("log train-abc-worker-1 previous=False follow=False tail=5")
    assert log_read < backend.calls.index("delete")


def test_failed_job_is_kept_by_default() -> None:
    backend = MemoryBackend()

    def script(b: MemoryBackend) -> None:
        b.set_pods(pod("train-abc-master-0", "Master", 0, "Failed", reason="OOMKilled", exit_code=137))
        b.set_conditions(cond("Failed", reason="PyTorchJobFailed"))

    with pytest.raises(JobFailedError, match="kept for debugging"):
        launch(backend, script)
    assert "delete" not in backend.calls


def test_crashed_container_is_read_as_previous() -> None:
    backend = MemoryBackend()

    def script(b: MemoryBackend) -> None:
        b.add_log("train-abc-master-0", "boom: segfault", previous=True)
        b.set_pods(pod("train-abc-master-0", "Master", 0, "Running", restart_count=1, exit_code=139))
        b.set_conditions(cond("Restarting", reason="PyTorchJobRestarting"))
        b.wait_for_line("boom: segfault")
        # The launcher reports the statuses it sees, and its first watch starts from the job's
        # current state (a real one relists): without this wait the job could go Restarting →
        # Succeeded before that first look (the follower thread printing the log says nothing
        # about the watch), and no Restarting line would be printed.
        b.wait_for_line("Restarting (PyTorchJobRestarting)")
        b.set_pods(pod("train-abc-master-0", "Master", 0, "Succeeded", restart_count=1, exit_code=0))
        b.set_conditions(cond("Succeeded"))

    lines = launch(backend, script)
    assert "[train-abc-master-0 (previous)] boom: segfault" in lines
    assert any("Restarting (PyTorchJobRestarting)" in line for line in lines)


class LatePodWatch(PodWatch):
    """No pods yet, and no news until closed."""

    def __init__(self) -> None:
        self.closed = threading.Event()

    def __iter__(self) -> Iterator[list[PodInfo]]:
        yield []
        self.closed.wait(30)

    def close(self) -> None:
        self.closed.set()


class PodNewsLate(MemoryBackend):
    """A pod stream that has not delivered anything yet when the job ends (its news comes late)."""

    def watch_pods(self, ref: JobRef, *, timeout_seconds: float) -> PodWatch:
        self._call("watch_pods")
        return LatePodWatch()


def test_a_success_that_outruns_its_pods_news_still_prints_the_whole_log() -> None:
    """The job's end can reach the launcher before any news of its pods (two watches, two
    streams): the launcher then looks at the pods once, and the primary pod's log is printed."""
    backend = PodNewsLate()
    with backend.cv:
        backend.pod_list = []

    def script(b: MemoryBackend) -> None:
        b.wait_for_line("submitted → Pending")
        with b.cv:  # the pod ran and ended, but no pod set was delivered to the launcher
            b.pod_list = [pod("train-abc-master-0", "Master", 0, "Succeeded", exit_code=0)]
            b.logs[("train-abc-master-0", False)] = ["hi"]
        b.set_conditions(cond("Created"), cond("Succeeded", reason="PyTorchJobSucceeded"))

    lines = launch(backend, script)
    assert "[train-abc-master-0] hi" in lines
    assert "pods" in backend.calls


def test_a_failed_job_leads_with_the_programs_own_error_and_prints_each_tail_once() -> None:
    """Issue 34: the one-line error named the job, not the program's exception; the tails were printed twice."""
    backend = MemoryBackend()
    traceback = [
        "Traceback (most recent call last):",
        '  File "train.py", line 9, in <module>',
        "    raise RuntimeError('bad shard 3')",
        "RuntimeError: bad shard 3",
    ]

    def script(b: MemoryBackend) -> None:
        b.add_log("train-abc-master-0", "epoch 1", *traceback)
        b.add_log("train-abc-worker-0", "epoch 1", *traceback)
        b.set_pods(
            pod("train-abc-master-0", "Master", 0, "Failed", reason="Error", exit_code=1),
            pod("train-abc-worker-0", "Worker", 0, "Failed", reason="Error", exit_code=1),
        )
        b.set_conditions(cond("Created"), cond("Failed", reason="BackoffLimitExceeded", message="worker-0 exited"))

    with pytest.raises(JobFailedError) as info:
        launch(backend, script)
    err = info.value
    lines = backend.lines
    assert err.program_error == "rank 0: RuntimeError: bad shard 3"
    assert err.shown
    assert err.headline().startswith("rank 0: RuntimeError: bad shard 3; PyTorchJob ")
    assert "the program's error: rank 0: RuntimeError: bad shard 3" in lines
    # The step's wrapper prints the headline only: the tails went to the log once, as the launcher read them.
    from kubetrain.kfp_runtime.exits import one_line

    assert one_line(err) == f"JobFailedError: {err.headline()}"
    assert "\n" not in one_line(err)


def test_the_followed_log_is_not_printed_again_as_a_tail() -> None:
    """Issue 49 item 8: a failed MPI step printed the followed launcher log twice: live, then as its last 50 lines."""
    backend = MemoryBackend()
    mpirun = ["[1,1]<stderr>:Traceback (most recent call last):", "[1,1]<stderr>:OSError: disk full"]

    def script(b: MemoryBackend) -> None:
        b.wait_for_line("submitted → Pending")
        b.set_pods(pod("train-abc-master-0", "Master", 0, "Running"), pod("train-abc-worker-0", "Worker", 0, "Running"))
        b.set_conditions(cond("Created"), cond("Running"))
        b.add_log("train-abc-master-0", "epoch 1", *mpirun)
        b.add_log("train-abc-worker-0", "worker says: peer gone")
        b.wait_for_line("[train-abc-master-0] [1,1]<stderr>:OSError: disk full")
        b.set_pods(
            pod("train-abc-master-0", "Master", 0, "Failed", reason="Error", exit_code=1),
            pod("train-abc-worker-0", "Worker", 0, "Failed", reason="Error", exit_code=1),
        )
        b.set_conditions(cond("Created"), cond("Failed", reason="BackoffLimitExceeded", message="master-0 exited"))

    with pytest.raises(JobFailedError) as info:
        launch(backend, script)
    text = "\n".join(backend.lines)
    assert text.count("OSError: disk full") == 2  # followed live, and in the program's error line
    assert "the program's error: rank 1: OSError: disk full" in text
    assert "--- train-abc-master-0/pytorch: its log is above, followed to its end ---" in text
    assert "lines of train-abc-master-0" not in text
    assert "lines of train-abc-worker-0/pytorch ---\nworker says: peer gone" in text  # not followed: its tail
    assert info.value.log_tails["train-abc-master-0/pytorch"].endswith("OSError: disk full")  # still carried
