"""An in-memory Backend driven by a scenario thread, for the launcher's await loop tests.

A test double of the Backend interface (no HTTP); the same scenarios run against the HTTP
stand-in for the API server in tests/integration/test_k8s_*.py. Every wait is on a real condition
with a deadline; no test depends on timing.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from kubetrain.backends.base import Backend, EventInfo, JobObject, JobRef, JobWatch, PodInfo, PodWatch
from kubetrain.launcher import AwaitOptions, Tuning, run_job

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
