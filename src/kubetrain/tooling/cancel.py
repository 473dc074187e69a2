"""Stop means stop for `kubetrain run`: its steps, and their jobs, end with it.

`kfp.local` starts every step as a child process and knows nothing of signals: a SIGTERM to the
run used to leave the current step, and the job it launched, running without a parent. Here every
step carries an environment marker (the local backend's container marker, so the same scan finds
it), and:

- SIGTERM, SIGINT or SIGHUP (its terminal closed) to the run sends SIGTERM to the marked steps,
  whose launchers delete their jobs and exit; the run waits for them, stops starting new steps,
  and reports the run as cancelled (exit 5, and its JSON outcome with --json). Further signals
  while it cancels change nothing.
- SIGKILL of the run leaves no chance to act, so a watchdog process (the local backend's) holds
  the marker; when the run dies without saying goodbye, it SIGTERMs the marked steps, whose
  launchers clean up as above, and SIGKILLs what is left after a grace period.

The guard covers the steps only. `kubetrain run` holds the signals for its whole life around it
(`launcher.signals.hold_signals`, passed in as `cancel`): a signal while it loads kfp and the
pipeline sets that event, and the guard then starts no step; on exit the guard restores the
holding handlers, not the default action, so a signal while the outcome is collected and printed
changes nothing, where it used to kill the run with 143 and no JSON.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from kubetrain.backends.local.process import CONTAINER_ENV, ContainerId, container_members, signal_container
from kubetrain.backends.local.watchdog import Watchdog
from kubetrain.launcher.signals import after_hangup, stop_signals

# Time the steps get to delete their jobs and exit after SIGTERM, before SIGKILL. A launcher on
# the local backend stops its replicas within their grace period (a few seconds).
STEP_GRACE_SECONDS = 30.0


# BaseException, so that no `except Exception` inside kfp.local swallows it.
class RunCancelled(BaseException):
    """Raised out of the pipeline call when the run was told to stop."""

    def __init__(self, signal_name: str, *, before_any_step: bool = False) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name
        self.before_any_step = before_any_step


class RunGuard:
    """Marks the steps, forwards stop signals to them and waits for them; see the module docstring."""

    def __init__(self, grace_seconds: float = STEP_GRACE_SECONDS, cancel: threading.Event | None = None) -> None:
        """`cancel`: set by a stop signal that came before the guard (`hold_signals`); set by the guard too."""
        # No session can be -1: membership is by the marker alone (the steps share our session).
        self.steps = ContainerId(sid=-1, token=uuid.uuid4().hex)
        self.grace_seconds = grace_seconds
        self.cancel = cancel if cancel is not None else threading.Event()
        self.signal_name: str | None = None
        self._armed = False
        self._previous: dict[int, Any] = {}
        self._watchdog: Watchdog | None = None

    @property
    def environment(self) -> dict[str, str]:
        """What the steps' environment must carry."""
        return {CONTAINER_ENV: self.steps.token}

    @property
    def cancelled(self) -> bool:
        """Whether a stop signal came."""
        return self.signal_name is not None

    def __enter__(self) -> RunGuard:
        self._watchdog = Watchdog(self.grace_seconds)
        self._watchdog.add(self.steps)
        if threading.current_thread() is threading.main_thread():
            for sig in stop_signals():
                self._previous[sig] = signal.signal(sig, self._handle)
        # Checked after the handlers are in place: a signal comes either before (the event) or after.
        if self.cancel.is_set() and self.signal_name is None:
            self.signal_name = getattr(self.cancel, "signal_name", None) or "SIGTERM"
        return self

    def __exit__(self, *exc: object) -> None:
        self._armed = False
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
        if self._watchdog is not None:
            self._watchdog.close()
            self._watchdog = None

    @contextmanager
    def running_steps(self) -> Iterator[None]:
        """The block that starts steps: a stop signal ends it with RunCancelled, after the steps stopped."""
        if self.cancelled:
            raise RunCancelled(self.signal_name or "SIGTERM", before_any_step=True)
        self._armed = True
        try:
            yield
        finally:
            self._armed = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signal_name is not None:
            return  # already cancelling: a second signal changes nothing
        self.signal_name = signal.Signals(signum).name
        after_hangup(signum)
        self.cancel.set()
        self.stop_steps()
        if self._armed:
            self._armed = False
            raise RunCancelled(self.signal_name)

    def stop_steps(self) -> None:
        """SIGTERM the running steps, wait for them to exit, SIGKILL them past the grace period."""
        signal_container(self.steps, signal.SIGTERM)
        deadline = time.monotonic() + self.grace_seconds
        while container_members(self.steps) and time.monotonic() < deadline:
            time.sleep(0.05)  # nothing notifies us when another process's children exit
        signal_container(self.steps, signal.SIGKILL)
