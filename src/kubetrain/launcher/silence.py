"""A notice when the followed log has said nothing for a while.

A job whose program waits (a rank blocked in a collective because a peer exited, an elastic
agent waiting for nodes, a slow data read) prints nothing; without a word from the launcher a
user cannot tell a waiting job from a dead launcher until `timeout_seconds` (a day by default).
Every `after_seconds` of silence, the launcher says so, once per stretch. When the program's log is
not followed (`launch --no-logs`), the launcher's own lines (status changes) are what is watched.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from kubetrain.launcher.progress import LogSink

__all__ = ["SilenceWatch"]


def _duration(seconds: float) -> str:
    minutes = seconds / 60
    return f"{minutes:.0f} minute{'s' if round(minutes) != 1 else ''}" if minutes >= 1 else f"{seconds:.0f} s"


class SilenceWatch(threading.Thread):
    """Passes log lines to `sink` (:meth:`line`); says when none came for `after_seconds`."""

    def __init__(
        self,
        sink: LogSink,
        *,
        after_seconds: float,
        logs_followed: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`logs_followed=False`: the lines are the launcher's own (status changes), not the program's."""
        super().__init__(name="kubetrain-silence", daemon=True)
        self._sink = sink
        self._logs_followed = logs_followed
        self._after = after_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._last = clock()
        self._said = 0  # notices in this stretch of silence
        self._stop = threading.Event()

    def line(self, text: str) -> None:
        """A log line: to the sink, and the silence starts again."""
        self.heard()
        self._sink(text)

    def heard(self) -> None:
        """Output that is not passed on (a line past the relay's cap): the silence starts again all the same."""
        with self._lock:
            self._last = self._clock()
            self._said = 0

    def check(self) -> float:
        """Say so if a notice is due; returns the seconds until the next one could be."""
        with self._lock:
            quiet = self._clock() - self._last
            due = (self._said + 1) * self._after
            if quiet < due:
                return due - quiet
            self._said += 1
        what = "no log output" if self._logs_followed else "no news from the job"
        why = "" if self._logs_followed else "; its logs are not followed"
        self._sink(
            f"{what} for {_duration(quiet)}; the job is still running (its program may be waiting "
            f"for a peer or for data; the job ends at its timeout_seconds{why})"
        )
        return self._after

    def run(self) -> None:
        """Check until stopped."""
        wait = self._after
        while not self._stop.wait(wait):
            wait = self.check()

    def stop(self) -> None:
        """End the thread (at its next wake-up)."""
        self._stop.set()
