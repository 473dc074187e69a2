"""Watching on the API server: one job object, and one job's pods, in bounded windows that resume.

Each window resumes from the last resourceVersion it saw (bookmarks included), so a dropped
connection loses nothing; a 410 Gone (history compacted) re-lists and reports what changed
meanwhile. Connection errors, 5xx and 429 back off and retry. The resume point survives between
calls, so the launcher can call again after each window without a fresh list.

- a job (:class:`JobWatches`): a DELETED event ends the watch with the backend's "job deleted" error;
- a job's pods (:class:`PodWatches`): the pods the operator labels with the job's name; each
  change yields the whole set again.

Either stream can be closed from another thread: the launcher follows pods in a thread of their
own and ends it when the job ends, and its look at events ends the job watch when it finds the job
rejected.
"""

from __future__ import annotations

import abc
import copy
import json
import logging
import math
import threading
import time
from collections.abc import Iterator
from typing import Any, Generic, TypeVar

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kubetrain.backends.base import JobObject, JobRef, JobWatch, PodInfo, PodWatch
from kubetrain.backends.kubernetes.errors import api_error, deleted_error
from kubetrain.backends.kubernetes.objects import pod_info, pod_selector
from kubetrain.backends.kubernetes.retry import REQUEST_TIMEOUT, TRANSPORT_ERRORS, Retrier, is_transient
from kubetrain.backends.kubernetes.stream import close_response, json_lines, shutdown_response
from kubetrain.errors import BackendError, JobFailedError

__all__ = ["JobWatches", "PodWatches"]

logger = logging.getLogger(__name__)

# A watch window reads for its server-side timeout plus this grace before the client gives up.
WATCH_READ_GRACE_SECONDS = 30.0
_EVENT_TYPES = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"})

T = TypeVar("T")


def list_job_pods(core: client.CoreV1Api, retry: Retrier, ref: JobRef) -> dict[str, Any]:
    """One listing of the job's pods by the operator's job-name label, as the API returns it."""
    what = f"list pods of {ref.kind.kind} {ref.namespace}/{ref.name}"
    try:
        response = retry.call(
            what, core.list_namespaced_pod, ref.namespace, label_selector=pod_selector(ref),
            _preload_content=False, _request_timeout=REQUEST_TIMEOUT,
        )  # fmt: skip
    except ApiException as e:
        raise api_error(what, e) from e
    listing: dict[str, Any] = json.loads(response.data)
    return listing


class _Cursor(abc.ABC, Generic[T]):
    """What one watch knows: the state it built from events, and the resourceVersion to resume from."""

    resource_version: str = ""

    def __init__(self, ref: JobRef, what: str) -> None:
        self.ref = ref
        self.what = what

    @abc.abstractmethod
    def relist(self) -> bool:
        """List afresh (the first window, or after a 410); True when the state changed."""

    @abc.abstractmethod
    def open(self, server_timeout: int) -> Any:
        """Open a watch from `resource_version` (the raw streamed response)."""

    @abc.abstractmethod
    def apply(self, etype: str, obj: dict[str, Any]) -> bool:
        """Apply an ADDED/MODIFIED/DELETED event; True when the state changed."""

    @abc.abstractmethod
    def view(self) -> T:
        """The state as the watcher receives it (a copy it may keep)."""


class _Interrupt:
    """Lets another thread end a watch: it shuts the open response and no further window starts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._response: Any = None
        self.closed = False

    def opened(self, response: Any) -> bool:
        """Register the window's response; False when the watch was closed meanwhile."""
        with self._lock:
            if self.closed:
                return False
            self._response = response
            return True

    def released(self) -> None:
        with self._lock:
            self._response = None

    def close(self) -> None:
        with self._lock:
            self.closed = True
            if self._response is not None:
                # Wakes the reading thread: closing a socket another thread reads does not.
                shutdown_response(self._response)


def _windows(
    cursor: _Cursor[T],
    retry: Retrier,
    *,
    deadline: float,
    server_watch_seconds: int,
    interrupt: _Interrupt | None = None,
) -> Iterator[T]:
    """The cursor's state now, then after every change, until `deadline` (or the interrupt)."""
    yield cursor.view()
    failures = 0
    throttled = 0.0  # seconds this watch has waited on 429s, a budget of its own (Retrier.wait_throttled)
    what = cursor.what
    while (remaining := deadline - time.monotonic()) > 0 and not (interrupt and interrupt.closed):
        server_timeout = max(1, min(math.ceil(remaining), server_watch_seconds))
        gone = False
        try:
            response = cursor.open(server_timeout)
            if interrupt is not None and not interrupt.opened(response):
                close_response(response)
                return
            try:
                for event in json_lines(response):
                    etype, obj = event.get("type"), event.get("object") or {}
                    if etype not in _EVENT_TYPES:
                        raise BackendError(f"{what}: the server sent something that is not a watch event: "
                                           f"{str(event)[:200]}")  # fmt: skip
                    if etype == "ERROR":
                        if obj.get("code") == 410:
                            gone = True
                            break
                        raise ApiException(status=int(obj.get("code") or 500), reason=str(obj.get("message")))
                    version = str((obj.get("metadata") or {}).get("resourceVersion") or cursor.resource_version)
                    if etype == "BOOKMARK":
                        cursor.resource_version = version
                        if time.monotonic() >= deadline:
                            break  # the caller's window is over; the next call resumes from here
                        continue
                    changed = cursor.apply(str(etype), obj)
                    cursor.resource_version = version
                    failures, throttled = 0, 0.0
                    if changed:
                        yield cursor.view()
            finally:
                if interrupt is not None:
                    interrupt.released()
                close_response(response)
        except ApiException as e:
            if interrupt is not None and interrupt.closed:
                return
            if e.status == 410:
                gone = True
            elif not is_transient(e):
                raise api_error(what, e) from e
            elif e.status == 429:
                throttled += retry.wait_throttled(what, throttled, e)
            else:
                failures += 1
                retry.backoff(what, failures, e)
        except TRANSPORT_ERRORS as e:
            if interrupt is not None and interrupt.closed:
                return  # the watcher closed the stream: the broken read is its doing
            # A connection dropped mid-watch: resume from the last resourceVersion.
            failures += 1
            retry.backoff(what, failures, e)
        if gone:
            # The resourceVersion is too old (compacted): re-list, and report what changed meanwhile.
            logger.info("%s: resourceVersion %s expired; re-listing", what, cursor.resource_version)
            if cursor.relist():
                yield cursor.view()


# -- one job ---------------------------------------------------------------------------------------


class _JobCursor(_Cursor[JobObject]):
    def __init__(self, custom: client.CustomObjectsApi, retry: Retrier, ref: JobRef) -> None:
        super().__init__(ref, f"watch {ref.kind.kind} {ref.namespace}/{ref.name}")
        self._custom = custom
        self._retry = retry
        self.obj: JobObject = {}

    def relist(self) -> bool:
        kind, ref = self.ref.kind, self.ref
        what = f"list {kind.kind} {ref.namespace}/{ref.name}"
        try:
            listing = self._retry.call(
                what, self._custom.list_namespaced_custom_object,
                kind.group, kind.version, ref.namespace, kind.plural,
                field_selector=f"metadata.name={ref.name}", _request_timeout=REQUEST_TIMEOUT,
            )  # fmt: skip
        except ApiException as e:
            raise api_error(what, e) from e
        items = listing.get("items") or []
        if not items:
            raise deleted_error(ref)
        before = (self.obj.get("metadata") or {}).get("resourceVersion")
        self.obj, self.resource_version = items[0], str(listing["metadata"]["resourceVersion"])
        return bool((self.obj.get("metadata") or {}).get("resourceVersion") != before)

    def open(self, server_timeout: int) -> Any:
        kind, ref = self.ref.kind, self.ref
        return self._custom.list_namespaced_custom_object(
            kind.group, kind.version, ref.namespace, kind.plural,
            field_selector=f"metadata.name={ref.name}", watch=True, resource_version=self.resource_version,
            allow_watch_bookmarks=True, timeout_seconds=server_timeout, _preload_content=False,
            _request_timeout=(REQUEST_TIMEOUT[0], server_timeout + WATCH_READ_GRACE_SECONDS),
        )  # fmt: skip

    def apply(self, etype: str, obj: dict[str, Any]) -> bool:
        if etype == "DELETED":
            raise deleted_error(self.ref)
        self.obj = obj
        return True

    def view(self) -> JobObject:
        return copy.deepcopy(self.obj)


class JobWatches:
    """The watches of the jobs one backend follows, each resuming where its last window ended."""

    def __init__(self, custom: client.CustomObjectsApi, retry: Retrier, *, server_watch_seconds: int) -> None:
        self._custom = custom
        self.retry = retry
        self.server_watch_seconds = max(1, int(server_watch_seconds))
        self._cursors: dict[tuple[str, str], _JobCursor] = {}

    def forget(self, ref: JobRef) -> None:
        """Drop the job's resume point (it is being deleted)."""
        self._cursors.pop((ref.namespace, ref.name), None)

    def start_from(self, ref: JobRef, obj: JobObject) -> None:
        """Begin the job's watch at `obj`, as create or get returned it: no list to start with."""
        version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        if not version:
            return
        cursor = _JobCursor(self._custom, self.retry, ref)
        cursor.obj, cursor.resource_version = copy.deepcopy(obj), version
        self._cursors[(ref.namespace, ref.name)] = cursor

    def watch(self, ref: JobRef, *, timeout_seconds: float) -> JobWatch:
        """The job's current state, then every change, for about `timeout_seconds`; closable from any thread."""
        return _KubernetesJobWatch(self, ref, time.monotonic() + timeout_seconds)

    def cursor(self, ref: JobRef) -> _JobCursor:
        """The job's resume point; the first one of a job not created here starts with a list."""
        key = (ref.namespace, ref.name)
        cursor = self._cursors.get(key)
        if cursor is None:
            cursor = _JobCursor(self._custom, self.retry, ref)
            cursor.relist()
            self._cursors[key] = cursor
        return cursor


class _KubernetesJobWatch(JobWatch):
    def __init__(self, owner: JobWatches, ref: JobRef, deadline: float) -> None:
        self._owner = owner
        self._ref = ref
        self._deadline = deadline
        self._interrupt = _Interrupt()

    def __iter__(self) -> Iterator[JobObject]:
        if self._interrupt.closed:
            return
        owner = self._owner
        try:
            yield from _windows(
                owner.cursor(self._ref), owner.retry, deadline=self._deadline,
                server_watch_seconds=owner.server_watch_seconds, interrupt=self._interrupt,
            )  # fmt: skip
        except JobFailedError:
            # The job was deleted: a job created later under its name must not resume this history.
            owner.forget(self._ref)
            raise

    def close(self) -> None:
        self._interrupt.close()


# -- one job's pods ------------------------------------------------------------------------------


class _PodCursor(_Cursor[list[PodInfo]]):
    def __init__(self, core: client.CoreV1Api, retry: Retrier, ref: JobRef) -> None:
        super().__init__(ref, f"watch pods of {ref.kind.kind} {ref.namespace}/{ref.name}")
        self._core = core
        self._retry = retry
        self.pods: dict[str, PodInfo] = {}
        self.listed = False

    def relist(self) -> bool:
        ref = self.ref
        listing = list_job_pods(self._core, self._retry, ref)
        pods = {info.name: info for info in (pod_info(ref.kind, p) for p in listing.get("items") or [])}
        changed = pods != self.pods
        self.pods, self.resource_version = pods, str((listing.get("metadata") or {}).get("resourceVersion") or "")
        self.listed = True
        return changed

    def open(self, server_timeout: int) -> Any:
        ref = self.ref
        return self._core.list_namespaced_pod(
            ref.namespace, label_selector=pod_selector(ref), watch=True, resource_version=self.resource_version,
            allow_watch_bookmarks=True, timeout_seconds=server_timeout, _preload_content=False,
            _request_timeout=(REQUEST_TIMEOUT[0], server_timeout + WATCH_READ_GRACE_SECONDS),
        )  # fmt: skip

    def apply(self, etype: str, obj: dict[str, Any]) -> bool:
        name = str((obj.get("metadata") or {}).get("name") or "")
        if etype == "DELETED":
            return self.pods.pop(name, None) is not None
        info = pod_info(self.ref.kind, obj)
        if self.pods.get(name) == info:
            return False  # a change the launcher does not report (conditions' times, IPs, ...)
        self.pods[name] = info
        return True

    def view(self) -> list[PodInfo]:
        return sorted(self.pods.values(), key=lambda p: (p.replica_type, p.index, p.name))


class _KubernetesPodWatch(PodWatch):
    def __init__(self, owner: PodWatches, cursor: _PodCursor, deadline: float) -> None:
        self._owner = owner
        self._cursor = cursor
        self._deadline = deadline
        self._interrupt = _Interrupt()

    def __iter__(self) -> Iterator[list[PodInfo]]:
        if self._interrupt.closed:
            return
        if not self._cursor.listed:
            self._cursor.relist()
        yield from _windows(
            self._cursor, self._owner.retry, deadline=self._deadline,
            server_watch_seconds=self._owner.server_watch_seconds, interrupt=self._interrupt,
        )  # fmt: skip

    def close(self) -> None:
        self._interrupt.close()


class PodWatches:
    """The pod watches of the jobs one backend follows (label selector of each job's pods)."""

    def __init__(self, core: client.CoreV1Api, retry: Retrier, *, server_watch_seconds: int) -> None:
        self._core = core
        self.retry = retry
        self.server_watch_seconds = max(1, int(server_watch_seconds))
        self._cursors: dict[tuple[str, str], _PodCursor] = {}
        self._lock = threading.Lock()

    def forget(self, ref: JobRef) -> None:
        """Drop the job's resume point (it is being deleted)."""
        with self._lock:
            self._cursors.pop((ref.namespace, ref.name), None)

    def start_from(self, ref: JobRef, resource_version: str) -> None:
        """A job just created has no pods: its pod watch begins at the create's resourceVersion
        (a point in the API server's one history, valid for pods too) instead of with a list."""
        if not resource_version:
            return
        cursor = _PodCursor(self._core, self.retry, ref)
        cursor.resource_version, cursor.listed = resource_version, True
        with self._lock:
            self._cursors[(ref.namespace, ref.name)] = cursor

    def watch(self, ref: JobRef, *, timeout_seconds: float) -> PodWatch:
        """The job's pods now, then after every change, for about `timeout_seconds`; closable from any thread."""
        with self._lock:
            cursor = self._cursors.setdefault((ref.namespace, ref.name), _PodCursor(self._core, self.retry, ref))
        return _KubernetesPodWatch(self, cursor, time.monotonic() + timeout_seconds)
