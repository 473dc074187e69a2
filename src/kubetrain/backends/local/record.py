"""One local job as the backend keeps it: the object, its controller, its watchers and events."""

from __future__ import annotations

import abc
import copy
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Generic, TypeVar

from kubetrain.backends.base import EventInfo, JobObject, JobRef, JobWatch, PodInfo, PodWatch
from kubetrain.backends.local.addresses import AddressBlock
from kubetrain.backends.local.operators.controller import Controller
from kubetrain.backends.local.pod import LocalPod
from kubetrain.manifests.kinds import JOBSET

T = TypeVar("T")


@dataclass
class JobRecord:
    """One submitted job: its object, its controller, and who is waiting on it.

    The supervisor thread is the only writer of the controller; other threads read the
    published object (`obj`, under `lock`) and the pod snapshot (`pods`, replaced whole).
    """

    ref: JobRef
    obj: JobObject
    controller: Controller
    block: AddressBlock
    lock: threading.Lock = field(default_factory=threading.Lock)
    wake: threading.Event = field(default_factory=threading.Event)
    delete_requested: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    subscribers: list[queue.Queue[JobObject | None]] = field(default_factory=list)
    pod_subscribers: list[queue.Queue[list[PodInfo] | None]] = field(default_factory=list)
    events: list[EventInfo] = field(default_factory=list)
    pods: list[tuple[PodInfo, LocalPod | None]] = field(default_factory=list)
    broken: str | None = None

    def publish(self) -> None:
        """Copy the controller's status into the object; tell watchers when anything changed."""
        with self.lock:
            status = copy.deepcopy(self.controller.status)
            if status == self.obj.get("status"):
                return
            self.obj["status"] = status
            self._bump()

    def _bump(self) -> None:
        meta = self.obj["metadata"]
        meta["resourceVersion"] = str(int(meta.get("resourceVersion", "0")) + 1)
        snapshot = copy.deepcopy(self.obj)
        for subscriber in self.subscribers:
            subscriber.put(snapshot)

    def set_suspend(self, value: bool) -> None:
        """Toggle the spec's suspend field, as `kubectl patch` would."""
        with self.lock:
            spec = self.obj["spec"]
            if self.ref.kind is JOBSET:
                spec["suspend"] = value
            else:
                spec.setdefault("runPolicy", {})["suspend"] = value
            meta = self.obj["metadata"]
            meta["generation"] = int(meta.get("generation", 1)) + 1
            self._bump()
        self.wake.set()

    def snapshot_pods(self) -> None:
        """Record the pods as they are now (read by other threads without touching the controller);
        tell pod watchers when any of them changed."""
        live = [(pod.info(), pod) for pod in self.controller.pods()]
        pods = [*live, *((info, None) for info in self.controller.extra_pod_infos())]
        with self.lock:
            changed = [info for info, _ in pods] != [info for info, _ in self.pods]
            self.pods = pods
            if changed:
                infos = self.pod_infos()
                for subscriber in self.pod_subscribers:
                    subscriber.put(infos)

    def pod_infos(self) -> list[PodInfo]:
        """The pods now, in the order pod watches deliver them (replica type, index, name)."""
        return sorted((info for info, _ in self.pods), key=lambda p: (p.replica_type, p.index, p.name))

    def add_event(self, etype: str, reason: str, message: str, involved: str) -> None:
        """Record an Event."""
        with self.lock:
            self.events.append(EventInfo(etype, reason, message, involved, last_timestamp=datetime.now(UTC)))

    def end_watches(self) -> None:
        """The object is gone: end every watch, of the job and of its pods."""
        with self.lock:
            for subscriber in self.subscribers:
                subscriber.put(None)
            for pod_subscriber in self.pod_subscribers:
                pod_subscriber.put(None)


class _RecordWatch(abc.ABC, Generic[T]):
    """A watch on a local job: the supervisor hands every new state to the watch's queue."""

    def __init__(self, record: JobRecord, *, timeout_seconds: float) -> None:
        self._record = record
        self._deadline = time.monotonic() + timeout_seconds
        self._queue: queue.Queue[T | None] = queue.Queue()
        self._lock = threading.Lock()
        self._closed = False

    @abc.abstractmethod
    def _subscribers(self) -> list[queue.Queue[T | None]]:
        """The record's list this watch's queue joins (called with the record's lock held)."""

    @abc.abstractmethod
    def _current(self) -> T:
        """The state now (called with the record's lock held)."""

    def __iter__(self) -> Iterator[T]:
        record = self._record
        with self._lock:
            if self._closed:
                return
            # Subscribed while the record's lock is held: no change falls between the first state and the queue.
            with record.lock:
                self._queue.put(self._current())
                self._subscribers().append(self._queue)
        try:
            while (remaining := self._deadline - time.monotonic()) > 0:
                try:
                    item = self._queue.get(timeout=remaining)
                except queue.Empty:
                    return
                if item is None:
                    return
                yield item
        finally:
            with record.lock:
                self._subscribers().remove(self._queue)

    def close(self) -> None:
        """End the iteration now; idempotent, from any thread."""
        with self._lock:
            self._closed = True
            self._queue.put(None)


class RecordJobWatch(_RecordWatch[JobObject], JobWatch):
    """The job object's versions; ends when the job is deleted."""

    def _subscribers(self) -> list[queue.Queue[JobObject | None]]:
        return self._record.subscribers

    def _current(self) -> JobObject:
        return copy.deepcopy(self._record.obj)


class RecordPodWatch(_RecordWatch[list[PodInfo]], PodWatch):
    """The job's pod sets."""

    def _subscribers(self) -> list[queue.Queue[list[PodInfo] | None]]:
        return self._record.pod_subscribers

    def _current(self) -> list[PodInfo]:
        return self._record.pod_infos()


def stop_all(records: dict[tuple[str, str, str], JobRecord]) -> None:
    """Stop every job's processes (finalizer: must not reference the backend itself)."""
    for record in list(records.values()):
        record.delete_requested.set()
        record.wake.set()
    for record in list(records.values()):
        record.done.wait(timeout=60)
