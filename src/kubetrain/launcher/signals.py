"""SIGTERM/SIGINT/SIGHUP handling for the launcher: a cancelled KFP run must not leave its job running.

KFP cancels a run by deleting the step's pod: the launcher gets SIGTERM and a grace period. The
guard turns the signal into :class:`Cancelled` at a point where the launcher knows which job to
delete. While the launcher blocks in a watch the signal interrupts it at once ("armed"); while it
creates or deletes the job the signal is only recorded, and acted on right after, so a job is
never created behind the launcher's back or half-deleted. The delete itself does not wait for
the main thread: the stopper (`stopper.py`) reads the signal from the wake-up fd and deletes the
job from its own thread at once, and records the signal here with :meth:`CancelGuard.record`.

Handlers are installed only in the main thread (Python allows no other) and the previous ones are
restored on exit. Callers in other threads cancel through the shared event instead.

A command that ends in `run_job` (`kubetrain launch`, a KFP step) holds the signals for its whole
life with :func:`hold_signals`: a signal before the launcher's guard is up only sets the event (the
launcher then submits nothing), and one after it (while the command reports the cancellation)
changes nothing, where the default action would have killed it with 143 and no report; once the
outcome is printed, :func:`ignore_signals` keeps it so through the interpreter's shutdown.

SIGHUP (the terminal of `kubetrain run` or `launch` closed) stops like SIGTERM: its default action
killed the command at once, leaving no outcome, a temporary directory, and a cluster job nobody
followed. A command started under `nohup` (SIGHUP ignored) keeps ignoring it. After a hang-up the
terminal is gone and every write to it fails (EIO): the command's stdout and stderr, where they
are that terminal, then go to /dev/null, so the clean-up and the outcome file are not cut short.
"""

from __future__ import annotations

import os
import signal
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType, TracebackType
from typing import Any

HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def stop_signals() -> tuple[signal.Signals, ...]:
    """The stop signals to handle now: HANDLED_SIGNALS, less SIGHUP where it is ignored (`nohup`)."""
    return tuple(sig for sig in HANDLED_SIGNALS if sig != signal.SIGHUP or signal.getsignal(sig) != signal.SIG_IGN)


def after_hangup(signum: int) -> None:
    """On SIGHUP, point stdout and stderr away from the terminal that hung up (writes to it fail)."""
    if signum != signal.SIGHUP:
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        for fd in (1, 2):
            try:
                # Not isatty(): on a terminal that hung up it fails (EIO) and says False. A character
                # device is a terminal (or /dev/null already); pipes and files keep working.
                if stat.S_ISCHR(os.fstat(fd).st_mode):
                    os.dup2(devnull, fd)
            except OSError:
                continue  # a closed descriptor: nothing will be written there anyway
    finally:
        os.close(devnull)


class SignalEvent(threading.Event):
    """An event set by a stop signal, which also remembers the first signal's name (for the report)."""

    def __init__(self) -> None:
        super().__init__()
        self.signal_name: str | None = None


def hold_signals() -> SignalEvent:
    """For the rest of a command's life: SIGTERM, SIGINT and SIGHUP only set the returned event.

    Pass the event to `run_job` (or `kubetrain run`'s guard) as `cancel`. Installed only from the
    main thread (elsewhere the event is returned unconnected); meant for a command's entry point,
    which exits soon after. A guard installed later restores these handlers when it exits, so the
    command stays protected until :func:`ignore_signals`.
    """
    event = SignalEvent()
    if threading.current_thread() is threading.main_thread():

        def record(signum: int, frame: FrameType | None) -> None:
            # Python runs a handler between any two bytecodes, inside a running handler too: in a
            # storm of signals each call would be interrupted by the next (RecursionError), or call
            # set() while the interrupted set() holds the event's lock (a deadlock). Only the first
            # signal does anything; the name is recorded before set(), so nested calls return.
            if event.signal_name is not None:
                return
            event.signal_name = signal.Signals(signum).name
            after_hangup(signum)
            event.set()

        for sig in stop_signals():
            signal.signal(sig, record)
    return event


def ignore_signals() -> None:
    """The command's outcome is decided: from now on SIGTERM, SIGINT and SIGHUP are ignored by the OS.

    A Python-level handler is not enough at the very end: the interpreter restores the default
    action while it shuts down (but keeps an "ignore"), and a signal then ends the process with 143.
    """
    if threading.current_thread() is threading.main_thread():
        for sig in stop_signals():
            signal.signal(sig, signal.SIG_IGN)


# BaseException, so that no `except Exception` between the signal and the launcher swallows it.
class Cancelled(BaseException):
    """Raised inside the launcher when it has been told to stop."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name


class CancelGuard:
    """Context manager: installs the handlers, and raises Cancelled where it is safe to."""

    def __init__(self, event: threading.Event) -> None:
        self.event = event
        self.signal_name: str | None = None
        self._armed = False
        self._handling = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> CancelGuard:
        if threading.current_thread() is threading.main_thread():
            for sig in stop_signals():
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._armed = False
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self._handling:
            return  # a signal inside this handler (a storm, see hold_signals): the outer call acts
        self._handling = True
        try:
            if self.signal_name is None:
                self.signal_name = signal.Signals(signum).name
                after_hangup(signum)
            if not self.event.is_set():
                self.event.set()
        finally:
            self._handling = False
        if self._armed:
            self._armed = False  # a second signal during clean-up must not interrupt the delete
            raise Cancelled(self.signal_name)

    def record(self, signal_name: str) -> None:
        """A stop signal seen outside the handler (the stopper's thread reads it from the wake-up fd
        before the main thread runs the handler): recorded as the handler records it, never raised."""
        if self.signal_name is None:
            self.signal_name = signal_name
        self.event.set()

    def check(self) -> None:
        """Raise Cancelled if a signal came (or the event was set) since the last check."""
        if self.event.is_set():
            raise Cancelled(self.signal_name or "cancel requested")

    @contextmanager
    def interruptible(self) -> Iterator[None]:
        """A block the signal may interrupt at any point (blocking reads of a watch)."""
        self.check()
        self._armed = True
        try:
            yield
        finally:
            self._armed = False
        self.check()
