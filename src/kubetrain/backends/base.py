"""The backend interface: where a job manifest runs.

Two implementations: `kubernetes` (the real API server) and `local` (processes on this machine,
imitating the operators). The launcher drives both through this interface only, and both return
job objects whose `status.conditions` the shared status parser reads, so the launcher cannot tell
them apart.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kubetrain.errors import InvalidInputError
from kubetrain.manifests.kinds import JobKind, kind_of

JobObject = dict[str, Any]


@dataclass(frozen=True)
class JobRef:
    """Identifies one submitted job."""

    kind: JobKind
    name: str
    namespace: str
    uid: str = ""

    @classmethod
    def from_object(cls, obj: Mapping[str, Any], namespace: str = "default") -> JobRef:
        """The reference of a job object (manifest or object returned by a backend); `namespace`
        stands in when the object names none."""
        meta = obj.get("metadata") or {}
        return cls(
            kind=kind_of(obj),
            name=str(meta.get("name", "")),
            namespace=str(meta.get("namespace") or namespace),
            uid=str(meta.get("uid") or ""),
        )


@dataclass(frozen=True)
class PodInfo:
    """One pod of a job, as much as the launcher reports about it."""

    name: str
    replica_type: str  # Master / Worker / Launcher / master / ps / worker
    index: int
    phase: str  # Pending / Running / Succeeded / Failed / Unknown
    container: str  # the container whose log is the replica's log
    reason: str = ""  # e.g. ImagePullBackOff, Unschedulable, OOMKilled, Error
    message: str = ""
    restart_count: int = 0
    exit_code: int | None = None
    created: datetime | None = None
    # Why the pod is being taken away, from its DisruptionTarget condition: PreemptionByScheduler,
    # EvictionByEvictionAPI, DeletionByTaintManager, TerminationByKubelet, ... ("" when it is not).
    disruption: str = ""
    disruption_message: str = ""
    deleting: bool = False  # deletionTimestamp set: the pod is on its way out
    host_name: str = ""  # spec.hostname: what an Indexed Job's pod calls itself (its $HOSTNAME)
    uid: str = ""  # metadata.uid: this pod, not its replacement of the same name or host name


class JobWatch(abc.ABC):
    """One job object as it changes: iterated by one thread, closed from any other.

    Iterating yields the job object, current state first, then each new version, until about the
    `timeout_seconds` the backend was given have passed or :meth:`close` is called. Closable so that
    the launcher's look at events, in a thread of its own, can end the wait when it finds the job
    rejected, without the job watch being cut into short windows for it.
    """

    @abc.abstractmethod
    def __iter__(self) -> Iterator[JobObject]:
        """The job object's versions, current first."""

    @abc.abstractmethod
    def close(self) -> None:
        """End the iteration now, from any thread (a read blocked on the network returns). Idempotent."""


class PodWatch(abc.ABC):
    """A job's pods as they change: iterated by one thread, closed from any other.

    Iterating yields the whole set of the job's pods (sorted by replica type, index and name), then
    the whole set again each time a pod is added, changes or goes, until about the
    `timeout_seconds` the backend was given have passed or :meth:`close` is called.
    """

    @abc.abstractmethod
    def __iter__(self) -> Iterator[list[PodInfo]]:
        """The pod sets, current first."""

    @abc.abstractmethod
    def close(self) -> None:
        """End the iteration now, from any thread (a read blocked on the network returns). Idempotent."""


class LogStream:
    """A followed pod log's lines as they come, which another thread can end.

    This default wraps a plain iterator: :meth:`close` makes the iteration stop at the next line.
    A backend whose reads can block (an HTTP stream) ends a blocked read at once instead.
    """

    def __init__(self, lines: Iterator[str]) -> None:
        self._lines = lines
        self._closed = threading.Event()

    def __iter__(self) -> Iterator[str]:
        """The lines, until the log ends or :meth:`close` is called."""
        for line in self._lines:
            if self._closed.is_set():
                return
            yield line

    def close(self) -> None:
        """End the iteration, from any thread. Idempotent."""
        self._closed.set()


@dataclass(frozen=True)
class EventInfo:
    """One Kubernetes Event about the job or its pods."""

    type: str  # Normal / Warning
    reason: str
    message: str
    involved_object: str
    count: int = 1
    last_timestamp: datetime | None = None


class Backend(abc.ABC):
    """Runs job manifests and reports on them."""

    name: str = "backend"

    @abc.abstractmethod
    def submit(self, manifest: Mapping[str, Any]) -> JobRef:
        """Create the job. If a job of that name exists and carries the same KFP run and task
        labels, adopt it (return its ref); if it belongs to someone else, raise JobConflictError."""

    def dry_run(self, manifest: Mapping[str, Any]) -> JobObject:
        """What the API server would store for `manifest`, creating nothing.

        Only a backend with an API server can answer; the others refuse.
        """
        raise InvalidInputError(f"--dry-run asks the API server; the {self.name} backend has none")

    @abc.abstractmethod
    def get(self, ref: JobRef) -> JobObject:
        """The job object now (with `status`). Raises BackendError if it is gone."""

    @abc.abstractmethod
    def watch(self, ref: JobRef, *, timeout_seconds: float) -> JobWatch:
        """The job object now, then each time it changes, for about `timeout_seconds`.

        The iteration ends after about `timeout_seconds` without raising, so the caller can check
        its own deadline and call again; implementations hide reconnects and re-lists.
        """

    @abc.abstractmethod
    def pods(self, ref: JobRef) -> list[PodInfo]:
        """The job's pods now."""

    @abc.abstractmethod
    def watch_pods(self, ref: JobRef, *, timeout_seconds: float) -> PodWatch:
        """The job's pods now, then again at every change, for about `timeout_seconds`.

        The backend tells its watcher of each change (no polling on the watcher's side) and, like
        `watch`, a later call resumes where the previous one ended. Creating the stream does no I/O.
        """

    @abc.abstractmethod
    def pod_log(
        self, ref: JobRef, pod: PodInfo, *, follow: bool, tail_lines: int | None = None, previous: bool = False
    ) -> Iterator[str]:
        """Lines of one pod's log (its replica container, named explicitly)."""

    def follow_log(self, ref: JobRef, pod: PodInfo) -> LogStream:
        """The pod's current log, followed until its container ends or the stream is closed."""
        return LogStream(self.pod_log(ref, pod, follow=True))

    @abc.abstractmethod
    def events(self, ref: JobRef, *, pods: Sequence[str] = ()) -> list[EventInfo]:
        """Events about the job object and (Warnings only) about the pods named in `pods`, oldest first.

        The launcher names the pods still pending: their FailedMount, FailedScheduling and the like
        are what it reports. A backend may report more.
        """

    @abc.abstractmethod
    def delete(self, ref: JobRef) -> None:
        """Delete the job and (foreground) its pods. Deleting a job that is gone is not an error."""

    @abc.abstractmethod
    def suspend(self, ref: JobRef) -> None:
        """Suspend the job (`runPolicy.suspend` / `spec.suspend`): pods go, the object stays."""

    def debug_hint(self, ref: JobRef) -> str:
        """Where a person looks at a job this backend kept (a failed job with --delete-after success)."""
        return f"{ref.kind.kind} {ref.namespace}/{ref.name}"

    def close(self) -> None:  # noqa: B027 - optional hook with a do-nothing default
        """Release resources (threads, connections, processes). Idempotent."""
