"""One local job as the backend keeps it: the object, its controller, its watchers and events."""

from __future__ import annotations

import copy
import queue
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime

from kubetrain.backends.base import EventInfo, JobObject, JobRef, PodInfo
from kubetrain.backends.local.addresses import AddressBlock
from kubetrain.backends.local.operators.controller import Controller
from kubetrain.backends.local.pod import LocalPod
from kubetrain.manifests.kinds import JOBSET


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
        """Record the pods as they are now (read by other threads without touching the controller)."""
        live = [(pod.info(), pod) for pod in self.controller.pods()]
        self.pods = [*live, *((info, None) for info in self.controller.extra_pod_infos())]

    def add_event(self, etype: str, reason: str, message: str, involved: str) -> None:
        """Record an Event."""
        with self.lock:
            self.events.append(EventInfo(etype, reason, message, involved, last_timestamp=datetime.now(UTC)))

    def end_watches(self) -> None:
        """The object is gone: end every watch."""
        with self.lock:
            for subscriber in self.subscribers:
                subscriber.put(None)


def stop_all(records: dict[tuple[str, str, str], JobRecord]) -> None:
    """Stop every job's processes (finalizer: must not reference the backend itself)."""
    for record in list(records.values()):
        record.delete_requested.set()
        record.wake.set()
    for record in list(records.values()):
        record.done.wait(timeout=60)
