"""Watching one job on the API server: bounded server-side windows in a reconnect loop.

Each window resumes from the last resourceVersion it saw (bookmarks included), so a dropped
connection loses nothing; a 410 Gone (history compacted) re-lists and reports what changed
meanwhile. Connection errors, 5xx and 429 back off and retry; a DELETED event ends the watch with
the backend's "job deleted" error. The resume point survives between calls, so the launcher's
loop can call `watch` again after each window without a fresh list.
"""

from __future__ import annotations

import copy
import logging
import math
import time
from collections.abc import Iterator
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kubetrain.backends.base import JobObject, JobRef
from kubetrain.backends.kubernetes.errors import api_error, deleted_error
from kubetrain.backends.kubernetes.retry import REQUEST_TIMEOUT, TRANSPORT_ERRORS, Retrier, is_transient
from kubetrain.backends.kubernetes.stream import WatchState, close_response, json_lines
from kubetrain.errors import BackendError

__all__ = ["JobWatches"]

logger = logging.getLogger(__name__)

# A watch window reads for its server-side timeout plus this grace before the client gives up.
WATCH_READ_GRACE_SECONDS = 30.0


class JobWatches:
    """The watches of the jobs one backend follows, each resuming where its last window ended."""

    def __init__(self, custom: client.CustomObjectsApi, retry: Retrier, *, server_watch_seconds: int) -> None:
        self._custom = custom
        self._retry = retry
        self._server_watch_seconds = max(1, int(server_watch_seconds))
        self._states: dict[tuple[str, str], WatchState] = {}

    def forget(self, ref: JobRef) -> None:
        """Drop the job's resume point (it is being deleted)."""
        self._states.pop((ref.namespace, ref.name), None)

    def _relist(self, ref: JobRef) -> WatchState:
        """The job and the list's resourceVersion to watch from (after a start or a 410 Gone)."""
        kind = ref.kind
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
        return WatchState(obj=items[0], resource_version=str(listing["metadata"]["resourceVersion"]))

    def watch(self, ref: JobRef, *, timeout_seconds: float) -> Iterator[JobObject]:
        """The job's current state, then every change, for about `timeout_seconds`."""
        key = (ref.namespace, ref.name)
        deadline = time.monotonic() + timeout_seconds
        state = self._states.get(key) or self._relist(ref)
        self._states[key] = state
        yield copy.deepcopy(state.obj)
        failures = 0
        while (remaining := deadline - time.monotonic()) > 0:
            server_timeout = max(1, min(math.ceil(remaining), self._server_watch_seconds))
            what = f"watch {ref.kind.kind} {ref.namespace}/{ref.name}"
            gone = False
            try:
                response = self._open_watch(ref, state.resource_version, server_timeout)
                try:
                    for event in json_lines(response):
                        etype, obj = event.get("type"), event.get("object") or {}
                        if etype not in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"):
                            raise BackendError(f"{what}: the server sent something that is not a watch event: "
                                               f"{str(event)[:200]}")  # fmt: skip
                        if etype == "ERROR":
                            if obj.get("code") == 410:
                                gone = True
                                break
                            raise ApiException(status=int(obj.get("code") or 500), reason=str(obj.get("message")))
                        version = str((obj.get("metadata") or {}).get("resourceVersion") or state.resource_version)
                        if etype == "BOOKMARK":
                            state.resource_version = version
                            if time.monotonic() >= deadline:
                                break  # the caller's window is over; the next call resumes from here
                            continue
                        if etype == "DELETED":
                            self._states.pop(key, None)
                            raise deleted_error(ref)
                        state.obj, state.resource_version = obj, version
                        failures = 0
                        yield copy.deepcopy(obj)
                finally:
                    close_response(response)
            except ApiException as e:
                if e.status == 410:
                    gone = True
                elif not is_transient(e):
                    raise api_error(what, e) from e
                else:
                    failures += 1
                    self._retry.backoff(what, failures, e)
            except TRANSPORT_ERRORS as e:
                # A connection dropped mid-watch: resume from the last resourceVersion.
                failures += 1
                self._retry.backoff(what, failures, e)
            if gone:
                # The resourceVersion is too old (compacted): re-list, and report what changed meanwhile.
                logger.info("%s: resourceVersion %s expired; re-listing", what, state.resource_version)
                fresh = self._relist(ref)
                changed = fresh.obj.get("metadata", {}).get("resourceVersion") != state.obj.get("metadata", {}).get(
                    "resourceVersion"
                )
                state = self._states[key] = fresh
                if changed:
                    yield copy.deepcopy(fresh.obj)

    def _open_watch(self, ref: JobRef, resource_version: str, server_timeout: int) -> Any:
        kind = ref.kind
        return self._custom.list_namespaced_custom_object(
            kind.group, kind.version, ref.namespace, kind.plural,
            field_selector=f"metadata.name={ref.name}", watch=True, resource_version=resource_version,
            allow_watch_bookmarks=True, timeout_seconds=server_timeout, _preload_content=False,
            _request_timeout=(REQUEST_TIMEOUT[0], server_timeout + WATCH_READ_GRACE_SECONDS),
        )  # fmt: skip
