"""The program's log on its way to the launcher's own output: relayed up to a cap.

The followed pod's log is written to the launcher's output line by line, which a KFP step's log,
`kubetrain run`'s `run.log` and its console (stderr with `--json`) all keep. A pod's own log is
capped (the kubelet rotates it; the local backend too), but a relay of it was not: a program
printing 100 MB made a 141 MB `run.log`. So the relay stops after `max_bytes` (10 MiB by default,
the kubelet's containerLogMaxSize), says so once, keeps only the last lines it did not relay, and
at the job's end says how much it left out and where the whole log is, then shows those last
lines (the final metrics a program prints are usually there). A single line is cut at
`MAX_LINE_CHARS`. Lines left out still count as output for the silence notice.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable

from kubetrain.launcher.progress import LogSink

DEFAULT_MAX_RELAYED_BYTES = 10 * 1024 * 1024
MAX_LINE_CHARS = 16 * 1024
TAIL_LINES = 20


def _size(n: int) -> str:
    return f"{n / 1024 / 1024:.1f} MiB" if n >= 1024 * 1024 else f"{n} bytes"


class CappedRelay:
    """A log sink that passes at most `max_bytes` of lines on to `sink` (see the module docstring)."""

    def __init__(
        self,
        sink: LogSink,
        *,
        max_bytes: int = DEFAULT_MAX_RELAYED_BYTES,
        heard: Callable[[], None] = lambda: None,
        where: Callable[[], str] = lambda: "",
    ) -> None:
        """`heard`: called for a line left out (it is output all the same); `where`: where the whole log is."""
        self._sink = sink
        self._max = max_bytes
        self._heard = heard
        self._where = where
        self._lock = threading.Lock()
        self._relayed = 0
        self._capped = False
        self._dropped_lines = 0
        self._dropped_bytes = 0
        self._tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)

    def line(self, text: str) -> None:
        """Relay one line, or keep it among the last ones left out once the cap is reached."""
        if len(text) > MAX_LINE_CHARS:
            text = f"{text[:MAX_LINE_CHARS]} [kubetrain: {len(text) - MAX_LINE_CHARS} more characters of this line]"
        size = len(text.encode(errors="replace")) + 1
        with self._lock:
            if not self._capped and self._relayed + size <= self._max:
                self._relayed += size
                notice = None
            else:
                notice, self._capped = not self._capped, True
                self._dropped_lines += 1
                self._dropped_bytes += size
                self._tail.append(text)
        if notice is None:
            self._sink(text)
            return
        if notice:
            self._sink(
                f"[kubetrain: the program's log passed {_size(self._max)}; the launcher relays no more of it "
                f"(its last {TAIL_LINES} lines come at the end)]"
            )
        self._heard()

    def finish(self) -> None:
        """Say what was left out, and show its last lines (once)."""
        with self._lock:
            lines, size, tail = self._dropped_lines, self._dropped_bytes, list(self._tail)
            self._dropped_lines, self._dropped_bytes = 0, 0
            self._tail.clear()
        if not lines:
            return
        where = self._where()
        self._sink(
            f"[kubetrain: {lines} lines ({_size(size)}) of the program's log were not relayed"
            + (f"; {where}" if where else "")
            + (f"; the last {len(tail)}:]" if tail else "]")
        )
        for text in tail:
            self._sink(text)
