"""The launcher's await loop against an in-memory backend driven by a scenario thread.

The backend here is a test double of the Backend interface (no HTTP); the same scenarios run
against the HTTP stand-in for the API server in tests/integration/test_k8s_*.py. Every wait is on a
real condition with a deadline; no test depends on timing.
"""

from __future__ import annotations

import copy
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pytest

from kubetrain.backends.base import Backend, EventInfo, JobObject, JobRef, JobWatch, PodInfo, PodWatch
from kubetrain.errors import (
    InvalidInputError,
    JobCancelledError,
    JobFailedError,
    JobTimeoutError,
    ManifestError,
)
from kubetrain.launcher import AwaitOptions, Tuning, run_job
from kubetrain.launcher.pending import next_interval
from kubetrain.status import JobPhase

pytestmark = pytest.mark.timeout(60)

FAST: dict[str, Any] = {"pending_poll_seconds": 0.05, "watch_window_seconds": 2.0, "log_drain_seconds": 5.0}


def manifest(name: str = "train-abc", kind: str = "PyTorchJob") -> dict[str, Any]:
    """A job naming its replicas in its spec, as every manifest does (the launcher follows Master 0)."""
    if kind == "TrainJob":  # its runtime decides its replicas; the Trainer lists them in its status
        spec: dict[str, Any] = {"runtimeRef": {"name": "kubetrain-mpi"}}
        return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": kind,
                "metadata": {"name": name, "namespace": "ns"}, "spec": spec}  # fmt: skip
    api, key, replicas = {
        "PyTorchJob": ("kubeflow.org/v1", "pytorchReplicaSpecs", ("Master", "Worker")),
        "MPIJob": ("kubeflow.org/v2beta1", "mpiReplicaSpecs", ("Launcher", "Worker")),
    }[kind]
    spec = {key: {r: {"replicas": 1} for r in replicas}}
    return {"apiVersion": api, "kind": kind, "metadata": {"name": name, "namespace": "ns"}, "spec": spec}


def cond(ctype: str, status: str = "True", reason: str = "", message: str = "") -> dict[str, str]:
    return {"type": ctype, "status": status, "reason": reason, "message": message}


def pod(name: str, rtype: str, index: int, phase: str, **kw: Any) -> PodInfo:
    return PodInfo(name=name, replica_type=rtype, index=index, phase=phase, container="pytorch", **kw)


class MemoryBackend(Backend):
    """Keeps every version of one job; watch yields them in order, as the API server would."""

    name = "memory"

    def __init__(self) -> None:
        self.cv = threading.Condition()
        self.versions: list[JobObject] = []
        self.watched: int | None = None  # index of the last version a watch delivered
        self.pod_list: list[PodInfo] = []
        self.logs: dict[tuple[str, bool], list[str]] = {}
        self.event_list: list[EventInfo] = []
        self.calls: list[str] = []
        self.windows: list[float] = []  # the timeout of every job watch the launcher opened
        self.deleted = threading.Event()
        self.lines: list[str] = []

    def sink(self, line: str) -> None:
        """The launcher's log sink: lines the scenario can wait for."""
        with self.cv:
            self.lines.append(line)
            self.cv.notify_all()

    def wait_for_line(self, text: str) -> None:
        self.wait_for(lambda: any(text in line for line in self.lines), f"a line with {text!r}")

    # -- scenario side --------------------------------------------------------------------------

    def wait_for(self, predicate: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        with self.cv:
            while not predicate():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"timed out waiting for {what}; calls: {self.calls}")
                self.cv.wait(remaining)

    def set_conditions(self, *conditions: dict[str, str], **status: Any) -> None:
        with self.cv:
            new = copy.deepcopy(self.versions[-1])
            new["status"] = {"conditions": list(conditions), **status}
            self.versions.append(new)
            self.cv.notify_all()

    def set_pods(self, *pods: PodInfo) -> None:
        with self.cv:
            self.pod_list = list(pods)
            self.cv.notify_all()

    def add_log(self, pod_name: str, *lines: str, previous: bool = False) -> None:
        with self.cv:
            self.logs.setdefault((pod_name, previous), []).extend(lines)
            self.cv.notify_all()

    def add_event(self, event: EventInfo) -> None:
        with self.cv:
            self.event_list.append(event)
            self.cv.notify_all()

    def _call(self, what: str) -> None:
        with self.cv:
            self.calls.append(what)
            self.cv.notify_all()

    # -- Backend --------------------------------------------------------------------------------

    def submit(self, manifest: Mapping[str, Any]) -> JobRef:
        obj = copy.deepcopy(dict(manifest))
        obj["metadata"]["uid"] = "uid-1"
        with self.cv:
            self.versions.append(obj)
        self._call("submit")
        return JobRef.from_object(obj)

    def get(self, ref: JobRef) -> JobObject:
        self._call("get")
        with self.cv:
            return copy.deepcopy(self.versions[-1])

    def watch(self, ref: JobRef, *, timeout_seconds: float) -> JobWatch:
        with self.cv:
            self.windows.append(timeout_seconds)
        self._call("watch")
        return MemoryJobWatch(self, timeout_seconds)

    def pods(self, ref: JobRef) -> list[PodInfo]:
        self._call("pods")
        with self.cv:
            return list(self.pod_list)

    def watch_pods(self, ref: JobRef, *, timeout_seconds: float) -> PodWatch:
        self._call("watch_pods")
        return MemoryPodWatch(self, timeout_seconds)

    def pod_log(
        self, ref: JobRef, pod: PodInfo, *, follow: bool, tail_lines: int | None = None, previous: bool = False
    ) -> Iterator[str]:
        self._call(f"log {pod.name} previous={previous} follow={follow} tail={tail_lines}")
        sent = 0
        while True:
            with self.cv:
                lines = list(self.logs.get((pod.name, previous), []))
                current = {p.name: p for p in self.pod_list}.get(pod.name)
                ended = current is None or current.phase in ("Succeeded", "Failed") or not follow or previous
                if sent == len(lines) and not ended:
                    self.cv.wait(0.5)
                    continue
            if tail_lines is not None and not follow:
                lines = lines[-tail_lines:]
            yield from lines[sent:]
            sent = len(lines)
            if ended:
                return

    def events(self, ref: JobRef, *, pods: Sequence[str] = ()) -> list[EventInfo]:
        self._call("events")
        with self.cv:
            return list(self.event_list)

    def delete(self, ref: JobRef) -> None:
        self._call("delete")
        self.deleted.set()

    def suspend(self, ref: JobRef) -> None:
        self._call("suspend")


class MemoryJobWatch(JobWatch):
    """The job's versions in order, until closed or timed out."""

    def __init__(self, backend: MemoryBackend, timeout_seconds: float) -> None:
        self.backend = backend
        self.deadline = time.monotonic() + timeout_seconds
        self.closed = False

    def __iter__(self) -> Iterator[JobObject]:
        b = self.backend
        with b.cv:
            # As KubernetesBackend: the first watch starts from the current state (a relist); a later
            # one resumes from the last version delivered (its resourceVersion), so a version set
            # while the launcher was between two watch windows is still delivered, in order.
            index = len(b.versions) - 1 if b.watched is None else b.watched
            b.watched = index
            obj = copy.deepcopy(b.versions[index])
        yield obj
        while True:
            with b.cv:
                while not self.closed and index == len(b.versions) - 1:
                    remaining = self.deadline - time.monotonic()
                    if remaining <= 0:
                        return
                    b.cv.wait(remaining)
                if self.closed:
                    return
                index += 1
                b.watched = index
                obj = copy.deepcopy(b.versions[index])
            yield obj

    def close(self) -> None:
        with self.backend.cv:
            self.closed = True
            self.backend.cv.notify_all()


class MemoryPodWatch(PodWatch):
    """The pod list each time the scenario sets it (set_pods notifies), until closed or timed out."""

    def __init__(self, backend: MemoryBackend, timeout_seconds: float) -> None:
        self.backend = backend
        self.deadline = time.monotonic() + timeout_seconds
        self.closed = False

    def __iter__(self) -> Iterator[list[PodInfo]]:
        cv = self.backend.cv
        with cv:
            last = list(self.backend.pod_list)
        yield last
        while True:
            with cv:
                while not self.closed and self.backend.pod_list == last:
                    remaining = self.deadline - time.monotonic()
                    if remaining <= 0:
                        return
                    cv.wait(remaining)
                if self.closed:
                    return
                last = list(self.backend.pod_list)
            yield last

    def close(self) -> None:
        with self.backend.cv:
            self.closed = True
            self.backend.cv.notify_all()


class Scenario(threading.Thread):
    """Runs `script(backend)` beside the launcher and re-raises its failure in the test."""

    def __init__(self, backend: MemoryBackend, script: Callable[[MemoryBackend], None]) -> None:
        super().__init__(daemon=True)
        self.backend = backend
        self.script = script
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.backend.wait_for(lambda: "submit" in self.backend.calls, "submit")
            self.script(self.backend)
        except BaseException as e:  # noqa: BLE001 - re-raised in the test thread
            self.error = e

    def check(self) -> None:
        self.join(20)
        if self.error is not None:
            raise self.error


def launch(backend: MemoryBackend, script: Callable[[MemoryBackend], None], **kw: Any) -> list[str]:
    """Run the launcher in this (main) thread beside `script`; the script's own failures surface too."""
    scenario = Scenario(backend, script)
    scenario.start()
    tuning = Tuning(**{**FAST, **kw.pop("tuning", {})})
    try:
        job = manifest(kw.pop("name", "train-abc"), kw.pop("kind", "PyTorchJob"))
        cancel = kw.pop("cancel", None)
        options = AwaitOptions(timeout_seconds=kw.pop("timeout_seconds", 30.0), tuning=tuning, **kw)
        run_job(job, backend=backend, options=options, log_sink=backend.sink, cancel=cancel)
    finally:
        scenario.check()
    return backend.lines


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


def test_image_pull_backoff_is_reported_with_pending_time() -> None:
    backend = MemoryBackend()

    def script(b: MemoryBackend) -> None:
        b.set_pods(pod("train-abc-master-0", "Master", 0, "Pending", reason="ImagePullBackOff",
                       message='Back-off pulling image "nope:latest"'))  # fmt: skip
        b.set_conditions(cond("Created"))
        b.wait_for_line("ImagePullBackOff")
        b.set_conditions(cond("Failed", reason="Deadline"))

    with pytest.raises(JobFailedError):
        launch(backend, script)
    lines = backend.lines
    pending = [line for line in lines if "ImagePullBackOff" in line]
    assert pending, lines
    assert (
        'pod train-abc-master-0 [Master 0]: Pending (ImagePullBackOff): Back-off pulling image "nope:latest"'
        in (pending[0])
    )
    assert ", pending " in pending[0]


def test_the_looks_back_off_while_they_find_nothing_new() -> None:
    """The interval doubles up to its maximum while looks find nothing new, stays while they find
    news, and starts again when the job's phase changes."""
    tuning = Tuning(pending_poll_seconds=5.0, pending_poll_max_seconds=60.0)
    every, seen = 5.0, []
    for _ in range(6):
        every = next_interval(every, news=0, phase_changed=False, tuning=tuning)
        seen.append(every)
    assert seen == [10.0, 20.0, 40.0, 60.0, 60.0, 60.0]
    assert next_interval(40.0, news=2, phase_changed=False, tuning=tuning) == 40.0
    assert next_interval(60.0, news=0, phase_changed=True, tuning=tuning) == 5.0


def test_a_pending_job_is_looked_at_again_and_again_in_one_watch_window() -> None:
    """Events are listed while the job is pending, before and after its phase changes, and the job
    watch stays one window throughout: looking costs no watch request."""
    backend = MemoryBackend()

    def script(b: MemoryBackend) -> None:
        b.wait_for(lambda: b.calls.count("events") >= 3, "three looks while Pending")
        looks = b.calls.count("events")
        b.set_conditions(cond("Created"))
        b.wait_for(lambda: b.calls.count("events") >= looks + 2, "two more looks once Created")
        b.set_conditions(cond("Created"), cond("Succeeded"))

    launch(backend, script, tuning={"pending_poll_seconds": 0.01, "pending_poll_max_seconds": 0.04,
                                    "watch_window_seconds": 3600.0})  # fmt: skip
    assert backend.calls.count("watch") == 1


class ThrottledEvents(MemoryBackend):
    """Every events listing hangs, as a 429 with a long Retry-After would, until released."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.looks_done = 0

    def events(self, ref: JobRef, *, pods: Sequence[str] = ()) -> list[EventInfo]:
        self._call("events")
        self.release.wait(600)
        self.looks_done += 1
        return []


def test_a_look_held_up_by_the_server_does_not_delay_noticing_the_end() -> None:
    """Under load the API server answers a look at the events 429 with Retry-After of half a
    minute; the job ending meanwhile is noticed without waiting for the look: run_job returns
    while the look is still held up."""
    backend = ThrottledEvents()

    def script(b: MemoryBackend) -> None:
        b.wait_for(lambda: "events" in b.calls, "a look at the events")
        b.set_conditions(cond("Created"), cond("Succeeded"))

    try:
        launch(backend, script, tuning={"pending_poll_seconds": 0.01, "watch_window_seconds": 3600.0})
        assert backend.looks_done == 0, "run_job waited for the held-up look"
    finally:
        backend.release.set()
    assert backend.calls.count("watch") == 1


def test_a_rejection_found_by_a_look_ends_a_long_watch_window() -> None:
    """The mpi-operator's ValidationError (no condition, ever) ends the wait at the look that finds
    it: the look closes the open job watch (a window of an hour; without the close the 30 s
    timeout would end the wait instead, as a JobTimeoutError)."""
    backend = MemoryBackend()
    backend.add_event(EventInfo(type="Warning", reason="ValidationError", message="spec.slotsPerWorker: bad",
                                involved_object="MPIJob/train-abc"))  # fmt: skip
    with pytest.raises(JobFailedError, match="ValidationError"):
        launch(backend, lambda b: None, kind="MPIJob",
               tuning={"pending_poll_seconds": 0.01, "watch_window_seconds": 3600.0})  # fmt: skip
    assert backend.calls.count("watch") == 1


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


def test_timeout_deletes_the_job() -> None:
    backend = MemoryBackend()

    def script(b: MemoryBackend) -> None:
        b.set_conditions(cond("Running"))

    with pytest.raises(JobTimeoutError, match="deleted it"):
        launch(backend, script, timeout_seconds=0.5)
    assert backend.calls[-1] == "delete"


def test_timeout_can_suspend_instead() -> None:
    backend = MemoryBackend()
    with pytest.raises(JobTimeoutError, match="suspended it"):
        launch(backend, lambda b: None, timeout_seconds=0.3, on_timeout="suspend")
    assert "suspend" in backend.calls
    assert "delete" not in backend.calls


def test_mpijob_validation_event_fails_fast() -> None:
    backend = MemoryBackend()

    def script(b: MemoryBackend) -> None:
        b.add_event(EventInfo(type="Warning", reason="ValidationError", involved_object="MPIJob/train-abc",
                              message="spec.mpiReplicaSpecs[Launcher].replicas: must be 1"))  # fmt: skip

    with pytest.raises(JobFailedError, match="must be 1") as info:
        launch(backend, script, kind="MPIJob")
    assert info.value.reason == "ValidationError"


def test_cancel_event_deletes_the_job() -> None:
    backend = MemoryBackend()
    cancel = threading.Event()

    def script(b: MemoryBackend) -> None:
        b.set_conditions(cond("Running"))
        b.wait_for_line("→ Running")
        cancel.set()
        b.set_conditions(cond("Running"), cond("Created"))  # any change wakes the watch

    with pytest.raises(JobCancelledError):
        launch(backend, script, cancel=cancel)
    assert backend.calls[-1] == "delete"


def test_sigterm_in_main_thread_deletes_and_restores_handlers() -> None:
    assert threading.current_thread() is threading.main_thread()
    backend = MemoryBackend()
    before = signal.getsignal(signal.SIGTERM)

    def script(b: MemoryBackend) -> None:
        b.set_conditions(cond("Running"))
        b.wait_for_line("→ Running")
        os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(JobCancelledError, match="SIGTERM"):
        launch(backend, script, tuning={"watch_window_seconds": 30.0})
    assert "delete" in backend.calls
    assert signal.getsignal(signal.SIGTERM) is before


def test_bad_options_and_kinds_submit_nothing() -> None:
    backend = MemoryBackend()
    with pytest.raises(InvalidInputError, match="timeout_seconds"):
        run_job(manifest(), backend=backend, options=AwaitOptions(timeout_seconds=0))
    with pytest.raises(InvalidInputError, match="delete_after"):
        run_job(manifest(), backend=backend, options=AwaitOptions(timeout_seconds=1, delete_after="sometimes"))  # type: ignore[arg-type]
    with pytest.raises(ManifestError, match="TFJob"):
        run_job({**manifest(), "kind": "TFJob"}, backend=backend, options=AwaitOptions(timeout_seconds=1))
    assert backend.calls == []


def test_start_timeout_ends_a_job_that_never_runs_and_names_the_pending_pods() -> None:
    backend = MemoryBackend()

    def script(b: MemoryBackend) -> None:
        b.set_pods(pod("train-abc-master-0", "Master", 0, "Pending", reason="ImagePullBackOff"))
        b.set_conditions(cond("Created"))

    with pytest.raises(JobTimeoutError, match=r"did not start within 0\.5s .*train-abc-master-0: ImagePullBackOff"):
        launch(backend, script, start_timeout_seconds=0.5)
    assert backend.calls[-1] == "delete"


def test_start_timeout_no_longer_applies_once_running() -> None:
    backend = MemoryBackend()

    def script(b: MemoryBackend) -> None:
        b.set_pods(pod("train-abc-master-0", "Master", 0, "Running"))
        b.set_conditions(cond("Running"))
        b.wait_for_line("→ Running")
        # Well past the start timeout, still running: only the overall timeout may end it now.
        b.wait_for(lambda: b.calls.count("watch") >= 3, "more watch windows")
        b.set_pods(pod("train-abc-master-0", "Master", 0, "Succeeded"))
        b.set_conditions(cond("Succeeded"))

    launch(backend, script, start_timeout_seconds=0.2, tuning={"watch_window_seconds": 0.2})
    assert "delete" in backend.calls


def test_watch_windows_vary_so_parallel_launchers_do_not_reconnect_together() -> None:
    # A thousand steps started together must not reopen their watches at the same instant every
    # window: the API server answers such a burst with 429s (docs/benchmarks.md, Scale).
    backend = MemoryBackend()

    def script(b: MemoryBackend) -> None:
        b.set_conditions(cond("Running"))
        b.wait_for(lambda: b.calls.count("watch") >= 6, "six watch windows")
        b.set_conditions(cond("Succeeded"))

    launch(backend, script, tuning={"watch_window_seconds": 0.2})
    windows = backend.windows[:6]
    assert all(0.1 <= w <= 0.2 for w in windows), windows
    assert len(set(windows)) == len(windows), windows


class StuckBackend(MemoryBackend):
    """A backend whose create or first job watch blocks until the scenario lets it go: the main
    thread is stuck where no check of the cancel guard runs."""

    def __init__(self, *, stuck_in: str) -> None:
        super().__init__()
        self.stuck_in = stuck_in
        self.let_go = threading.Event()
        self.stuck = False
        self.deleted_while_stuck: bool | None = None
        self.deleted_refs: list[JobRef] = []

    def _stick(self, where: str) -> None:
        if self.stuck_in != where or self.let_go.is_set():
            return
        with self.cv:
            self.stuck = True
        self._call(f"stuck in {where}")
        self.let_go.wait(60)  # the scenario lets go once it has seen the delete (or given up)
        with self.cv:
            self.stuck = False

    def submit(self, manifest: Mapping[str, Any]) -> JobRef:
        self._stick("submit")
        return super().submit(manifest)

    def watch(self, ref: JobRef, *, timeout_seconds: float) -> JobWatch:
        self._stick("watch")
        return super().watch(ref, timeout_seconds=timeout_seconds)

    def delete(self, ref: JobRef) -> None:
        with self.cv:
            self.deleted_while_stuck = self.stuck
            self.deleted_refs.append(ref)
        super().delete(ref)


def _run_stuck(backend: StuckBackend, script: Callable[[StuckBackend, threading.Event], None]) -> JobCancelledError:
    cancel = threading.Event()
    errors: list[BaseException] = []

    def play() -> None:
        try:
            backend.wait_for(lambda: f"stuck in {backend.stuck_in}" in backend.calls, "the stuck call")
            script(backend, cancel)
        except BaseException as e:  # noqa: BLE001 - re-raised in the test thread
            errors.append(e)
        finally:
            backend.let_go.set()

    player = threading.Thread(target=play, daemon=True)
    player.start()
    options = AwaitOptions(timeout_seconds=30.0, tuning=Tuning(**FAST))
    try:
        with pytest.raises(JobCancelledError) as info:
            run_job(manifest(), backend=backend, options=options, log_sink=backend.sink, cancel=cancel)
    finally:
        player.join(20)
    if errors:
        raise errors[0]
    return info.value


def test_a_stop_deletes_the_job_at_once_while_the_main_thread_is_stuck() -> None:
    """Issue 33: in a KFP step the container dies about a second after SIGTERM. The delete must not
    wait for the main thread to reach a check: it starts from a thread of its own, at once."""
    assert threading.current_thread() is threading.main_thread()
    backend = StuckBackend(stuck_in="watch")

    def script(b: StuckBackend, cancel: threading.Event) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        b.wait_for(lambda: "delete" in b.calls, "the delete while the main thread is stuck")

    err = _run_stuck(backend, script)
    assert backend.deleted_while_stuck is True
    assert [r.uid for r in backend.deleted_refs] == ["uid-1"]  # once, the job it created
    assert "cancelled (SIGTERM); deleted PyTorchJob ns/train-abc" in str(err)
    assert any(line == "SIGTERM: deleting PyTorchJob ns/train-abc" for line in backend.lines)


def test_a_stop_during_the_create_deletes_what_it_created_and_nothing_follows() -> None:
    assert threading.current_thread() is threading.main_thread()
    backend = StuckBackend(stuck_in="submit")

    def script(b: StuckBackend, cancel: threading.Event) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        assert cancel.wait(20), "the guard never saw the signal"

    _run_stuck(backend, script)
    assert backend.calls == ["stuck in submit", "submit", "delete"]
    assert [r.uid for r in backend.deleted_refs] == ["uid-1"]


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


def test_a_silent_running_job_gets_a_notice_and_its_log_ends_the_silence() -> None:
    """Issue 34: a job whose program waited (an MPI rank blocked on a peer that exited) said nothing until its timeout."""
    backend = MemoryBackend()

    def script(b: MemoryBackend) -> None:
        b.set_pods(pod("train-abc-master-0", "Master", 0, "Running"))
        b.set_conditions(cond("Created"), cond("Running"))
        b.wait_for_line("no log output for")
        b.add_log("train-abc-master-0", "epoch 1 loss 0.5")
        b.wait_for_line("epoch 1 loss 0.5")
        b.set_pods(pod("train-abc-master-0", "Master", 0, "Succeeded"))
        b.set_conditions(cond("Created"), cond("Succeeded"))

    lines = launch(backend, script, tuning={"silence_notice_seconds": 0.3})
    notice = next(line for line in lines if "no log output for" in line)
    assert "the job is still running" in notice and "timeout_seconds" in notice


def test_a_silent_job_whose_logs_are_not_followed_gets_a_notice_too() -> None:
    """Issue 34: with the log not followed (launch --no-logs), a hung job said nothing until its timeout."""
    backend = MemoryBackend()

    def script(b: MemoryBackend) -> None:
        b.set_pods(pod("train-abc-master-0", "Master", 0, "Running"))
        b.set_conditions(cond("Created"), cond("Running"))
        b.wait_for_line("no news from the job for")
        b.set_pods(pod("train-abc-master-0", "Master", 0, "Succeeded"))
        b.set_conditions(cond("Created"), cond("Succeeded"))

    lines = launch(backend, script, stream_logs=False, tuning={"silence_notice_seconds": 0.3})
    notice = next(line for line in lines if "no news from the job for" in line)
    assert "the job is still running" in notice and "logs are not followed" in notice


def test_the_silence_notice_comes_once_per_stretch_and_counts_on() -> None:
    from kubetrain.launcher.silence import SilenceWatch

    now = [0.0]
    said: list[str] = []
    watch = SilenceWatch(said.append, after_seconds=600, clock=lambda: now[0])
    now[0] = 599
    assert watch.check() == pytest.approx(1) and said == []
    now[0] = 600
    watch.check()
    now[0] = 900
    watch.check()
    assert said == [said[0]] and said[0].startswith("no log output for 10 minutes;")
    now[0] = 1200
    watch.check()
    assert said[-1].startswith("no log output for 20 minutes;")
    watch.line("epoch 2")
    now[0] = 1500
    watch.check()
    assert said[-1] == "epoch 2"
