"""Append downloaded chunks to a file while a second thread hashes them.

Receiving, writing and hashing are the three costs of a verified download. hashlib and file
writes both release the GIL, so hashing chunk *i* on a helper thread while the caller writes it
and receives chunk *i+1* keeps a verified download about as fast as an unverified one (see
bench/download.py). Chunks are hashed strictly in order; a small pool of reusable buffers bounds
memory and avoids allocating per chunk.
"""

from __future__ import annotations

import errno
import queue
import threading
from pathlib import Path
from types import TracebackType
from typing import Any

from kubetrain.data.errors import CACHE_FIX, write_error
from kubetrain.errors import DataError

__all__ = ["CHUNK_SIZE", "HashingSink"]

# 4 MiB reads: per-chunk Python overhead is negligible next to the copy and hash costs.
CHUNK_SIZE = 4 << 20
_BUFFERS = 4


class HashingSink:
    """Context manager: append to `path` from byte `offset` on, feeding `hasher` in order.

    Usage: ``buf = sink.buffer()``, fill it, then ``sink.commit(buf, n)`` (or ``sink.release(buf)``
    when nothing was read). On exit every committed byte is written and hashed.
    """

    def __init__(self, path: Path, offset: int, hasher: Any, *, chunk_size: int = CHUNK_SIZE):
        self.path = path
        self.offset = offset
        self.written = 0
        self._hasher = hasher
        self._free: queue.SimpleQueue[bytearray] = queue.SimpleQueue()
        self._todo: queue.SimpleQueue[tuple[bytearray, int] | None] = queue.SimpleQueue()
        for _ in range(_BUFFERS):
            self._free.put(bytearray(chunk_size))
        self._thread = threading.Thread(target=self._hash_loop, name="sha256", daemon=True)
        self._file: Any = None

    def _hash_loop(self) -> None:
        while (item := self._todo.get()) is not None:
            buf, n = item
            with memoryview(buf) as view:
                self._hasher.update(view[:n])
            self._free.put(buf)

    def __enter__(self) -> HashingSink:
        try:
            # Unbuffered: each chunk goes straight to write(2), with no extra copy.
            self._file = open(self.path, "r+b" if self.offset else "wb", buffering=0)
            self._file.seek(self.offset)
            if self.path.stat().st_size != self.offset:
                self._file.truncate()
        except OSError as e:
            if self._file is not None:
                self._file.close()
            raise DataError(f"{self.path}: cannot open for writing: {e}") from e
        self._thread.start()
        return self

    def buffer(self) -> bytearray:
        """A free buffer to fill (waits while all are still being hashed)."""
        return self._free.get()

    def release(self, buf: bytearray) -> None:
        """Return an unused buffer."""
        self._free.put(buf)

    def commit(self, buf: bytearray, n: int) -> None:
        """Hash (in the background) and write the first `n` bytes of `buf`."""
        self._todo.put((buf, n))
        try:
            with memoryview(buf) as view:
                self._write_all(view[:n])
        except OSError as e:
            # A local disk problem, not a network one: never retried. A full disk keeps no partial
            # file to resume from: there is no room for it to grow anyway.
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                self._file.close()
                if self.path.is_file() and not self.path.is_symlink():  # our partial file, never a device
                    self.path.unlink(missing_ok=True)
            raise write_error(self.path, e, fix=CACHE_FIX) from e
        self.written += n

    def _write_all(self, view: memoryview) -> None:
        # An unbuffered write(2) may write less than asked, without an error (a disk that fills
        # up mid-chunk): write the rest, which then fails with the real error (ENOSPC).
        done = 0
        while done < len(view):
            wrote = self._file.write(view[done:])
            if not wrote:
                raise OSError(errno.ENOSPC, "No space left on device (write made no progress)", str(self.path))
            done += wrote

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._todo.put(None)
        self._thread.join()
        self._file.close()
