"""The job's pods as the launcher sees them: one pod stream per job, and what it remembers of them.

The launcher used to list pods on a timer while the job was pending and once at its end, so a pod
that crashed and was deleted in between was never seen: a batch Job's controller deletes the pod
of a Job that passed its backoffLimit (under restartPolicy OnFailure it counts container
restarts) before the JobSet, and a TrainJob, fail; the error then named no pod. Here a
:class:`PodTracker` thread follows the backend's pod stream (a watch resumed from its
resourceVersion on a cluster, the supervisor's notifications locally), so that:

- every change reaches the progress lines and the log follower as it happens (a restart, a
  CrashLoopBackOff, a Failed pod, a deleted pod), with no request while nothing changes;
- a crashed container's log tail is read at once, while its pod still exists;
- the last-known state of every pod is kept after the pod is gone (:class:`PodBook`), so a failed
  job's error names every pod that failed or crashed, with its tail.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from kubetrain.backends.base import Backend, JobRef, PodInfo, PodWatch
from kubetrain.errors import BackendError
from kubetrain.launcher.logs import crash_tail, failed_pods
from kubetrain.launcher.options import spread_window
from kubetrain.launcher.progress import LogSink

logger = logging.getLogger(__name__)

PodListener = Callable[[list[PodInfo]], None]


@dataclass(frozen=True)
class CrashTail:
    """A crashed container's log tail, read while its pod existed."""

    pod: PodInfo  # the pod as it was when the tail was read
    text: str


def crashed(old: PodInfo | None, new: PodInfo) -> bool:
    """Whether `new` shows a crash that `old` (None: not seen before) did not: a container
    restart, CrashLoopBackOff, or the Failed phase."""
    if new.restart_count > (old.restart_count if old is not None else 0):
        return True
    if new.phase == "Failed" and (old is None or old.phase != "Failed"):
        return True
    return new.reason == "CrashLoopBackOff" and (old is None or old.reason != "CrashLoopBackOff")


def crash_summary(pod: PodInfo) -> str:
    """`Running, CrashLoopBackOff, restart 7, exit code 1`: a pod's state as it crashed."""
    parts = [pod.phase, pod.reason]
    if pod.restart_count:
        parts.append(f"restart {pod.restart_count}")
    if pod.exit_code is not None:
        parts.append(f"exit code {pod.exit_code}")
    return ", ".join(part for part in parts if part)


class PodBook:
    """The last-known state of every pod of one job, also of pods that are gone, and crash tails.

    Not locked itself: its :class:`PodTracker` serializes every access.
    """

    def __init__(self) -> None:
        self.alive: dict[str, PodInfo] = {}
        self.gone: dict[str, PodInfo] = {}
        self.tails: dict[str, CrashTail] = {}

    def update(self, pods: Iterable[PodInfo]) -> list[PodInfo]:
        """Take the job's pods now; returns those that crashed since the last set."""
        now = {pod.name: pod for pod in pods}
        crashes = [pod for name, pod in now.items() if crashed(self.alive.get(name, self.gone.get(name)), pod)]
        for name, pod in self.alive.items():
            if name not in now:
                self.gone[name] = pod
        for name in now:
            self.gone.pop(name, None)
        self.alive = now
        return crashes

    def failed(self) -> list[PodInfo]:
        """Every pod that failed or crashed, as last seen, whether or not it still exists."""
        everyone = sorted([*self.alive.values(), *self.gone.values()], key=lambda p: (p.replica_type, p.index, p.name))
        return failed_pods(everyone)


class PodTracker(threading.Thread):
    """Follows one job's pods: tells `listeners` of every new set, keeps the book, reads crash tails.

    The stream is read in windows of at most `window_seconds` (spread_window; each resumes where
    the last ended).
    :meth:`stop` closes it from the launcher's thread; after that nothing the thread still sees
    counts, and :meth:`settle` hands the listeners and the book the launcher's own final look.
    """

    def __init__(
        self,
        backend: Backend,
        ref: JobRef,
        *,
        listeners: Sequence[PodListener],
        sink: LogSink,
        tail_lines: int,
        window_seconds: float,
    ) -> None:
        super().__init__(name=f"kubetrain-pods-{ref.name}", daemon=True)
        self._backend = backend
        self._ref = ref
        self._listeners = tuple(listeners)
        self._sink = sink
        self._tail_lines = tail_lines
        self._window = window_seconds
        self.book = PodBook()
        # Held while a pod set is taken in, so that stop() returns only between two sets.
        self._lock = threading.Lock()
        self._stopped = False
        self._stream: PodWatch | None = None
        self.failed = False  # the pod stream broke off (an old Role without pods/watch): nothing seen since

    def run(self) -> None:
        """Thread body: one window after another until stopped; a failed stream is reported, not raised."""
        try:
            while self._one_window():
                pass
        except BackendError as e:
            with self._lock:
                if self._stopped:
                    return
                self.failed = True
            self._sink(f"following the pods of the job stopped: {e}; they are looked at again when the job ends")

    def _one_window(self) -> bool:
        with self._lock:
            if self._stopped:
                return False
            stream = self._stream = self._backend.watch_pods(self._ref, timeout_seconds=spread_window(self._window))
        try:
            for pods in stream:
                with self._lock:
                    if self._stopped:
                        return False
                    crashes = self._take(pods)
                # Read now: the pod's controller may delete it before the job fails (a Job past its
                # backoffLimit), and with it the only copy of why it crashed. Outside the lock, so
                # that stop() never waits on a log read longer than its own bound.
                for pod in crashes:
                    self._capture(pod)
        finally:
            stream.close()
        return True

    def _capture(self, pod: PodInfo) -> None:
        try:
            text = crash_tail(self._backend, self._ref, pod, self._tail_lines)
        except BackendError as e:
            with self._lock:
                if pod.name in self.book.tails:
                    return  # gone already: the tail read at its earlier crash stays
            text = f"<log unavailable: {e}>"
        with self._lock:
            self.book.tails[pod.name] = CrashTail(pod, text)

    def _take(self, pods: list[PodInfo]) -> list[PodInfo]:
        crashes = self.book.update(pods)
        for listener in self._listeners:
            listener(pods)
        return crashes

    def stop(self, timeout: float) -> None:
        """Close the stream and wait for the thread (a crash tail it is reading included), at most
        `timeout`; whatever it sees after this call is ignored."""
        with self._lock:
            self._stopped = True
            stream = self._stream
        if stream is not None:
            stream.close()
        if self.ident is not None and self is not threading.current_thread():
            self.join(timeout)
        if self.is_alive():
            logger.debug("pod tracker still busy after %.0fs; it is a daemon thread and ends with its window", timeout)

    def settle(self, pods: list[PodInfo]) -> None:
        """After :meth:`stop`: the launcher's final look at the pods, for the listeners and the book.

        No tails are read here: the launcher reads those of the pods still there itself.
        """
        with self._lock:
            self._take(pods)
