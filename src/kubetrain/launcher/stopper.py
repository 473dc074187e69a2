"""The launcher's delete on a stop signal, sent from a thread of its own the moment the signal comes.

In a KFP step the launcher has about a second after SIGTERM: Argo's emissary (PID 1 of the step's
container) forwards the signal to KFP's launcher, which dies at once, and the emissary then exits,
killing every process left in the container, this one included. A delete that waits for the main
thread (its next check, or the end of a call it is blocked in) may never be sent. So:

- the signal wakes the stopper's thread directly: Python's C-level handler writes the signal's
  number to a pipe (`signal.set_wakeup_fd`) before any Python code runs, whatever the main thread
  is doing; the guard's handler and a `cancel` event seen by the loop wake it too;
- the thread deletes the job at once, by its uid (the backend's delete carries it);
- nothing is created after a stop: a submission not yet begun is refused, and one in flight is
  followed by the delete of what it created (or adopted) as soon as it returns.

This narrows the race; it does not win it. What guarantees the delete is the reaper
(kubetrain.reaper), outside the step.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType

from kubetrain.backends.base import Backend, JobRef
from kubetrain.errors import KubetrainError
from kubetrain.launcher.progress import LogSink
from kubetrain.launcher.signals import HANDLED_SIGNALS, CancelGuard, Cancelled

logger = logging.getLogger(__name__)

_STOP_SIGNALS = frozenset(int(s) for s in HANDLED_SIGNALS)
_WAKE = b"\0"  # not a signal number: a wake-up from this process's own code


class Stopper:
    """Context manager: a thread that deletes the submitted job as soon as a stop is requested."""

    def __init__(self, backend: Backend, guard: CancelGuard, sink: LogSink) -> None:
        self.backend = backend
        self.guard = guard
        self.sink = sink
        self._lock = threading.Lock()
        self._ref: JobRef | None = None
        self._creating = False
        self._stopping: str | None = None  # why (a signal's name), once a stop is requested
        self._closing = False
        self._deleted: JobRef | None = None
        self._error: BaseException | None = None
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._write_fd, False)  # set_wakeup_fd requires it; a full pipe already wakes
        self._previous_wakeup: int | None = None
        self._thread = threading.Thread(target=self._run, name="kubetrain-stopper", daemon=True)

    def __enter__(self) -> Stopper:
        if threading.current_thread() is threading.main_thread():
            self._previous_wakeup = signal.set_wakeup_fd(self._write_fd, warn_on_full_buffer=False)
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._previous_wakeup is not None:
            signal.set_wakeup_fd(self._previous_wakeup)
            self._previous_wakeup = None
        with self._lock:
            self._closing = True
        self._wake()
        # A delete in progress is not cut short: the process may exit right after this.
        self._thread.join()
        os.close(self._read_fd)
        os.close(self._write_fd)

    # -- the main thread's side --------------------------------------------------------------------

    @property
    def stopping(self) -> str | None:
        """Why a stop was requested (a signal's name), or None."""
        return self._stopping

    @contextmanager
    def submitting(self) -> Iterator[None]:
        """Around the create: refused once a stop came; call :meth:`submitted` with its result
        inside the block (its end lets a waiting stop go ahead)."""
        with self._lock:
            if self._stopping is not None:
                raise Cancelled(self._stopping)
            self._creating = True
        try:
            yield
        finally:
            with self._lock:
                self._creating = False
            self._wake()  # a stop that came during the create: the thread deletes what it made

    def submitted(self, ref: JobRef) -> None:
        """The job the create made (or adopted): the one a stop deletes."""
        with self._lock:
            self._ref = ref

    def release(self) -> None:
        """The job has ended: a stop no longer deletes it (the loop's delete policy decides)."""
        with self._lock:
            self._ref = None

    def request_stop(self, why: str) -> None:
        """Ask for the delete now (a stop the loop saw: the guard's handler, a `cancel` event)."""
        with self._lock:
            if self._stopping is None:
                self._stopping = why
        self._wake()

    def finish(self, why: str) -> JobRef | None:
        """Request the stop if not yet, wait for the thread's delete, and return the job it deleted
        (None: there was none); the delete's error is raised here."""
        self.request_stop(why)
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._deleted

    # -- the thread ----------------------------------------------------------------------------------

    def _wake(self) -> None:
        # A full pipe holds wake-ups already: the thread will read them.
        with contextlib.suppress(BlockingIOError):
            os.write(self._write_fd, _WAKE)

    def _drain(self) -> None:
        """Block until something writes to the pipe; read what is there and note a stop signal."""
        select.select([self._read_fd], [], [])
        data = os.read(self._read_fd, 512)
        for number in data:
            if number in _STOP_SIGNALS:
                name = signal.Signals(number).name
                with self._lock:
                    if self._stopping is None:
                        self._stopping = name
                # The main thread's handler may run much later (a blocking call it is in may not
                # return for the signal): the guard's event tells every other thread now.
                self.guard.record(name)
            elif number and self._previous_wakeup not in (None, -1):
                # Another signal's wake-up, meant for whoever set the wake-up fd before us.
                try:
                    os.write(self._previous_wakeup, bytes([number]))
                except OSError:
                    logger.debug("could not pass signal %d to the previous wake-up fd", number)

    def _run(self) -> None:
        while True:
            self._drain()
            with self._lock:
                if self._stopping is None:
                    if self._closing:
                        return
                    continue
                if self._creating:
                    continue  # the create returns soon: its end wakes this thread again
                ref, why = self._ref, self._stopping
            if ref is not None:
                self._delete(ref, why)
            return

    def _delete(self, ref: JobRef, why: str) -> None:
        label = f"{ref.kind.kind} {ref.namespace}/{ref.name}"
        self.sink(f"{why}: deleting {label}")
        try:
            self.backend.delete(ref)
        except (KubetrainError, OSError) as e:
            self._error = e
            return
        self._deleted = ref
