"""The master's watch on its job's worker pods: the backend's pod watch, turned into worker changes.

Runs in a thread of the master's process. Each window of the backend's watch resumes where the
last one ended, so nothing is missed between windows. Where the master may not watch pods (its
service account lacks deploy/rbac.yaml's `kubetrain-ps-master` role), the watch says so in one line
and ends: the job runs on, and a lost worker's tasks go back on the queue when its lease runs out.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from kubetrain.backends.base import Backend, JobRef, PodInfo, PodWatch
from kubetrain.elastic.worker_pods import WORKER_REPLICA, WorkerChange, worker_changes
from kubetrain.errors import BackendError

__all__ = ["WorkerPodWatch"]

WINDOW_SECONDS = 300.0


class WorkerPodWatch:
    """Follows one job's worker pods and hands every change to `on_change`, until stopped."""

    def __init__(
        self,
        backend: Backend,
        ref: JobRef,
        on_change: Callable[[WorkerChange], None],
        *,
        log: Callable[[str], None] = print,
        window_seconds: float = WINDOW_SECONDS,
    ) -> None:
        self._backend = backend
        self._ref = ref
        self._on_change = on_change
        self._log = log
        self._window = window_seconds
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._current: PodWatch | None = None  # the open window, closed by stop()

    def run(self) -> None:
        """Follow the pods until :meth:`stop`; returns early, after one line, if the API refuses."""
        known: dict[str, PodInfo] = {}
        while not self._stopped.is_set():
            stream = self._backend.watch_pods(self._ref, timeout_seconds=self._window)
            with self._lock:
                if self._stopped.is_set():
                    return
                self._current = stream
            try:
                for pods in stream:
                    for change in worker_changes(known, pods):
                        self._on_change(change)
                    known = {p.name: p for p in pods if p.replica_type == WORKER_REPLICA}
            except BackendError as e:
                self._log(
                    f"worker pod watch off ({e}); a lost worker's tasks go back on the queue when its lease "
                    "runs out. Bind deploy/rbac.yaml's kubetrain-ps-master role to the job's service account."
                )
                return
            finally:
                with self._lock:
                    self._current = None
                stream.close()

    def stop(self) -> None:
        """End :meth:`run` from any thread (a read blocked on the network returns). Idempotent."""
        with self._lock:
            self._stopped.set()
            current = self._current
        if current is not None:
            current.close()
