"""A container's captured output: a log file that followers read as it grows, capped by rotation."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

# The kubelet's default container log size (containerLogMaxSize): a chatty replica keeps at most
# about twice this on disk here.
DEFAULT_MAX_LOG_BYTES = 10 * 1024 * 1024


class LogStream:
    """One container attempt's output: appended to a file, followable while it grows, size-capped.

    Past `max_bytes` the file is rotated, as the kubelet rotates container logs: the current file
    becomes `<file>.1` (replacing an older one, whose bytes are counted as dropped) and a new file
    starts with a line saying so. Followers move on to the new file (:func:`read_log`).
    """

    def __init__(self, path: Path, *, max_bytes: int = DEFAULT_MAX_LOG_BYTES) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.max_bytes = max_bytes
        self._file = path.open("ab")
        self._size = self._file.tell()
        self._cond = threading.Condition()
        self._version = 0
        self._generation = 0
        self.dropped_bytes = 0
        self._closed = False

    @property
    def rotated_path(self) -> Path:
        """Where the previous part of the log is kept after a rotation."""
        return self.path.with_name(self.path.name + ".1")

    def write(self, data: bytes) -> None:
        """Append bytes (rotating first if they would pass the cap) and wake followers."""
        with self._cond:
            if self._closed:
                return
            if self._size and self._size + len(data) > self.max_bytes:
                self._rotate()
            self._file.write(data)
            self._file.flush()
            self._size += len(data)
            self._version += 1
            self._cond.notify_all()

    def _rotate(self) -> None:
        self._file.close()
        if self.rotated_path.exists():
            self.dropped_bytes += self.rotated_path.stat().st_size
        os.replace(self.path, self.rotated_path)
        self._file = self.path.open("ab")
        self._generation += 1
        note = (
            f"[kubetrain: the log passed {self.max_bytes} bytes; the previous part is in {self.rotated_path.name}"
            + (f", {self.dropped_bytes} earlier bytes were dropped" if self.dropped_bytes else "")
            + "]\n"
        ).encode()
        self._file.write(note)
        self._size = len(note)

    def close(self) -> None:
        """No more output will come (the process and every holder of its pipe are gone)."""
        with self._cond:
            if not self._closed:
                self._file.close()
                self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        """Whether the stream has ended."""
        return self._closed

    @property
    def version(self) -> int:
        """A counter that changes with every write."""
        return self._version

    @property
    def generation(self) -> int:
        """A counter that changes with every rotation: the file at `path` is then a new one."""
        return self._generation

    def open_current(self) -> tuple[BinaryIO, int]:
        """The file at `path`, opened for reading, and its generation: both taken under the lock
        a rotation holds, so the file is the one that generation names (read apart, a rotation in
        between would pair a new file with the old generation, and a follower would read it twice)."""
        with self._cond:
            return self.path.open("rb"), self._generation

    def wait_for_change(self, seen: int, timeout: float) -> None:
        """Block until something was written after `seen`, the stream closed, or `timeout`."""
        with self._cond:
            self._cond.wait_for(lambda: self._version != seen or self._closed, timeout=timeout)


def read_log(path: Path, *, stream: LogStream | None, follow: bool, tail_lines: int | None = None) -> Iterator[str]:
    """Lines of a log file (without newlines); with `follow`, keep reading until `stream` closes.

    A follower that reaches the end of a file the stream has since rotated goes on in the new file.
    """
    if not path.exists():
        return
    f, opened = stream.open_current() if stream is not None else (path.open("rb"), 0)
    try:
        if tail_lines is not None:
            lines = f.read().splitlines()
            for raw in lines[-tail_lines:] if tail_lines > 0 else []:
                yield raw.decode("utf-8", "replace")
            return
        partial = b""
        for raw in f:
            if raw.endswith(b"\n") or not follow:
                yield (partial + raw).decode("utf-8", "replace").rstrip("\n")
                partial = b""
            else:
                partial = raw
        if not follow and partial:
            yield partial.decode("utf-8", "replace")
        if not follow or stream is None:
            return
        while True:
            seen = stream.version
            closed = stream.closed
            generation = stream.generation
            raw = f.readline()
            if raw.endswith(b"\n"):
                yield (partial + raw).decode("utf-8", "replace").rstrip("\n")
                partial = b""
                continue
            partial += raw
            if generation != opened:
                # Rotated: the old file is complete (it was closed before the rename); go on in the new one.
                if partial:
                    yield partial.decode("utf-8", "replace")
                    partial = b""
                f.close()
                f, opened = stream.open_current()
                continue
            if closed:
                # Everything was written before the close: what is left is a final unterminated line.
                if partial:
                    yield partial.decode("utf-8", "replace")
                return
            stream.wait_for_change(seen, timeout=1.0)
    finally:
        f.close()
