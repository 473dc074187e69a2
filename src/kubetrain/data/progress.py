"""Download progress: a redrawn bar on a terminal, periodic plain lines anywhere else (pod logs).

Updates are cheap (one add and one clock read per chunk) so a multi-GB/s transfer does not pay
for its own progress reporting; output is throttled to a few redraws a second on a terminal and
one line every `line_interval` seconds otherwise.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["Progress", "format_bytes"]

_BAR_WIDTH = 30
_BAR_INTERVAL = 0.2


def format_bytes(n: float) -> str:
    """Human-readable byte count, e.g. ``12.3 MB`` (decimal units, like curl)."""
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


class Progress:
    """Progress of one transfer of `total` bytes (None when the size is unknown)."""

    def __init__(
        self,
        label: str,
        total: int | None,
        *,
        stream: TextIO | None = None,
        tty: bool | None = None,
        line_interval: float = 10.0,
        enabled: bool = True,
    ) -> None:
        self.label = label
        self.total = total
        self.done = 0
        self._stream = stream if stream is not None else sys.stderr
        self._tty = self._stream.isatty() if tty is None else tty
        self._interval = _BAR_INTERVAL if self._tty else line_interval
        self._enabled = enabled
        self._start = time.monotonic()
        self._last = self._start
        self._start_done = 0

    def restart(self, done: int, total: int | None) -> None:
        """Start (or resume) at `done` bytes of `total`; the rate counts only new bytes."""
        self.done = done
        self.total = total
        self._start = time.monotonic()
        self._start_done = done

    def update(self, n: int) -> None:
        """Count `n` more bytes and redraw if the throttle interval has passed."""
        self.done += n
        now = time.monotonic()
        if now - self._last >= self._interval:
            self._last = now
            self._emit(now, final=False)

    def note(self, message: str) -> None:
        """Print a one-off message (a retry, a cache hit) on its own line."""
        if self._enabled:
            # On a terminal the bar has no newline yet: end it so the message gets its own line.
            self._stream.write(("\r\x1b[K" if self._tty else "") + f"{self.label}: {message}\n")
            self._stream.flush()

    def close(self) -> None:
        """Draw the final state and end the line."""
        self._emit(time.monotonic(), final=True)

    def _emit(self, now: float, *, final: bool) -> None:
        if not self._enabled:
            return
        elapsed = max(now - self._start, 1e-9)
        rate = (self.done - self._start_done) / elapsed
        size = format_bytes(self.done)
        if self.total:
            frac = min(self.done / self.total, 1.0)
            size += f" / {format_bytes(self.total)} ({frac:4.0%})"
        text = f"{self.label}: {size} {format_bytes(rate)}/s"
        if self._tty:
            if self.total:
                filled = int(frac * _BAR_WIDTH)
                text = f"{self.label} [{'#' * filled}{'.' * (_BAR_WIDTH - filled)}] " + text[len(self.label) + 2 :]
            # \x1b[K clears what a longer earlier line left behind.
            self._stream.write("\r" + text + "\x1b[K" + ("\n" if final else ""))
        else:
            self._stream.write(text + (" done" if final else "") + "\n")
        self._stream.flush()
